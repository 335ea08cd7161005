"""Per-word credit: actor-critic ([Shi18]) and PG with Monte-Carlo rollouts ([Liu17]) beside XE and SCST.

Run with ``make bench-credit-shapes`` and ``make bench-credit-concepts`` (COCO concepts with the
training-image budget of ``make bench-concepts``), or both with ``make bench-credit``: calls ``rlcap bench --methods xe,scst,ac,ac_lookahead,mixer,pg_cider,
pg_bcmr,pg_spider`` and writes the table in the layout of [Shi18]'s Table 1 (BLEU-3, BLEU-4, METEOR,
ROUGE-L, CIDEr-D) plus SPICE and SPIDEr, each method's training cost, lookahead's lambdas on
validation, and the checks of rlcap's goals, into the benchmark's bench-credit section of
docs/BENCHMARKS.md. Every RL stage starts from the same XE checkpoint with the same budget: the
recipes' epochs (shapes 12, COCO concepts 3), or the overrides of ``--rl`` (``make bench-credit``
gives both benchmarks 2 epochs and a MIXER schedule compressed to them: shapes about 1.5 hours,
COCO concepts about 1.75 here; PG's rollouts cost 2-3x an SCST step). Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchdoc import REPO, machine, replace_section, run_bench

METHODS = "xe,scst,ac,ac_lookahead,ac_att,ac_att_lookahead,mixer,pg_cider,pg_bcmr,pg_spider"
COLUMNS = ("Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE", "SPIDEr")
# what each RL method optimises (BCMR: the equal-weight sum of rlcap.rewards.bcmr)
OPTIMISED = {"scst": "CIDEr", "ac": "CIDEr", "ac_lookahead": "CIDEr", "ac_att": "CIDEr", "ac_att_lookahead": "CIDEr",
             "mixer": "CIDEr", "pg_cider": "CIDEr", "pg_bcmr": "BCMR", "pg_spider": "SPIDEr"}
# the value networks compared by their fit ([Shi18]'s value network reads the image as the policy does): stage -> reads
VALUE_STAGES = {"ac": "fc", "ac_att": "att"}
# caption positions the value-fit table shows (and the last position with at least 100 captions running)
POSITIONS = (0, 1, 2, 4, 6, 8)
BCMR = ("Bleu_4", "CIDEr", "METEOR", "ROUGE_L")
SECTIONS = {"shapes": ("bench-credit-shapes", "shapes", "1,000"),
            "coco-concepts": ("bench-credit-concepts", "COCO concepts", "5,000")}


def metric(beam: dict[str, float], name: str) -> float:
    return sum(beam[m] for m in BCMR) if name == "BCMR" else beam[name]


def table(results: dict) -> list[str]:
    rows = ["| method | " + " | ".join(COLUMNS) + " | train min | s/update |", "|---|" + "---:|" * (len(COLUMNS) + 2)]
    for name, row in results["methods"].items():
        cost = row.get("cost") or {}
        cells = [f"{100 * row['beam'].get(c, float('nan')):.1f}" for c in COLUMNS]
        cells += [f"{cost['minutes']:.1f}" if cost else "-", f"{cost['seconds_per_update']:.2f}" if cost else "-"]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def value_fits(out: Path, images: int = 500) -> dict[str, dict]:
    """R^2 of each actor-critic stage's value network by caption position on the first ``images``
    validation images (:func:`rlcap.diagnose.value_fit.value_fit`, the run's samples and reward)."""
    from rlcap.diagnose.value_fit import value_fit

    fits = {}
    for stage in VALUE_STAGES:
        got = value_fit(out / stage / "best", "val", images)
        rows = got.fit.rows.tolist()
        last = max((t for t, n in enumerate(rows) if n >= 100), default=0)
        shown = [t for t in sorted({*POSITIONS, last}) if t < len(rows)]
        fits[stage] = {"reads": got.value_features, "overall": float(got.fit.overall), "last": last,
                       "by_position": {t: float(got.fit.by_position[t]) for t in shown},
                       "rows": {t: rows[t] for t in shown},
                       "images": got.images, "samples": got.samples_per_image, "temperature": got.temperature}
    return fits


def fit_table(fits: dict[str, dict]) -> list[str]:
    """The value-fit figures as a table: one row per value network, R^2 at each shown position and overall."""
    positions = sorted({t for fit in fits.values() for t in fit["by_position"]})
    rows = ["| value network | reads | " + " | ".join(f"t = {t}" for t in positions) + " | overall |",
            "|---|---|" + "---:|" * (len(positions) + 1)]
    for stage, fit in fits.items():
        cells = [f"{fit['by_position'][t]:.3f}" if t in fit["by_position"] else "-" for t in positions]
        rows.append(f"| {stage} | {fit['reads']} | " + " | ".join(cells) + f" | {fit['overall']:.3f} |")
    return rows


def better_value(fits: dict[str, dict]) -> str:
    """The actor-critic stage whose value network explains more of the reward (overall R^2)."""
    return max(fits, key=lambda stage: fits[stage]["overall"])


def checks(results: dict, better: str = "ac") -> tuple[list[str], dict[str, float]]:
    """rlcap's goals for this table as measured, one line each; ``better``: the actor-critic stage whose
    value network fits better, whose lookahead result is the goal's."""
    m = {name: row["beam"] for name, row in results["methods"].items()}

    def gain(a: str, b: str, what: str) -> float:
        return metric(m[a], what) / metric(m[b], what) - 1

    figures = {f"{name}_over_xe_{what}": gain(name, "xe", what) for name, what in OPTIMISED.items() if name in m}
    lines = ["- Each method over XE in the metric it optimises: " + "; ".join(
        f"{name} {what} **{figures[f'{name}_over_xe_{what}']:+.1%}**" for name, what in OPTIMISED.items() if name in m)
        + " (goal: every one above 0)."]
    figures.update(spider_cider=gain("pg_spider", "xe", "CIDEr"), spider_spice=gain("pg_spider", "xe", "SPICE"),
                   spider_vs_cider_spice=gain("pg_spider", "pg_cider", "SPICE"),
                   ac_cider=gain(better, "xe", "CIDEr"), lookahead=gain(f"{better}_lookahead", better, "CIDEr"))
    lines += [
        f"- PG-SPIDEr over XE: CIDEr-D **{figures['spider_cider']:+.1%}**, SPICE **{figures['spider_spice']:+.1%}** "
        "(goal: both above 0); over PG-CIDEr on SPICE: "
        f"**{figures['spider_vs_cider_spice']:+.1%}** (goal: above 0, [Liu17]'s finding).",
        f"- Actor-critic ({better}, the better-fitting value network) over XE, CIDEr-D: **{figures['ac_cider']:+.1%}** "
        f"(goal: above 0); lookahead inference over plain beam search on the same checkpoint: "
        f"**{figures['lookahead']:+.1%}** (goal: above 0, [Shi18]'s finding).",
    ]
    return lines, figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="shapes", choices=sorted(SECTIONS), help="which benchmark")
    parser.add_argument("--out", default=None,
                        help="output folder of rlcap bench (default runs/bench_BENCHMARK, shared with bench-methods: "
                             "XE and SCST are trained once; with --rl, runs/credit_BENCHMARK)")
    parser.add_argument("--max-train-images", type=int, default=0, help="train on the first N training images (0: all)")
    parser.add_argument("--rl", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides of every RL stage (the budget), e.g. rl.epochs=2")
    args = parser.parse_args(argv)
    args.out = args.out or f"runs/{'credit' if args.rl else 'bench'}_{args.benchmark.split('-')[-1]}"
    command, seconds = run_bench(args.benchmark, METHODS, args.out, args.max_train_images, args.rl)
    results = json.loads((REPO / args.out / "results.json").read_text())
    fits = value_fits(REPO / args.out)
    better = better_value(fits)
    lines, figures = checks(results, better)
    budget, kept_by = [], {}
    for method in METHODS.split(","):
        if method.endswith("_lookahead"):
            continue
        cfg = json.loads((REPO / args.out / method / "config.json").read_text())
        budget.append(f"{method} {cfg['xe']['epochs'] if cfg['algorithm'] == 'xe' else cfg['rl']['epochs']}")
        kept_by[method] = cfg["val"]["metric"]
    import torch

    section, title, test_images = SECTIONS[args.benchmark]
    images = f"the first {args.max_train_images:,} training images" if args.max_train_images else "every training image"
    fit = fits[better]
    lambdas = [f"{stage}: " + ", ".join(f"{lam}: {v:.3f}" for lam, v in results["methods"][f"{stage}_lookahead"]
                                        ["lookahead"]["scores"].items())
               + f"; chosen {results['methods'][f'{stage}_lookahead']['lookahead']['best_lambda']}" for stage in fits]
    body = "\n".join([
        f"## Per-word credit on {title}: actor-critic ([Shi18]) and PG with rollouts ([Liu17]), Table 1 layout of [Shi18]", "",
        f"Command: `make {section}` (`{' '.join(command)}`), {seconds / 60:.0f} min in this run (stages already "
        f"trained by an earlier run of the same folder are reused). Machine: {machine(torch=torch.__version__)}.", "",
        f"Budget: {images}; epochs per stage: {', '.join(budget)}; every RL stage from the same XE checkpoint"
        + (f", with the overrides `{' '.join(args.rl)}`" if args.rl else "") + ". "
        f"Recipes: configs/{args.benchmark}_*.yaml (`ac_att`: the ac recipe with `ac.value_features=att`). "
        f"Each run keeps the checkpoint best by its `val.metric`: "
        + ", ".join(f"{m} {v}" for m, v in kept_by.items()) + ". "
        f"Test split, {test_images} images, beam size 3 "
        "(`*_lookahead`: that checkpoint by lookahead inference, beam 3), pycocoevalcap metrics x 100 "
        "(SPICE by rlcap's Python port). `train min`, `s/update`: the method's own last stage.", "",
        *table(results), "",
        "Lookahead's lambda on validation (CIDEr-D by lambda; 1 is plain beam search): " + "; ".join(lambdas) + ".", "",
        f"Value fit: R^2 of v(s_t) against the caption's reward R by position t, over the captions still running at t "
        f"(`rlcap diagnose value-fit RUN/best --split val --images {fit['images']}`: {fit['samples']} samples an image "
        f"at temperature {fit['temperature']}, the run's reward; t = {fit['last']}: the last position with 100 or more "
        "captions running):", "",
        *fit_table(fits), "",
        *lines,
    ])
    replace_section(section, body)
    print(body)
    print(json.dumps({**{k: round(v, 4) for k, v in figures.items()}, "minutes": round(seconds / 60, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
