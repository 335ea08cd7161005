"""Decoding and XE-training throughput of the FC and UpDown captioners on this machine.

    python benchmarks/bench_decode.py [--threads 2] [--repeats 5] [--out docs/BENCHMARKS.md]

Sizes are the field's usual ones (hidden 512, embed 512, 2048-d features, 36 regions, vocabulary
2,107 words, max_len 16). Weights and features are random: the figures measure speed only. With
random weights no caption ends early, so every decode runs all 16 steps (the worst case).

Writes its section of docs/BENCHMARKS.md between the bench-decode markers and prints the figures
as JSON on the last line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding import beam_search, greedy
from rlcap.models import Feats, ModelConfig, build_model

VOCAB, FEAT_DIM, REGIONS, MAX_LEN = 2107, 2048, 36, 16
DECODE_IMAGES, XE_IMAGES, XE_CAPTIONS = 50, 10, 5
START, END = "<!-- bench-decode:start -->", "<!-- bench-decode:end -->"
# self-critical.pytorch measured on this machine (see the brief of issue #1): images/s, captions/s.
REFERENCE = {
    ("fc", "beam3"): 89, ("fc", "beam5"): 51, ("updown", "beam3"): 49, ("updown", "beam5"): 31,
    ("fc", "xe"): 213, ("updown", "xe"): 85,
}


def random_feats(n_images: int, gen: torch.Generator) -> Feats:
    return Feats(torch.randn(n_images, FEAT_DIM, generator=gen).relu(),
                 torch.randn(n_images, REGIONS, FEAT_DIM, generator=gen).relu(),
                 torch.ones(n_images, REGIONS, dtype=torch.bool))


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_decoding(model: torch.nn.Module, feats: Feats, repeats: int) -> dict[str, float]:
    model.eval()
    runs = {"greedy": lambda: greedy(model, feats, MAX_LEN),
            "beam3": lambda: beam_search(model, feats, 3, MAX_LEN),
            "beam5": lambda: beam_search(model, feats, 5, MAX_LEN)}
    return {name: DECODE_IMAGES / median_seconds(fn, repeats) for name, fn in runs.items()}


def bench_xe(model: torch.nn.Module, gen: torch.Generator, repeats: int) -> float:
    """Captions/s of teacher-forced XE steps: 10 images x 5 captions of 16 words + EOS, Adam."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
    feats = random_feats(XE_IMAGES, gen)
    words = torch.randint(EOS + 2, VOCAB, (XE_IMAGES * XE_CAPTIONS, MAX_LEN), generator=gen)  # (50, 16)
    bos = torch.full((words.size(0), 1), BOS)
    eos = torch.full((words.size(0), 1), EOS)
    inputs, targets = torch.cat([bos, words], 1), torch.cat([words, eos], 1)  # (50, 17)

    def train_step() -> None:
        logits = model(feats, inputs, seq_per_img=XE_CAPTIONS)  # (50, 17, V)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return words.size(0) / median_seconds(train_step, repeats, warmup=2)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        cpu = names[0] if names else cpu

    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads, "
            f"{datetime.date.today().isoformat()}")


def markdown(results: dict[str, dict[str, float]], command: str) -> str:
    rows = []
    for arch, label in (("fc", "FC (Show-Tell)"), ("updown", "UpDown")):
        for key, what in (("greedy", "greedy, images/s"), ("beam3", "beam 3, images/s"),
                          ("beam5", "beam 5, images/s"), ("xe", "XE train, captions/s")):
            ref = REFERENCE.get((arch, key))
            ours = results[arch][key]
            ratio = f"{ours / ref:.1f}x" if ref else "-"
            rows.append(f"| {label} | {what} | {ours:.0f} | {ref if ref else '-'} | {ratio} |")
    return "\n".join([
        START,
        "## Decoding and XE training throughput (`make bench-decode`)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine()}",
        "",
        f"Random weights and random features (speed only): vocabulary {VOCAB}, hidden and embedding 512, "
        f"{FEAT_DIM}-d features, {REGIONS} regions, max_len {MAX_LEN} (no caption ends early). Decoding: "
        f"{DECODE_IMAGES} images per call, n_best 1. XE: {XE_IMAGES} images x {XE_CAPTIONS} captions of "
        f"{MAX_LEN} words + EOS per step, teacher forcing, cross-entropy, Adam. Median of repeated runs; "
        "the machine is shared, so figures vary by 10-20% between runs.",
        "",
        "| model | measure | rlcap | self-critical.pytorch | ratio |",
        "|---|---|---:|---:|---:|",
        *rows,
        END,
    ])


def write_section(path: Path, section: str) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure (median reported)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    feats = random_feats(DECODE_IMAGES, gen)
    results: dict[str, dict[str, float]] = {}
    for arch in ("fc", "updown"):
        torch.manual_seed(0)
        model = build_model(ModelConfig(arch=arch, embed_dim=512, hidden_dim=512, att_hidden_dim=512, dropout=0.5),
                            VOCAB, FEAT_DIM, FEAT_DIM)
        results[arch] = bench_decoding(model, feats, args.repeats)
        results[arch]["xe"] = bench_xe(model, gen, args.repeats)
        print(f"{arch}: " + ", ".join(f"{k} {v:.0f}" for k, v in results[arch].items()), flush=True)
    command = f"python benchmarks/bench_decode.py --threads {args.threads} --repeats {args.repeats}"
    write_section(args.out, markdown(results, command))
    print(json.dumps({arch: {k: round(v, 1) for k, v in figs.items()} for arch, figs in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
