"""bench_hf.py's second table: an SCST step on a transformers captioner sampled with autograd through every step
against sampled without it and scored in one teacher-forced pass (rlcap.models.base.ScoresSamples), and an XE
step at the same batch for comparison: samples (captions) a second and peak memory.

Each row is a child process of its own (its peak RSS is its own: the policy, the optimizer's state, the steps):

* ``xe``: ``rlcap.methods.xe.xe_step`` on the images' COCO references, ``SAMPLES`` an image, cut at ``MAX_LEN``
  tokens as ``data.max_len`` cuts them;
* ``autograd``: ``rlcap.methods.scst.scst_step`` with ``policy.scores_samples = False``: every decoding step with
  autograd, its keys and values and graph kept for the backward pass (rlcap before sample-then-score);
* ``scored``: the same step as a run takes it: sampled under ``torch.no_grad``, then one scoring pass;
* ``scored_mb``: with ``rl.micro_batch`` (the scoring pass in micro-batches, each run once, in the backward
  pass, from the sampling steps' own values: rlcap.decoding.scoring).

The SCST steps sample ``SAMPLES`` captions an image of at most ``MAX_LEN`` tokens (random weights seldom end a
caption, so about ``MAX_LEN``), greedy baseline, CIDEr-D against the COCO references; the policy in training mode.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

MODES = ("xe", "autograd", "scored", "scored_mb")
LABELS = {"xe": "XE (teacher forcing)", "autograd": "SCST, autograd through sampling",
          "scored": "SCST, sample then score", "scored_mb": "SCST, sample then score, rl.micro_batch={mb}"}
GOAL_XE_RATIO, GOAL_MB_GB = 1.2, 4.5  # the goals: SCST's peak at most 1.2x XE's; under 4.5 GB with micro-batches


def measure_step(folder: Path, images: int, device: str, precision: str, mode: str, micro_batch: int, steps: int,
                 budget: float, refs: dict[str, list[str]], samples: int, max_len: int, threads: int) -> dict:
    """In a child process: one warm-up step on 2 images, then up to ``steps`` timed steps of ``mode`` (MODES) on
    ``images`` images, ``budget`` seconds at most after the first."""
    import torch

    from rlcap.data.feats import Feats
    from rlcap.data.loader import Batch, CaptionData
    from rlcap.data.vocab import EOS, PAD
    from rlcap.devices import autocast
    from rlcap.methods import load_run_config
    from rlcap.methods.scst import scst_step
    from rlcap.methods.xe import xe_step
    from rlcap.models import build_model, model_vocab
    from rlcap.rewards import build_reward
    from rlcap.train.session import Progress, Session, add_part

    if device == "cpu":
        torch.set_num_threads(threads)
    cuda, dev = device.startswith("cuda"), torch.device(device)
    torch.manual_seed(0)
    algorithm = "xe" if mode == "xe" else "scst"
    cfg = load_run_config(None, [f"algorithm={algorithm}", "model.arch=hf", f"model.path={folder}",
                                 f"data.max_len={max_len}", "track.to=[]", f"device={device}",
                                 f"precision={precision}"] + ([] if mode == "xe" else [
        f"rl.n_samples={samples}", f"rl.batch_size={images}", f"decode.max_len={max_len}",
        f"rl.micro_batch={micro_batch if mode == 'scored_mb' else 0}"]))
    vocab = model_vocab(cfg.model)
    tokens = torch.load(folder / "tokens.pt")[:images].to(dev)  # (B, T, D) the tower's tokens
    width = tokens.shape[-1]
    session = Session(cfg, CaptionData(vocab, {}), {}, Progress(), Path("."), device=dev)
    policy = add_part(session, "policy", build_model(cfg.model, len(vocab), width, width), cfg.optim).module
    policy.scores_samples = mode != "autograd"
    policy.train()
    rss_model = peak_rss_mb()
    ids = list(refs)[:images]
    mask = torch.ones(tokens.shape[:2], dtype=torch.bool, device=dev)
    captions = _caption_tokens(vocab, [refs[i][:samples] for i in ids], max_len).to(dev)  # (B*samples, <= max_len+2)

    def step(n: int) -> float:
        """One step on the first n images; the tokens a caption, EOS not counted (the XE targets', the samples')."""
        feats = Feats(tokens[:n, 0], tokens[:n], mask[:n])
        with autocast(dev, precision):
            if mode == "xe":
                xe_step(session, captions[:n * samples], feats)
                targets = captions[:n * samples, 1:]
                return float(((targets != PAD) & (targets != EOS)).sum()) / (n * samples)
            batch = Batch(torch.arange(n), ids[:n], feats, torch.empty(0, 0), [refs[i] for i in ids[:n]])
            return float(scst_step(session, batch, reward)["length"])

    reward = None if mode == "xe" else build_reward(cfg.reward, refs)
    step(min(2, images))  # warm-up (the optimizer's state made)
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    seconds, lengths = [], []
    while len(seconds) < steps and (not seconds or sum(seconds) < budget):
        start = time.perf_counter()
        lengths.append(step(images))
        if cuda:
            torch.cuda.synchronize(dev)
        seconds.append(time.perf_counter() - start)
    per_step = sum(seconds) / len(seconds)
    return {"mode": mode, "micro_batch": micro_batch if mode == "scored_mb" else 0, "images": images,
            "samples": samples, "steps": len(seconds), "step_s": per_step, "samples_per_s": images * samples / per_step,
            "tokens_per_caption": sum(lengths) / len(lengths), "peak_rss_mb": peak_rss_mb(),
            "rss_model_mb": rss_model,
            "peak_gpu_gb": torch.cuda.max_memory_allocated(dev) / 1024 ** 3 if cuda else None}


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: the kernel's high-water mark of its address space
    (``VmHWM``), which starts anew at ``exec``; ``ru_maxrss`` keeps the peak of the process before the
    ``exec`` (the parent's, when it forked), so a child's figure is never below its parent's."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # (no /proc; kB on Linux)


def _caption_tokens(vocab, captions: list[list[str]], max_len: int):
    """The references as XE reads them: BOS, at most ``max_len`` ids, EOS, PAD after (rlcap.data.loader)."""
    import torch

    from rlcap.data.vocab import BOS, EOS, PAD
    from rlcap.metrics.tokenize import tokenize

    rows = [[BOS, *vocab.encode(tokenize(c))[:max_len], EOS] for refs in captions for c in refs]
    out = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)  # cpu: moved by the caller
    for r, row in enumerate(rows):
        out[r, :len(row)] = torch.tensor(row)  # cpu: as above
    return out


def table(rows: list[dict], gpu: bool) -> list[str]:
    """One line a (size, precision, mode); the peak against XE's of the same size, precision and batch."""
    memory = "peak GPU memory" if gpu else "peak RSS"
    lines = [f"| size | {'precision | ' if gpu else ''}images x captions | step | captions/s | s a step | tokens a "
             f"caption | {memory} | / XE's |", "|---|" + ("---|" if gpu else "") + "---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        xe = _xe_of(rows, r)
        ratio = f"{_peak(r) / _peak(xe):.2f}x" if xe is not None else "-"
        peak = f"{_peak(r):.2f} GB" if gpu else f"{r['peak_rss_mb'] / 1024:.2f} GB"
        lines.append(f"| {r['size']} | {r['precision'] + ' | ' if gpu else ''}{r['images']} x {r['samples']} | "
                     f"{LABELS[r['mode']].format(mb=r['micro_batch'])} | {r['samples_per_s']:.1f} | "
                     f"{r['step_s']:.2f} | {r['tokens_per_caption']:.1f} | {peak} | {ratio} |")
    return lines


def _peak(row: dict) -> float:
    """GB: the GPU's peak where measured there, else the process's peak RSS."""
    return row["peak_gpu_gb"] if row["peak_gpu_gb"] is not None else row["peak_rss_mb"] / 1024


def _xe_of(rows: list[dict], row: dict) -> dict | None:
    return next((r for r in rows if r["mode"] == "xe" and (r["size"], r["images"], r["precision"]) ==
                 (row["size"], row["images"], row["precision"])), None)


def reading(rows: list[dict]) -> str:
    """The three goals, read from the rows: SCST (sample then score) at most 1.2x XE's peak at the same batch,
    under 4.5 GB with micro-batches, and no slower a sample than autograd through sampling."""
    parts = []
    for r in rows:
        if r["mode"] not in ("scored", "scored_mb"):
            continue
        xe = _xe_of(rows, r)
        grad = next((a for a in rows if a["mode"] == "autograd" and (a["size"], a["images"], a["precision"]) ==
                     (r["size"], r["images"], r["precision"])), None)
        label = f"{r['size']} {r['images']} x {r['samples']}" + (f" {r['precision']}" if r["peak_gpu_gb"] is not None
                                                                   else "") + (
            f", rl.micro_batch={r['micro_batch']}" if r["mode"] == "scored_mb" else "")
        checks = []
        if xe is not None:
            ratio = _peak(r) / _peak(xe)
            checks.append(f"peak {ratio:.2f}x XE's ({'met' if ratio <= GOAL_XE_RATIO else 'not met'})")
        if r["mode"] == "scored_mb":
            checks.append(f"{_peak(r):.2f} GB ({'met' if _peak(r) < GOAL_MB_GB else 'not met'})")
        if grad is not None:
            speed = r["samples_per_s"] / grad["samples_per_s"]
            checks.append(f"{speed:.2f}x autograd's samples/s ({'met' if speed >= 1 else 'not met'})")
        parts.append(f"{label}: " + ", ".join(checks))
    return (f"Goals: SCST's peak at most {GOAL_XE_RATIO}x XE's at the same batch, under {GOAL_MB_GB} GB with "
            "rl.micro_batch, no slower a sample than autograd through sampling. " + "; ".join(parts) + ".")


def scored_lines(rows: list[dict], gpu: bool) -> list[str]:
    """The second table's part of a section: its heading, what it measures, the goals read from it, the table."""
    if not rows:
        return []
    steps = sorted({r["steps"] for r in rows})
    counted = (f"{steps[0]} step{'s' if steps[0] > 1 else ''}" if len(steps) == 1 else
               f"{steps[0]}-{steps[-1]} steps")
    return [f"### {'GPU: ' if gpu else ''}SCST sampled with autograd against sampled without it and scored in one "
            "pass, and XE", "",
            "One process a row (its peak memory is its own: the policy, the optimizer's state, the steps). "
            "Autograd through sampling: every decoding step with autograd, its keys, values and graph kept for the "
            "backward pass (`policy.scores_samples = False`). Sample then score, as a run takes it: the captions "
            "sampled under `torch.no_grad` with the cache, then one teacher-forced pass over them with autograd "
            "(`rlcap.decoding.scoring`), in micro-batches with `rl.micro_batch`; both without dropout. XE: "
            "`xe_step` on the images' COCO references at the same batch (cut at 16 tokens). Each figure is the mean "
            f"of {counted} after a warm-up step on 2 images; captions/s counts the step's captions (samples or "
            "references); tokens a caption leaves out EOS and padding.", "", reading(rows), "", *table(rows, gpu)]


def scored_figures(rows: list[dict]) -> dict[str, dict]:
    """The rows' figures for the script's JSON line, keyed ``size_IMAGESxSAMPLES[_bf16]_MODE``."""
    out = {}
    for r in rows:
        key = f"{r['size']}_{r['images']}x{r['samples']}" + ("" if r["precision"] == "fp32" else f"_{r['precision']}")
        out[f"{key}_{r['mode']}"] = {"samples_per_s": round(r["samples_per_s"], 2), "step_s": round(r["step_s"], 3),
                                     "peak_rss_mb": round(r["peak_rss_mb"]), "micro_batch": r["micro_batch"],
                                     **({"peak_gpu_gb": round(r["peak_gpu_gb"], 3)} if r["peak_gpu_gb"] is not None
                                        else {})}
    return out
