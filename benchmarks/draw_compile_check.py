"""Whether sampling's inverse-CDF draw (rlcap.decoding.word_distribution.draw) compiles on this GPU, as decoding compiles it.

    python benchmarks/draw_compile_check.py [--rows 250] [--words 8513]

On an H200 with torch 2.11.0+cu130 (2026-11-28) inductor failed to generate code for the draw's float64
cumulative sum as it then was (one split scan over 8,513 words), so every compiled decoding step fell back to eager
decoding (docs/TRAINING.md). rlcap's draw now sums in two levels (the blocks' sums, then the chosen block's words:
two scans of about 93). This script compiles four ways and says for each whether it built and whether its words
equal eager's: rlcap's draw as decoding compiles it, the one scan over the vocabulary it replaced, that scan with
inductor's ``split_reductions`` off, and that scan in float32 (less exact). It prints one line a way and writes
nothing. Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from rlcap.decoding.word_distribution import draw  # noqa: E402


def one_scan(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The draw before: one float64 scan over the vocabulary."""
    cdf = probs.cumsum(dim=1, dtype=torch.float64)  # (R, V)
    return torch.searchsorted(cdf, (1.0 - uniform[:, None]) * cdf[:, -1:]).squeeze(1)


def draw_float32(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The one scan in float32."""
    cdf = probs.float().cumsum(dim=1)  # (R, V)
    target = (1.0 - uniform[:, None].float()) * cdf[:, -1:]  # (R, 1)
    return torch.searchsorted(cdf, target).squeeze(1)


def check(name: str, compiled: Callable, probs: torch.Tensor, uniform: torch.Tensor) -> str:
    want = draw(probs, uniform=uniform)
    start = time.perf_counter()
    try:
        got = compiled(probs, uniform)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - what failed is the finding: reported, not raised
        return f"{name}: did not build ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]})"
    same = int((got == want).sum())
    return f"{name}: built in {time.perf_counter() - start:.1f} s; {same} of {len(want)} words equal eager's"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=250, help="rows a draw (default 250: 50 images x 5)")
    p.add_argument("--words", type=int, default=8513, help="vocabulary (default 8,513: COCO val2014's, as bench-gpu)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print(f"draw_compile_check: not run: this torch ({torch.__version__}) sees no CUDA device")
        return 0
    gen = torch.Generator(device="cuda").manual_seed(0)
    probs = torch.rand(args.rows, args.words, device="cuda", generator=gen).softmax(-1)  # (R, V)
    uniform = torch.rand(args.rows, dtype=torch.float64, device="cuda", generator=gen)  # (R,)
    ways = {"as decoding compiles it": ({}, lambda p, u: draw(p, uniform=u)),
            "one scan (before)": ({}, one_scan),
            "one scan, split_reductions off": ({"split_reductions": False}, one_scan),
            "one scan in float32": ({}, draw_float32)}
    for name, (options, fn) in ways.items():
        torch._dynamo.reset()
        print(check(name, torch.compile(fn, fullgraph=True, options=options or None), probs, uniform), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
