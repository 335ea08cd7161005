"""Decoding and XE-training throughput of the FC and UpDown captioners on this machine.

    python benchmarks/bench_decode.py [--threads 1,2] [--repeats 5] [--out docs/BENCHMARKS.md]

Sizes are the field's usual ones (hidden 512, embed 512, 2048-d features, 36 regions, vocabulary
2,107 words, max_len 16). Weights and features are random: the figures measure speed only. Every
decode runs all 16 steps (checked): no beam search ends early, the worst case.

Writes its section of docs/BENCHMARKS.md between the bench-decode markers and prints the figures
as JSON on the last line.
"""

from __future__ import annotations

import os

# The machine is shared: OpenMP threads spinning while a sibling is descheduled make 2 threads
# slower than 1. Passive waiting avoids that; it must be set before torch loads libgomp.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from benchdoc import DOC, load_note, machine, median_seconds, replace_section  # noqa: E402

from rlcap.data.vocab import BOS, EOS, PAD, UNK  # noqa: E402
from rlcap.decoding import Decoding, beam_search, greedy  # noqa: E402
from rlcap.models import Feats, ModelConfig, build_model  # noqa: E402

VOCAB, FEAT_DIM, REGIONS, MAX_LEN = 2107, 2048, 36, 16
DECODE_IMAGES, XE_IMAGES, XE_CAPTIONS = 50, 10, 5
# self-critical.pytorch on this machine (from the issue): images/s, captions/s.
REFERENCE = {
    ("fc", "beam3"): 89, ("fc", "beam5"): 51, ("updown", "beam3"): 49, ("updown", "beam5"): 31,
    ("fc", "xe"): 213, ("updown", "xe"): 85,
}


def random_feats(n_images: int, gen: torch.Generator) -> Feats:
    return Feats(torch.randn(n_images, FEAT_DIM, generator=gen).relu(),
                 torch.randn(n_images, REGIONS, FEAT_DIM, generator=gen).relu(),
                 torch.ones(n_images, REGIONS, dtype=torch.bool))


def decoding_runs(model: torch.nn.Module, feats: Feats) -> dict[str, Callable[[], object]]:
    return {"greedy": lambda: greedy(model, feats, MAX_LEN),
            "beam3": lambda: beam_search(model, feats, Decoding("beam", MAX_LEN, beam_size=3)),
            "beam5": lambda: beam_search(model, feats, Decoding("beam", MAX_LEN, beam_size=5))}


def xe_step(model: torch.nn.Module, gen: torch.Generator) -> Callable[[], None]:
    """One teacher-forced XE step: 10 images x 5 captions of 16 words + EOS, Adam."""
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
    feats = random_feats(XE_IMAGES, gen)
    words = torch.randint(UNK + 1, VOCAB, (XE_IMAGES * XE_CAPTIONS, MAX_LEN), generator=gen)  # (50, 16)
    bos = torch.full((words.size(0), 1), BOS)
    eos = torch.full((words.size(0), 1), EOS)
    inputs, targets = torch.cat([bos, words], 1), torch.cat([words, eos], 1)  # (50, 17)

    def train_step() -> None:
        logits = model(feats, inputs, seq_per_img=XE_CAPTIONS)  # (50, 17, V)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return train_step


def fresh_model(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ModelConfig(arch=arch, embed_dim=512, hidden_dim=512, att_hidden_dim=512, dropout=0.5)
    return build_model(cfg, VOCAB, FEAT_DIM, FEAT_DIM)


def bench_model(arch: str, feats: Feats, threads: list[int], repeats: int) -> dict[str, tuple[float, int]]:
    """{measure: (items per second, threads)}, keeping the fastest thread count for each measure.

    Decoding uses untrained weights: a few XE steps on random captions already teach a model to
    say EOS first, and beam search would then stop after a step or two.
    """
    best: dict[str, tuple[float, int]] = {}
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        model = fresh_model(arch).eval()
        if beam_search(model, feats, Decoding("beam", MAX_LEN, beam_size=5)).tokens.size(1) != MAX_LEN:
            raise RuntimeError(f"{arch}: a decode ended before max_len; the figures would not be comparable")
        runs = decoding_runs(model, feats)
        figures = {name: DECODE_IMAGES / median_seconds(fn, repeats) for name, fn in runs.items()}
        step = xe_step(fresh_model(arch).train(), torch.Generator().manual_seed(1))
        figures["xe"] = XE_IMAGES * XE_CAPTIONS / median_seconds(step, repeats, warmup=2)
        for name, value in figures.items():
            if value > best.get(name, (0.0, 0))[0]:
                best[name] = (value, n_threads)
    return best


def machine_line(threads: str) -> str:
    return (f"{machine(torch=torch.__version__)}, torch threads {threads} (best kept per figure), "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, 1-minute load average at the end "
            f"{os.getloadavg()[0]:.1f}")


def markdown(results: dict[str, dict[str, tuple[float, int]]], command: str, threads: str,
             load: tuple[float, float]) -> str:
    rows = []
    for arch, label in (("fc", "FC (Show-Tell)"), ("updown", "UpDown")):
        for key, what in (("greedy", "greedy, images/s"), ("beam3", "beam 3, images/s"),
                          ("beam5", "beam 5, images/s"), ("xe", "XE train, captions/s")):
            ref = REFERENCE.get((arch, key))
            ours, n_threads = results[arch][key]
            ratio = f"{ours / ref:.1f}x" if ref else "-"
            rows.append(f"| {label} | {what} | {ours:.0f} | {n_threads} | {ref if ref else '-'} | {ratio} |")
    return "\n".join([
        "## Decoding and XE training throughput (`make bench-decode`)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine_line(threads)}",
        "",
        f"Random weights and random features (speed only): vocabulary {VOCAB}, hidden and embedding 512, "
        f"{FEAT_DIM}-d features, {REGIONS} regions, max_len {MAX_LEN} (every decode runs all {MAX_LEN} steps). "
        f"Decoding: {DECODE_IMAGES} images per call, n_best 1, float32, a fresh untrained model. "
        f"XE: {XE_IMAGES} images x {XE_CAPTIONS} captions of {MAX_LEN} words + EOS per step, teacher forcing, "
        "cross-entropy, Adam. Median of repeated runs. The goal was 3x self-critical.pytorch's beam-search "
        f"throughput. {load_note(load)}",
        "",
        "| model | measure | rlcap | threads | self-critical.pytorch | ratio |",
        "|---|---|---:|---:|---:|---:|",
        *rows,
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="torch thread counts to try; each figure keeps the fastest")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure (median reported)")
    parser.add_argument("--out", type=Path, default=DOC, help="markdown file whose bench-decode section is replaced")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    feats = random_feats(DECODE_IMAGES, torch.Generator().manual_seed(0))
    start_load = os.getloadavg()[0]
    results = {arch: bench_model(arch, feats, threads, args.repeats) for arch in ("fc", "updown")}
    load = (start_load, os.getloadavg()[0])
    command = f"python benchmarks/bench_decode.py --threads {args.threads} --repeats {args.repeats}"
    replace_section("bench-decode", markdown(results, command, args.threads, load), args.out)
    for arch, figures in results.items():
        print(f"{arch}: " + ", ".join(f"{k} {v:.0f} ({t} threads)" for k, (v, t) in figures.items()))
    print(json.dumps({arch: {k: round(v, 1) for k, (v, _) in figs.items()} for arch, figs in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
