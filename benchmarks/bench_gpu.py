"""SCST samples/s on one GPU, at self-critical.pytorch's model sizes: ``make bench-gpu``.

FC, UpDown and the Transformer at self-critical.pytorch's defaults (rnn_size, input_encoding_size and
att_hid_size 512; 2048-d features, 36 regions; the Transformer 6 encoder + 6 decoder layers, d_model 512,
d_ff 2048, 8 heads), each first taught by a short XE run (``--xe-steps``) so that its captions have
caption-like lengths. Then rlcap's SCST step (``rlcap.methods.scst.scst_step``: 5 samples an image,
greedy baseline, the run config's default reward) at 50, 250 and 1,000 images, in fp32 and bf16 (the
run config's ``precision``: torch.autocast), each row from the same XE weights. Per row: samples/s of
the median of ``--steps`` timed steps (after one warm-up), the median step's split as rlcap logs it
(sample_s, reward_s, backward_s; the benchmark makes each of the step's clock reads wait for the GPU,
:class:`DeviceClock`, so they time the device's work), peak GPU memory
(``torch.cuda.max_memory_allocated``), and the share of the GPU's peak FLOP rate used: the FLOPs of one
more step counted as benchmarks/scst_flops.py counts them (torch's FlopCounterMode: matrix products and
attention), divided by the median step's time and by the peak of the row's precision (``--peak-*``,
TFLOP/s; defaults the H100 SXM's dense figures: fp32 67 without TF32, which torch leaves off for matrix
products by default, TF32 495 when it is on, bf16 990).

Data: ``--data DIR``, a self-critical.pytorch ``data/`` folder (read by :mod:`rlcap.data.self_critical`:
its ``dataset_coco.json``, or ``cocotalk.json`` with ``cocotalk_label.h5``; features from ``cocobu_fc/``
and ``cocobu_att/``); the first 1,000 training images are used, the vocabulary is that of every training
caption (words seen more than 5 times, as self-critical's prepro_labels.py keeps). Without it, generated:
random 36 x 2048 features and the captions of COCO val2014 (../shared/data/coco/val2014_captions.json,
words seen 3 times or more: about 8,500, near COCO's 9,487), or the shapes generator's when that file is
absent.

About 2.5 minutes on one H200 (measured 2026-11-28: 33, 45 and 69 s for FC, UpDown and the Transformer),
most of it the three XE runs and the Transformer's 1,000-image rows; ``--archs``, ``--images`` and
``--precisions`` run a subset, ``--steps`` and ``--xe-steps`` fewer steps.

Where CUDA is absent it prints that it was not run and why, writes nothing and exits 0: a section
saying so would replace figures measured on a GPU before. ``--device cpu`` runs it on the CPU (tests,
at tiny sizes), writing only to an ``--out`` given.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchdoc import DOC, REPO, machine, replace_section

ARCHS, IMAGES, PRECISIONS = ("fc", "updown", "transformer"), "50,250,1000", ("fp32", "bf16")
SAMPLES, MAX_LEN = 5, 16
VAL2014 = REPO / ".." / "shared" / "data" / "coco" / "val2014_captions.json"
# self-critical.pytorch's Transformer: 6 + 6 layers, 8 heads, d_ff 4 x d_model (2048 at 512), dropout 0.1
TRANSFORMER = {"model.num_layers": 6, "model.num_enc_layers": 6, "model.num_heads": 8, "model.dropout": 0.1}


class Data(NamedTuple):
    split: object  # rlcap.data.loader.SplitData: the images the rows use, features in memory
    vocab: object  # rlcap.data.vocab.Vocab
    source: str  # what the data is, for the section


class DeviceClock:
    """``time`` as the SCST step's modules see it while :func:`device_clock` holds: each
    ``perf_counter()`` waits for the device first, so the step's own split (sample_s, reward_s,
    backward_s) times the device's work and not the launching of it. The benchmark's only change to
    the step; ``reads`` shows that the step still reads this clock."""

    def __init__(self, device: torch.device):
        self.device, self.reads = device, 0

    def perf_counter(self) -> float:
        self.reads += 1
        sync(self.device)
        return time.perf_counter()

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


@contextmanager
def device_clock(device: torch.device) -> Iterator[DeviceClock]:
    import rlcap.methods.scst as scst
    import rlcap.methods.samples as rollout

    clock, modules = DeviceClock(device), (scst, rollout)
    saved = [m.time for m in modules]
    for m in modules:
        m.time = clock
    try:
        yield clock
    finally:
        for m, t in zip(modules, saved):
            m.time = t


class TotalOnly:
    """FlopCounterMode's module tracker, keeping the total only: its per-module tracking hooks the
    gradients of each module's inputs, which fails for a module called on a parameter in inference
    mode (the LSTMs' table of word gates, built in a greedy decode)."""

    parents = ("Global",)

    def __enter__(self) -> "TotalOnly":
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def flop_counter() -> FlopCounterMode:
    """FlopCounterMode counting the total (``get_total_flops``) as benchmarks/scst_flops.py does."""
    counter = FlopCounterMode(display=False)
    counter.mod_tracker = TotalOnly()
    return counter


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def caption_source(path: Path | None, images: int, seed: int) -> tuple[dict[str, list[str]], str]:
    """Image id -> captions: COCO val2014's (every image, for the vocabulary) or generated shapes scenes'."""
    if path is not None and path.is_file():
        return json.loads(path.read_text()), f"the captions of {path.name}"
    from rlcap.data.synthetic.annotators import caption_scene
    from rlcap.data.synthetic.scenes import sample_scene

    rng = random.Random(seed)
    return ({str(i): [c.raw for c in caption_scene(sample_scene(rng, 4, True), rng)] for i in range(images)},
            "the shapes generator's captions")


def generated_data(folder: Path, images: int, captions: Path | None, regions: int, dim: int) -> Data:
    """Random (regions x dim) features, ReLU'd as CNN features are, for the first ``images`` images of the captions."""
    from rlcap.data.features import HDF5FeatureWriter
    from rlcap.data.loader import SplitData
    from rlcap.data.records import ImageRecord
    from rlcap.data.vocab import Vocab
    from rlcap.metrics import tokenize

    refs, source = caption_source(captions, images, seed=0)
    records = [ImageRecord(i, "train", list(c), [tokenize(x) for x in c]) for i, c in refs.items()]
    min_count = 3 if len(records) > images else 1  # a third of COCO's captions: a vocabulary near COCO's
    vocab = Vocab.build((t for r in records for t in r.tokens), min_count)
    used = records[:images]
    gen = torch.Generator().manual_seed(0)
    with HDF5FeatureWriter(folder / "feats.h5", dim, dim, regions) as writer:
        for start in range(0, len(used), 200):
            ids = [r.id for r in used[start:start + 200]]
            att = torch.randn(len(ids), regions, dim, generator=gen).relu()
            writer.write(ids, att.mean(1).numpy(), att.numpy())
    split = SplitData(used, vocab, str(folder / "feats.h5"), MAX_LEN, in_memory=True)
    return Data(split, vocab, f"random {regions} x {dim} features, {source}, {len(vocab):,} words "
                              f"(seen {min_count} times or more)")


def folder_data(folder: Path, out: Path, images: int) -> Data:
    """The first ``images`` training images of a self-critical.pytorch data/ folder."""
    from rlcap.data.loader import SplitData
    from rlcap.data.readers import read_dataset
    from rlcap.data.self_critical import import_self_critical
    from rlcap.data.vocab import Vocab

    dataset, features = import_self_critical(folder, out / "dataset.json")
    train = [r for r in read_dataset(dataset) if r.split == "train"]
    vocab = Vocab.build((t for r in train for t in r.tokens), 6)  # prepro_labels.py: words seen more than 5 times
    split = SplitData(train[:images], vocab, str(features), MAX_LEN, in_memory=True)
    return Data(split, vocab, f"{folder} ({dataset.name}, {features.name}_fc/_att: {split.att_dim}-d), "
                              f"{len(vocab):,} words (seen more than 5 times)")


def run_config(arch: str, images: int, precision: str, device: torch.device, hidden: int):
    from rlcap.methods import load_run_config

    model = {"model.arch": arch, "model.embed_dim": hidden, "model.hidden_dim": hidden,
             "model.att_hidden_dim": hidden, "model.ff_dim": 4 * hidden, "model.dropout": 0.5,
             **(TRANSFORMER if arch == "transformer" else {})}
    return load_run_config(None, [f"{k}={v}" for k, v in {
        "algorithm": "scst", "scst.baseline": "greedy", "rl.n_samples": SAMPLES, "rl.batch_size": images,
        "decode.max_len": MAX_LEN, "device": device.type, "precision": precision, "track.to": [],
        **model}.items()])


def xe_pretrain(model: torch.nn.Module, data: Data, device: torch.device, steps: int, lr: float) -> dict:
    """``steps`` XE steps of 50 images x 5 captions (linear warm-up over the first fifth, gradient norm
    clipped at 2, the run config's defaults); the weights it leaves and the greedy captions' mean length."""
    from rlcap.data.vocab import EOS, PAD
    from rlcap.decoding import greedy
    from rlcap.rl.losses import xe_loss

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / max(1, steps // 5)))
    batches = (b for epoch in range(10 ** 6) for b in data.split.batches(50, SAMPLES, seed=0, epoch=epoch))
    model.train()
    for _ in range(steps):
        batch = next(batches).to(device)
        logits = model(batch.feats, batch.tokens[:, :-1], seq_per_img=SAMPLES)  # (N, T+1, V)
        loss = xe_loss(logits, batch.tokens[:, 1:], batch.tokens[:, 1:] != PAD)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
        warmup.step()
    model.eval()
    first = next(data.split.eval_batches(50)).to(device)
    tokens = greedy(model, first.feats, MAX_LEN).tokens
    words = ((tokens != PAD) & (tokens != EOS)).sum(1).float().mean()
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "greedy_words": float(words), "xe_loss": loss.item()}


def measure_row(arch: str, model: torch.nn.Module, xe: dict, data: Data, reward, images: int, precision: str,
                device: torch.device, args: argparse.Namespace) -> dict:
    """``args.steps`` timed SCST steps (after one warm-up) of ``images`` images from the XE weights, and one counted."""
    from rlcap.data.loader import CaptionData
    from rlcap.devices import autocast
    from rlcap.methods.scst import scst_step
    from rlcap.train.session import POLICY, Progress, Session, add_part

    cfg = run_config(arch, images, precision, device, args.hidden)
    model.load_state_dict(xe["state"])
    session = Session(cfg, CaptionData(data.vocab, {"train": data.split}), {}, Progress(), Path(args.tmp),
                      device=device)
    add_part(session, POLICY, model, cfg.optim)
    session.model.train(cfg.rl.rollout_dropout)
    batch = next(data.split.eval_batches(images)).to(device)
    if device.type == "cuda":
        gc.collect()  # (the previous row's session and optimizer state, freed before this row's peak is taken)
        torch.cuda.reset_peak_memory_stats(device)
    steps = []
    with autocast(device, precision), device_clock(device) as clock:
        for k in range(args.steps + 1):
            sync(device)
            start = time.perf_counter()
            stats = scst_step(session, batch, reward)
            sync(device)
            if k:  # (step 0: the warm-up)
                steps.append({"step_s": time.perf_counter() - start, "sample_s": stats["sample_s"],
                              "reward_s": stats["reward_s"], "backward_s": stats["backward_s"],
                              "sample_words": float(stats["length"])})
        if clock.reads < 4:
            raise RuntimeError("scst_step no longer reads time.perf_counter in rlcap.methods.scst and "
                               "rlcap.methods.samples: bench_gpu's DeviceClock must follow where it now times its parts")
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        with flop_counter() as counter:
            scst_step(session, batch, reward)
    median = sorted(steps, key=lambda s: s["step_s"])[(len(steps) - 1) // 2]
    return {"arch": arch, "images": images, "precision": precision, **median,
            "samples_per_s": images * SAMPLES / median["step_s"], "gflop_per_step": counter.get_total_flops() / 1e9,
            "peak_gpu_gb": None if peak is None else peak / 1024 ** 3, "greedy_words_after_xe": xe["greedy_words"]}


def peak_tflops(precision: str, args: argparse.Namespace) -> tuple[float, str]:
    """The peak the row's FLOP share is divided by, and its name."""
    if precision == "bf16":
        return args.peak_bf16, "bf16"
    if torch.backends.cuda.matmul.allow_tf32:
        return args.peak_tf32, "TF32"
    return args.peak_fp32, "fp32"


def run_arch(arch: str, data: Data, device: torch.device, args: argparse.Namespace) -> list[dict]:
    """XE once, then every (images, precision) row of ``arch`` from its weights."""
    from rlcap.models import build_model
    from rlcap.rewards import build_reward

    torch.manual_seed(0)
    cfg = run_config(arch, 50, "fp32", device, args.hidden)
    model = build_model(cfg.model, len(data.vocab), data.split.fc_dim, data.split.att_dim).to(device)
    xe = xe_pretrain(model, data, device, args.xe_steps, cfg.optim.lr)
    refs = dict(zip(data.split.ids, data.split.refs))
    rows = []
    with build_reward(cfg.reward, refs, vocab=data.vocab, device=str(device)) as reward:
        for images in args.images:
            for precision in args.precisions:
                row = measure_row(arch, model, xe, data, reward, images, precision, device, args)
                row["reward"] = ", ".join(type(r).__name__ for r in reward.rewards.values())
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    return rows


def markdown(rows: list[dict], data: Data, device: torch.device, args: argparse.Namespace, command: str) -> str:
    name = (f"GPU {torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})" if device.type == "cuda"
            else "no GPU: on the CPU (--device cpu)")
    lines = ["## SCST on one GPU at self-critical.pytorch's sizes", "",
             f"Command: `{command}`. Machine: {machine(torch=torch.__version__)}, {name}.", "",
             f"Data: {data.source}. Models at self-critical.pytorch's sizes (hidden {args.hidden}; the Transformer "
             f"6 + 6 layers, 8 heads), each after {args.xe_steps} XE steps of 50 images x 5 captions; then SCST "
             f"steps of {SAMPLES} samples an image, greedy baseline, reward {rows[0]['reward']}. Each row: the "
             f"median of {args.steps} steps after a warm-up; its split as rlcap logs it, each part timed to the "
             "GPU's end of it; the FLOP share divides the FLOPs of one step (FlopCounterMode: matrix products and "
             "attention) by the median step's time and by the peak named in the row "
             f"(fp32 {args.peak_fp32:g}, TF32 {args.peak_tf32:g}, bf16 {args.peak_bf16:g} TFLOP/s dense).", "",
             "| model | images x samples | precision | samples/s | sampling | reward + baseline | backward + step "
             "| words a sample (greedy after XE) | peak GPU memory | GFLOP a step | share of peak |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        split = [r[k] / r["step_s"] for k in ("sample_s", "reward_s", "backward_s")]
        peak, which = peak_tflops(r["precision"], args)
        share = r["gflop_per_step"] / r["step_s"] / (peak * 1e3)
        memory = "-" if r["peak_gpu_gb"] is None else f"{r['peak_gpu_gb']:.1f} GB"
        lines.append(f"| {r['arch']} | {r['images']} x {SAMPLES} | {r['precision']} | {r['samples_per_s']:,.0f} | "
                     f"{split[0]:.0%} | {split[1]:.0%} | {split[2]:.0%} | {r['sample_words']:.1f} "
                     f"({r['greedy_words_after_xe']:.1f}) | {memory} | {r['gflop_per_step']:,.1f} | "
                     f"{share:.1%} of {which} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="a self-critical.pytorch data/ folder (default: generated data)")
    p.add_argument("--captions", type=Path, default=VAL2014,
                   help="generated data's captions, JSON image id -> captions (default COCO val2014 from "
                        "../shared; absent: the shapes generator's)")
    p.add_argument("--archs", default=",".join(ARCHS), help=f"models (default {','.join(ARCHS)})")
    p.add_argument("--images", default=IMAGES, help=f"images a step, one row each (default {IMAGES})")
    p.add_argument("--precisions", default=",".join(PRECISIONS), help="fp32, bf16 or both (default both)")
    p.add_argument("--steps", type=int, default=5, help="timed steps a row, after one warm-up (default 5)")
    p.add_argument("--xe-steps", type=int, default=300, help="XE steps before each model's rows (default 300)")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (tiny sizes, tests)")
    p.add_argument("--hidden", type=int, default=512, help="hidden, embedding and attention sizes (default 512)")
    p.add_argument("--regions", type=int, default=36, help="generated data: regions an image (default 36)")
    p.add_argument("--feat-dim", type=int, default=2048, help="generated data: feature size (default 2048)")
    for name, value in (("fp32", 67.0), ("tf32", 495.0), ("bf16", 990.0)):
        p.add_argument(f"--peak-{name}", type=float, default=value,
                       help=f"the GPU's dense {name} peak, TFLOP/s (default {value:g}: H100 SXM)")
    p.add_argument("--out", type=Path, help="markdown file whose bench-gpu section is replaced (default "
                                            "docs/BENCHMARKS.md on CUDA; on the CPU: only when given)")
    args = p.parse_args(argv)
    if args.device not in ("cuda", "cpu"):
        p.error(f"--device: {args.device!r} is not cuda or cpu")
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"bench_gpu: not run: this torch ({torch.__version__}) sees no CUDA device; the bench-gpu section "
              "of docs/BENCHMARKS.md is left as it was")
        return 0
    args.archs, args.precisions = args.archs.split(","), args.precisions.split(",")
    args.images = [int(n) for n in args.images.split(",")]
    if bad := sorted(set(args.archs) - set(ARCHS)) + sorted(set(args.precisions) - set(PRECISIONS)):
        p.error(f"unknown model or precision: {', '.join(bad)}")
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        args.tmp = tmp
        data = (folder_data(args.data, Path(tmp), max(args.images)) if args.data else
                generated_data(Path(tmp), max(args.images), args.captions, args.regions, args.feat_dim))
        if len(data.split) < max(args.images):
            p.error(f"--images {max(args.images)}: the data has {len(data.split)} training images")
        rows = [row for arch in args.archs for row in run_arch(arch, data, device, args)]
    given = sys.argv[1:] if argv is None else argv
    command = ("make bench-gpu" + (f" DATA={args.data}" if args.data else "")
               if given in ([], ["--data", str(args.data)]) else "python benchmarks/bench_gpu.py " + " ".join(given))
    body = markdown(rows, data, device, args, command)
    out = args.out or (DOC if device.type == "cuda" else None)
    if out is not None:
        replace_section("bench-gpu", body, out)
    print(body)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
