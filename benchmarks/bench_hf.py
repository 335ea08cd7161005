"""rlcap's sampling on a transformers captioner (model.arch=hf) against the model's own generate(), and one SCST step.

    python benchmarks/bench_hf.py [--family git] [--parts cpu,gpu,vlm] [--configs small:10,small:50,base:10]
                                  [--gpu-configs small:50,base:10,base:50] [--out docs/BENCHMARKS.md]

The captioner is built by ``rlcap.models.hf.build_captioner.build_captioner`` (no pretrained one can be downloaded here):
random weights at the ``small`` and ``base`` sizes (base: the shapes of GIT-base, a ViT-B/16 tower on 224 px and
a 768-wide text decoder of 6 layers), and a wordpiece tokenizer trained on the real COCO captions of
../shared/data/coco/human_agreement_5k.json, whose references are also the CIDEr-D reward's.

What is timed, on one batch of images, 5 captions an image, at most 16 new tokens each:

* rlcap's sampling, ``rlcap.decoding.sample(policy, feats, 5, Decoding("sample", 16))`` on the
  ``rlcap.models.hf.captioner.HFCaptioner`` over the folder, without autograd (``torch.no_grad``) and with it
  (as an SCST step samples, its log-probabilities differentiable);
* the same model's ``generate(do_sample=True, num_return_sequences=5, max_new_tokens=16)``, PAD and the start
  token suppressed as rlcap never writes them, no top-k or top-p (both draw from the whole softmax).

Both sides read the same input and skip the vision tower: the policy's tower is a ``StoredTower`` that hands on
stored tower tokens, and ``generate`` is called on that same model (``policy.model``) with those tokens as its
``pixel_values`` (B, 1, T, D). The tokens are the real tower's output on random pictures, computed once before
(what ``rlcap features --encoder hf:DIR`` stores). Random weights seldom write the end token, so both sides
decode about 16 tokens a caption; the table gives each side's mean length. The model is in eval mode for the
three samplers (no dropout), in training mode for the SCST step.

Then one SCST step (``rlcap.methods.scst.scst_step``, greedy baseline, CIDEr-D against the COCO references), as
benchmarks/bench_scst.py times it, with its split: sampling, reward (with the greedy baseline's decoding),
backward and optimizer step. Each configuration runs in its own process (its peak memory is its own).

Then, each in a process of its own, an SCST step sampled with autograd through every step against sampled
without it and scored in one teacher-forced pass (with and without ``rl.micro_batch``), and an XE step at the
same batch: samples a second and peak memory (benchmarks/hf_scored.py).

A measurement's calls alternate (rlcap without autograd, generate, rlcap with autograd, again), so that a slow
spell of a shared machine hits all three; each figure is the median of up to ``--repeats`` rounds, fewer once
the rounds have taken ``--budget`` seconds. Writes the bench-hf section of docs/BENCHMARKS.md (the CPU part)
and the bench-hf-gpu section (where CUDA is present: fp32 and bf16 autocast; elsewhere it says so, and keeps a
GPU section measured before); with the ``vlm`` part, the bench-hf-vlm section: each instruction VLM family's
sampling against its own ``generate`` on the same stored image tokens (hf_vlm_speed.py, ``--vlm-families``).
Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import DOC, REPO, load_note, machine, replace_section
from hf_scored import MODES, measure_step, peak_rss_mb, scored_figures, scored_lines
from hf_vlm_speed import run_vlm, vlm_families, vlm_figures, vlm_lines

COCO = REPO / ".." / "shared" / "data" / "coco" / "human_agreement_5k.json"
SAMPLES, MAX_LEN = 5, 16
CPU_CONFIGS = "small:10,small:50,base:10"
GPU_CONFIGS = "small:50,base:10,base:50"
SCORED_CONFIGS, GPU_SCORED_CONFIGS = "small:10,base:10", "base:10,base:50"  # the second table's (hf_scored.py)
SAMPLERS = ("rlcap", "generate", "rlcap_grad")
VLM_ALL = "qwen2_vl,smolvlm,paligemma,llava,florence2"  # hf_vlm_speed.py's families by default


def parse_configs(text: str) -> list[tuple[str, int]]:
    """``size:images,...`` -> [(size, images), ...]."""
    from rlcap.models.hf.build_captioner import SIZES

    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        size, _, images = item.partition(":")
        if size not in SIZES or not images.isdigit() or int(images) < 1:
            raise SystemExit(f"bench_hf: {item!r} is not SIZE:IMAGES (SIZE one of {', '.join(SIZES)})")
        out.append((size, int(images)))
    return out


def coco_references(coco: Path) -> dict[str, list[str]]:
    return {str(x["image_id"]): x["references"] for x in json.loads(coco.read_text())}


def prepare(family: str, size: str, images: int, folder: Path, coco: Path, device: str) -> Path:
    """Build the captioner (random weights, tokenizer of the COCO captions) in ``folder`` and store the tower
    tokens of ``images`` random pictures beside it (tokens.pt, (images, T, D)): what the children read."""
    import torch
    import transformers

    from rlcap.encoders.hf import vision_forward
    from rlcap.models.hf.build_captioner import build_captioner

    captions = [c for refs in coco_references(coco).values() for c in refs]
    build_captioner(family, folder, captions, size=size, seed=0, tokenizer="wordpiece", vocab_size=30522)
    architecture = json.loads((folder / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(folder).eval().to(device)
    tower, config = vision_forward(model)
    side = int(config.image_size)
    torch.manual_seed(1)
    with torch.no_grad():  # the real tower's output, as `rlcap features --encoder hf:DIR` stores it
        tokens = torch.cat([tower(pixel_values=torch.randn(len(chunk), 3, side, side, device=device)).last_hidden_state
                            for chunk in torch.arange(images).split(10)])
    torch.save(tokens.float().cpu(), folder / "tokens.pt")
    return folder


def caption_lengths(rows: list[list[int]], start: int, end: int, pad: int | None) -> float:
    """Mean tokens a caption in the model's ids: after the start token, up to and with the first end token."""
    total = 0
    for row in rows:
        row = row[1:] if row and row[0] == start else row
        total += row.index(end) + 1 if end in row else sum(1 for t in row if t != pad)
    return total / len(rows)


def measure(folder: Path, images: int, device: str, precision: str, repeats: int, steps: int, budget: float,
            coco: Path, threads: int = 2) -> dict:
    """Run in a child process: the three samplers, alternating, then SCST steps, on ``images`` images."""
    import torch

    from rlcap.data.feats import Feats
    from rlcap.data.loader import Batch, CaptionData
    from rlcap.decoding.sampling import sample
    from rlcap.decoding.settings import Decoding
    from rlcap.devices import autocast
    from rlcap.methods.scst import scst_step
    from rlcap.models import build_model, model_vocab
    from rlcap.rewards import build_reward
    from rlcap.methods import load_run_config
    from rlcap.train.session import Progress, Session, add_part

    if device == "cpu":
        torch.set_num_threads(threads)
    cuda = device.startswith("cuda")
    dev = torch.device(device)
    torch.manual_seed(0)
    refs = coco_references(coco)
    cfg = load_run_config(None, ["algorithm=scst", "model.arch=hf", f"model.path={folder}", f"rl.n_samples={SAMPLES}",
                                 f"rl.batch_size={images}", f"decode.max_len={MAX_LEN}", "track.to=[]",
                                 f"device={device}", f"precision={precision}"])
    vocab = model_vocab(cfg.model)
    tokens = torch.load(folder / "tokens.pt")[:images].to(dev)  # (B, T, D)
    if len(tokens) < images:
        raise SystemExit(f"bench_hf: {folder / 'tokens.pt'} holds {len(tokens)} images, not {images}")
    width = tokens.shape[-1]
    rss_before = peak_rss_mb()
    session = Session(cfg, CaptionData(vocab, {}), {}, Progress(), Path("."), device=dev)
    policy = add_part(session, "policy", build_model(cfg.model, len(vocab), width, width), cfg.optim).module
    ids = policy.ids
    banned = sorted({ids.pad, ids.start} - {ids.end, None})  # rlcap never writes PAD or the start token
    mask = torch.ones(tokens.shape[:2], dtype=torch.bool, device=dev)

    def feats_of(n: int) -> Feats:
        return Feats(tokens[:n, 0], tokens[:n], mask[:n])

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    sampling = Decoding.on(dev, "sample", MAX_LEN, compile=False, temperature=1.0)

    def run_rlcap(n: int, grad: bool) -> float:
        with torch.set_grad_enabled(grad), autocast(dev, precision):
            out = sample(policy, feats_of(n), SAMPLES, sampling)
            if grad:
                out.logprobs.sum().item()  # (what SCST's loss reads; the graph is dropped unused)
        return float(out.mask.sum(1).float().mean())

    def run_generate(n: int) -> float:
        with torch.no_grad(), autocast(dev, precision):
            out = policy.model.generate(pixel_values=tokens[:n, None], do_sample=True, num_return_sequences=SAMPLES,
                                        max_new_tokens=MAX_LEN, suppress_tokens=banned, top_k=0, top_p=1.0,
                                        temperature=1.0)
        return caption_lengths(out.tolist(), ids.start, ids.end, ids.pad)

    calls = {"rlcap": lambda: run_rlcap(images, False), "generate": lambda: run_generate(images),
             "rlcap_grad": lambda: run_rlcap(images, True)}
    policy.eval()
    calls["rlcap"](), calls["generate"]()  # warm-up (the autograd sampler runs the same kernels)
    sync()
    times: dict[str, list[float]] = {name: [] for name in SAMPLERS}
    lengths: dict[str, list[float]] = {name: [] for name in SAMPLERS}
    spent = 0.0
    for _ in range(repeats):
        for name in SAMPLERS:
            start = time.perf_counter()
            lengths[name].append(calls[name]())
            sync()
            times[name].append(time.perf_counter() - start)
            spent += times[name][-1]
        if spent > budget:
            break
    sampling = {name: {"seconds": statistics.median(times[name]), "calls": len(times[name]),
                       "samples_per_s": images * SAMPLES / statistics.median(times[name]),
                       "tokens_per_caption": statistics.mean(lengths[name])} for name in SAMPLERS}

    reward = build_reward(cfg.reward, refs)
    image_ids = list(refs)
    policy.train()  # (an SCST run's policy, dropout on)

    def batch_of(n: int) -> Batch:
        pick = image_ids[:n]
        return Batch(torch.arange(n), pick, feats_of(n), torch.empty(0, 0), [refs[i] for i in pick])

    with autocast(dev, precision):
        scst_step(session, batch_of(min(2, images)), reward)  # warm-up on 2 images (the optimizer's state made)
    sync()
    totals = {"sample_s": 0.0, "reward_s": 0.0, "backward_s": 0.0, "step_s": 0.0}
    done, length = 0, 0.0
    while done < steps:
        start = time.perf_counter()
        with autocast(dev, precision):
            stats = scst_step(session, batch_of(images), reward)
        sync()
        totals["step_s"] += time.perf_counter() - start
        for key in ("sample_s", "reward_s", "backward_s"):
            totals[key] += stats[key]
        length += float(stats["length"])  # (a 0-d tensor: the step leaves its statistics on the device)
        done += 1
        if totals["step_s"] > budget:
            break
    step = {k: v / done for k, v in totals.items()}
    return {"images": images, "samples": SAMPLES, "device": device, "precision": precision,
            "vocab": len(vocab), "regions": tokens.shape[1], "width": width,
            "parameters": sum(p.numel() for p in policy.parameters()),
            "sampling": sampling, "scst": {**step, "steps": done, "samples_per_s": images * SAMPLES / step["step_s"],
                                        "tokens_per_caption": length / done},
            "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss_before,
            "peak_gpu_gb": torch.cuda.max_memory_allocated(dev) / 1024 ** 3 if cuda else None}


def child(folder: Path, images: int, device: str, precision: str, args: argparse.Namespace, mode: str = "") -> dict:
    """The samplers and SCST steps in a child process; with ``mode``, one row of the second table (hf_scored.py)."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", str(folder), str(images), device, precision,
            "--repeats", str(args.repeats), "--steps", str(args.steps), "--budget", str(args.budget),
            "--coco", str(args.coco), "--threads", str(args.threads), "--mode", mode,
            "--micro-batch", str(args.micro_batch)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env)
    if out.returncode:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"bench_hf: the child for {folder.name} x {images} images on {device} ({precision}) "
                         f"{mode} failed")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_part(family: str, configs: list[tuple[str, int]], device: str, precisions: tuple[str, ...],
             args: argparse.Namespace, scored: list[tuple[str, int]]) -> tuple[list[dict], list[dict]]:
    """The samplers' rows of ``configs`` and the second table's of ``scored`` (each of hf_scored.MODES)."""
    rows, scored_rows = [], []
    with tempfile.TemporaryDirectory(prefix="bench_hf_") as tmp:
        folders = {}
        for size in dict.fromkeys(s for s, _ in configs + scored):  # one captioner a size, tokens for its largest batch
            most = max(n for s, n in configs + scored if s == size)
            folders[size] = prepare(family, size, most, Path(tmp) / size, args.coco, device)
        for size, images in configs:
            for precision in precisions:
                rows.append({"size": size, **child(folders[size], images, device, precision, args)})
                print(f"bench_hf: {size} {images} x {SAMPLES} on {device} ({precision}) done", file=sys.stderr)
        for (size, images), precision, mode in ((c, p, m) for c in scored for p in precisions for m in MODES):
            scored_rows.append({"size": size, "precision": precision,
                                **child(folders[size], images, device, precision, args, mode)})
            print(f"bench_hf: {size} {images} x {SAMPLES} on {device} ({precision}) {mode} done", file=sys.stderr)
    return rows, scored_rows


def key(row: dict) -> str:
    return f"{row['size']}_{row['images']}x{row['samples']}" + ("" if row["precision"] == "fp32" else
                                                                 f"_{row['precision']}")


def table(rows: list[dict], gpu: bool) -> list[str]:
    lines = ["| size | " + ("precision | " if gpu else "") + "images x samples | rlcap sample (no grad) | generate | "
             "rlcap / generate | rlcap sample (with grad) | tokens a caption (rlcap / generate) | SCST step | "
             "sampling | reward + baseline | backward + step | " + ("peak GPU memory |" if gpu else "peak RSS |"),
             "|---|" + ("---|" if gpu else "") + "---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        s, step = r["sampling"], r["scst"]
        split = {k: step[k] / step["step_s"] for k in ("sample_s", "reward_s", "backward_s")}
        memory = f"{r['peak_gpu_gb']:.2f} GB" if gpu else f"{r['peak_rss_mb']:.0f} MB"
        lines.append(
            f"| {r['size']} | " + (f"{r['precision']} | " if gpu else "") + f"{r['images']} x {r['samples']} | "
            f"{s['rlcap']['samples_per_s']:.1f} | {s['generate']['samples_per_s']:.1f} | "
            f"{s['rlcap']['samples_per_s'] / s['generate']['samples_per_s']:.2f}x | "
            f"{s['rlcap_grad']['samples_per_s']:.1f} | "
            f"{s['rlcap']['tokens_per_caption']:.1f} / {s['generate']['tokens_per_caption']:.1f} | "
            f"{step['samples_per_s']:.1f} samples/s ({step['step_s']:.2f} s) | {split['sample_s']:.0%} | "
            f"{split['reward_s']:.0%} | {split['backward_s']:.0%} | {memory} |")
    return lines


def counted(values: set[int], noun: str) -> str:
    """{3} -> '3 rounds', {1, 3} -> '1-3 rounds', {1} -> '1 round'."""
    low, high = min(values), max(values)
    return f"{low}-{high} {noun}s" if low != high else f"{low} {noun}{'' if low == 1 else 's'}"


def describe(rows: list[dict], family: str) -> str:
    sizes = {}
    for r in rows:
        sizes.setdefault(r["size"], r)
    models = "; ".join(f"{size}: {r['parameters'] / 1e6:.1f} M parameters without the tower, {r['regions']} tower "
                       f"tokens of {r['width']} a picture" for size, r in sizes.items())
    rounds = counted({r["sampling"]["rlcap"]["calls"] for r in rows}, "alternating round")
    steps = counted({r["scst"]["steps"] for r in rows}, "step")
    return (f"{family} captioner, random weights, {rows[0]['vocab']:,}-token wordpiece vocabulary trained on the COCO "
            f"captions ({models}). Sampling figures are samples (captions) a second, the median of {rounds} after a "
            f"warm-up call of each; the SCST step is the mean of {steps} after a warm-up step on 2 images.")


def reading(rows: list[dict]) -> str:
    ratios = [r["sampling"]["rlcap"]["samples_per_s"] / r["sampling"]["generate"]["samples_per_s"] for r in rows]
    met = all(x >= 1 for x in ratios)
    return (f"Goal: rlcap's sampling at least as fast as `generate` on the same model: "
            f"**{'met' if met else 'not met'}** (rlcap / generate "
            f"{f'{min(ratios):.2f}x-{max(ratios):.2f}x' if len(ratios) > 1 else f'{ratios[0]:.2f}x'}).")


def section_text(doc: Path, name: str) -> str:
    text = doc.read_text(encoding="utf-8") if doc.exists() else ""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    return text.split(start, 1)[1].split(end, 1)[0] if start in text and end in text else ""


def main(argv: list[str] | None = None) -> int:
    from rlcap.models.hf.build_captioner import CAPTIONER_FAMILIES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", choices=CAPTIONER_FAMILIES, default="git", help="the captioner family (default git)")
    p.add_argument("--parts", default="cpu,gpu,vlm",
                   help="cpu, gpu, vlm (the instruction VLMs on the CPU: hf_vlm_speed.py) or several (default all; "
                        "gpu only where CUDA is present)")
    p.add_argument("--configs", default=CPU_CONFIGS, help=f"SIZE:IMAGES,... on the CPU (default {CPU_CONFIGS})")
    p.add_argument("--gpu-configs", default=GPU_CONFIGS, help=f"SIZE:IMAGES,... on CUDA (default {GPU_CONFIGS})")
    p.add_argument("--repeats", type=int, default=5, help="most alternating rounds of the three samplers (default 5)")
    p.add_argument("--steps", type=int, default=3, help="most timed SCST steps (default 3)")
    p.add_argument("--budget", type=float, default=60.0,
                   help="seconds after which no further round (or SCST step) starts; at least one runs (default 60)")
    p.add_argument("--threads", type=int, default=2, help="torch threads on the CPU (default 2)")
    p.add_argument("--coco", type=Path, default=COCO, help="COCO references (a list of {image_id, references})")
    p.add_argument("--out", type=Path, default=DOC, help="the benchmarks document to update")
    p.add_argument("--scored-configs", default=SCORED_CONFIGS,
                   help=f"SIZE:IMAGES,... of the autograd / sample-then-score / XE table on the CPU (default "
                        f"{SCORED_CONFIGS}; '' for none)")
    p.add_argument("--gpu-scored-configs", default=GPU_SCORED_CONFIGS,
                   help=f"the same on CUDA (default {GPU_SCORED_CONFIGS})")
    p.add_argument("--micro-batch", type=int, default=10, help="rl.micro_batch of its last row (default 10)")
    p.add_argument("--vlm-families", default=VLM_ALL, help="instruction VLM families whose sampling is timed against "
                   f"their generate on the CPU (hf_vlm_speed.py; default {VLM_ALL}; '' for none)")
    p.add_argument("--vlm-size", default="small", choices=("tiny", "small"), help="their size (default small)")
    p.add_argument("--vlm-images", type=int, default=10, help="their pictures (default 10)")
    p.add_argument("--child", nargs=4, metavar=("FOLDER", "IMAGES", "DEVICE", "PRECISION"), help=argparse.SUPPRESS)
    p.add_argument("--mode", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        folder, images, device, precision = args.child
        print(json.dumps(measure_step(Path(folder), int(images), device, precision, args.mode, args.micro_batch,
                                      args.steps, args.budget, coco_references(args.coco), SAMPLES, MAX_LEN,
                                      args.threads) if args.mode else
                         measure(Path(folder), int(images), device, precision, args.repeats, args.steps, args.budget,
                                 args.coco, args.threads)))
        return 0
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if unknown := sorted(parts - {"cpu", "gpu", "vlm"}):
        p.error(f"--parts: unknown {', '.join(unknown)}; the parts are cpu, gpu, vlm")
    cpu_configs, gpu_configs = parse_configs(args.configs), parse_configs(args.gpu_configs)
    gpu = "gpu" in parts and torch.cuda.is_available()
    load = [os.getloadavg()[0]]
    results: dict[str, list[dict]] = {}
    scored: dict[str, list[dict]] = {}
    if "cpu" in parts:
        results["cpu"], scored["cpu"] = run_part(args.family, cpu_configs, "cpu", ("fp32",), args,
                                                 parse_configs(args.scored_configs))
    if gpu:
        results["cuda"], scored["cuda"] = run_part(args.family, gpu_configs, "cuda", ("fp32", "bf16"), args,
                                                   parse_configs(args.gpu_scored_configs))
    vlm = run_vlm(vlm_families(args.vlm_families), args.vlm_size, args.vlm_images, args.repeats, args.budget,
                  args.threads) if "vlm" in parts else []  # (on the CPU)
    load.append(os.getloadavg()[0])
    versions = machine(torch=torch.__version__, transformers=transformers.__version__)
    options = "".join(f" --{name} {value}" for name, value, default in (
        ("family", args.family, "git"), ("configs", args.configs, CPU_CONFIGS), ("repeats", args.repeats, 5),
        ("steps", args.steps, 3), ("budget", f"{args.budget:g}", "60"), ("threads", args.threads, 2),
        ("scored-configs", f"'{args.scored_configs}'", f"'{SCORED_CONFIGS}'"), ("micro-batch", args.micro_batch, 10))
        if str(value) != str(default))
    if "cpu" in results:
        command = "make bench-hf" if not options else f"python benchmarks/bench_hf.py --parts cpu{options}"
        threads = f"{args.threads} torch thread{'s' if args.threads > 1 else ''}" + (
            " (on 2 cores that other jobs share, one thread's figures are steadier: with 2, every operation waits "
            "for the busy core)" if args.threads == 1 else "")
        body = [f"## A transformers captioner (model.arch=hf): rlcap's sampling against `generate`, one SCST step",
                "", f"Command: `{command}`. Machine: {versions}, {threads}. "
                f"{load_note((load[0], load[1]), args.threads)}", "",
                describe(results["cpu"], args.family), "",
                "rlcap's sampling is `sample(policy, feats, n=5, max_len=16)` on the `HFCaptioner`; `generate` is the "
                "same model's `generate(do_sample=True, num_return_sequences=5, max_new_tokens=16)` (PAD and the start "
                "token suppressed, as rlcap never writes them; no top-k or top-p). Both read the same tower tokens "
                "(the real tower's output on random pictures, computed once): the policy's tower is a `StoredTower`, "
                "and `generate` gets the tokens as its `pixel_values` (B, 1, T, D), so neither side runs the vision "
                "tower. Eval mode for the three samplers; the SCST step (greedy baseline, CIDEr-D against the real "
                "COCO references) in training mode, its split as in the SCST table above. Each configuration runs in "
                "its own process.", "", reading(results["cpu"]), "", "### CPU", "", *table(results["cpu"], gpu=False),
                "", *scored_lines(scored["cpu"], gpu=False)]
        replace_section("bench-hf", "\n".join(body), args.out)
    if vlm:
        vlm_options = "".join(f" --{name} {value}" for name, value, default in (
            ("vlm-families", f"'{args.vlm_families}'", f"'{VLM_ALL}'"), ("vlm-size", args.vlm_size, "small"),
            ("vlm-images", args.vlm_images, 10), ("repeats", args.repeats, 5), ("budget", f"{args.budget:g}", "60"),
            ("threads", args.threads, 2)) if str(value) != str(default))
        run = (f"Command: `python benchmarks/bench_hf.py --parts vlm{vlm_options}` (a part of `make bench-hf`). "
               f"Machine: {versions}, {args.threads} torch threads. {load_note((load[0], load[1]), args.threads)}")
        replace_section("bench-hf-vlm", "\n".join(vlm_lines(vlm, run)), args.out)
    if "gpu" in parts:
        if gpu:
            name = torch.cuda.get_device_name(0)
            gpu_options = options.replace(f" --configs {args.configs}", "").replace(f" --threads {args.threads}", "")
            gpu_options = gpu_options.replace(f" --scored-configs '{args.scored_configs}'", "")
            gpu_options += f" --gpu-configs {args.gpu_configs}" if args.gpu_configs != GPU_CONFIGS else ""
            gpu_options += (f" --gpu-scored-configs '{args.gpu_scored_configs}'"
                            if args.gpu_scored_configs != GPU_SCORED_CONFIGS else "")
            body = [f"### GPU ({name})", "",
                    f"`python benchmarks/bench_hf.py --parts gpu{gpu_options}` on {versions}, "
                    f"CUDA {torch.version.cuda}: "
                    "as above, on the GPU, in fp32 and under bf16 autocast (`precision=bf16`, as a run with it "
                    "computes: the SCST step inside `torch.autocast`, and `generate` too).", "",
                    describe(results["cuda"], args.family), "", reading(results["cuda"]), "",
                    *table(results["cuda"], gpu=True), "", *scored_lines(scored["cuda"], gpu=True)]
            replace_section("bench-hf-gpu", "\n".join(body), args.out)
        elif "Not run" in section_text(args.out, "bench-hf-gpu") or not section_text(args.out, "bench-hf-gpu"):
            replace_section("bench-hf-gpu", "### GPU\n\nNot run: this machine has no CUDA device "
                            "(`torch.cuda.is_available()` is false). The script fills this section where one is "
                            "present (`python benchmarks/bench_hf.py --parts gpu`: the same measurements at "
                            f"{GPU_CONFIGS.replace(',', ', ')} images, in fp32 and under bf16 autocast).", args.out)
        else:
            print("bench_hf: no CUDA here; the GPU section measured before is kept", file=sys.stderr)
    figures = {part: {key(r): {"rlcap_samples_per_s": round(r["sampling"]["rlcap"]["samples_per_s"], 2),
                               "generate_samples_per_s": round(r["sampling"]["generate"]["samples_per_s"], 2),
                               "rlcap_grad_samples_per_s": round(r["sampling"]["rlcap_grad"]["samples_per_s"], 2),
                               "rlcap_tokens_per_caption": round(r["sampling"]["rlcap"]["tokens_per_caption"], 2),
                               "generate_tokens_per_caption": round(r["sampling"]["generate"]["tokens_per_caption"], 2),
                               "scst_samples_per_s": round(r["scst"]["samples_per_s"], 2),
                               "scst_sample_s": round(r["scst"]["sample_s"], 4),
                               "scst_reward_s": round(r["scst"]["reward_s"], 4),
                               "scst_backward_s": round(r["scst"]["backward_s"], 4),
                               "peak_rss_mb": round(r["peak_rss_mb"]),
                               **({"peak_gpu_gb": round(r["peak_gpu_gb"], 3)} if r["peak_gpu_gb"] is not None else {})}
                          for r in rows} for part, rows in results.items()}
    for part, rows in scored.items():
        figures[part].update(scored_figures(rows))
    for part, rows in results.items():
        print("\n".join(table(rows, gpu=part == "cuda")))
    print(json.dumps({"family": args.family, **figures, **({"vlm": vlm_figures(vlm)} if vlm else {})}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
