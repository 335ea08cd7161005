"""Throughput of the CIDEr-D reward scorer vs pycocoevalcap's CIDEr on 5,000 COCO captions.

Run with `make bench-metrics`. Writes its section of docs/BENCHMARKS.md (between the
bench-metrics markers, replaced on rerun) and prints a last line of JSON with the figures.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from rlcap.metrics import CiderD, tokenize

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / ".." / "shared" / "data" / "coco" / "human_agreement_5k.json"
DOC = REPO / "docs" / "BENCHMARKS.md"
START, END = "<!-- bench-metrics:start -->", "<!-- bench-metrics:end -->"
REPEATS = 7


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    items = json.loads(DATA.read_text())
    ids = [str(x["image_id"]) for x in items]
    cands = [tokenize(x["candidate"]) for x in items]
    refs = {i: [tokenize(r) for r in x["references"]] for i, x in zip(ids, items)}

    # 1. the reward scorer: build once (what the cache saves), then score batches
    start = time.perf_counter()
    scorer = CiderD.from_references(refs)
    build_s = time.perf_counter() - start
    scores = scorer.score(cands, ids)
    ours = timed(lambda: scorer.score(cands, ids), REPEATS)

    # 2. pycocoevalcap's CIDEr (CIDEr-D) on the same tokenized captions
    from pycocoevalcap.cider.cider import Cider

    gts = {i: [" ".join(r) for r in refs[i]] for i in ids}
    res = {i: [" ".join(c)] for i, c in zip(ids, cands)}
    reference_mean, _ = Cider().compute_score(gts, res)
    theirs = timed(lambda: Cider().compute_score(gts, res), 2)

    n = len(cands)
    figures = {
        "captions": n,
        "reward_cider_d_captions_per_s": round(n / statistics.median(ours), 1),
        "reward_cider_d_best_captions_per_s": round(n / min(ours), 1),
        "reward_cider_d_build_s": round(build_s, 3),
        "pycocoevalcap_cider_captions_per_s": round(n / statistics.median(theirs), 1),
        "mean_cider_d_ours": float(np.mean(scores)),
        "mean_cider_d_pycocoevalcap": float(reference_mean),
    }
    write_section(figures)
    print(json.dumps(figures))
    return 0


def write_section(f: dict) -> None:
    machine = (
        f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"numpy {np.__version__}, {datetime.date.today().isoformat()}"
    )
    section = "\n".join([
        START,
        "## Metrics: CIDEr-D reward scorer",
        "",
        "Command: `make bench-metrics` (`benchmarks/bench_metrics.py`). "
        f"Data: the {f['captions']:,} candidates of `../shared/data/coco/human_agreement_5k.json` "
        "scored against their 4 references (tokenized beforehand; the batch is all 5,000).",
        "",
        f"Machine: {machine}.",
        "",
        "| scorer | captions / s |",
        "|---|---:|",
        f"| `rlcap.metrics.CiderD.score` (median of {REPEATS}) | {f['reward_cider_d_captions_per_s']:,.0f} |",
        f"| pycocoevalcap `Cider().compute_score` (median of 2) | {f['pycocoevalcap_cider_captions_per_s']:,.0f} |",
        "",
        f"Building the scorer from the references (done once, then cached): {f['reward_cider_d_build_s']:.2f} s. "
        f"Mean CIDEr-D: ours {f['mean_cider_d_ours']:.10f}, pycocoevalcap {f['mean_cider_d_pycocoevalcap']:.10f}.",
        END,
    ])  # fmt: skip
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if START in text and END in text:
        text = text[: text.index(START)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
