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

from benchdoc import REPO, machine, replace_section, run_bench

METHODS = "xe,scst,ac,ac_lookahead,mixer,pg_cider,pg_bcmr,pg_spider"
COLUMNS = ("Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE", "SPIDEr")
# what each RL method optimises (BCMR: the equal-weight sum of rlcap.rewards.bcmr)
OPTIMISED = {"scst": "CIDEr", "ac": "CIDEr", "ac_lookahead": "CIDEr", "mixer": "CIDEr", "pg_cider": "CIDEr",
             "pg_bcmr": "BCMR", "pg_spider": "SPIDEr"}
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


def checks(results: dict) -> tuple[list[str], dict[str, float]]:
    """rlcap's goals for this table as measured, one line each."""
    m = {name: row["beam"] for name, row in results["methods"].items()}

    def gain(a: str, b: str, what: str) -> float:
        return metric(m[a], what) / metric(m[b], what) - 1

    figures = {f"{name}_over_xe_{what}": gain(name, "xe", what) for name, what in OPTIMISED.items() if name in m}
    lines = ["- Each method over XE in the metric it optimises: " + "; ".join(
        f"{name} {what} **{figures[f'{name}_over_xe_{what}']:+.1%}**" for name, what in OPTIMISED.items() if name in m)
        + " (goal: every one above 0)."]
    figures.update(spider_cider=gain("pg_spider", "xe", "CIDEr"), spider_spice=gain("pg_spider", "xe", "SPICE"),
                   spider_vs_cider_spice=gain("pg_spider", "pg_cider", "SPICE"),
                   ac_cider=gain("ac", "xe", "CIDEr"), lookahead=gain("ac_lookahead", "ac", "CIDEr"))
    lines += [
        f"- PG-SPIDEr over XE: CIDEr-D **{figures['spider_cider']:+.1%}**, SPICE **{figures['spider_spice']:+.1%}** "
        "(goal: both above 0); over PG-CIDEr on SPICE: "
        f"**{figures['spider_vs_cider_spice']:+.1%}** (goal: above 0, [Liu17]'s finding).",
        f"- Actor-critic over XE, CIDEr-D: **{figures['ac_cider']:+.1%}** (goal: above 0); lookahead inference over "
        f"plain beam search on the same checkpoint: **{figures['lookahead']:+.1%}** (goal: above 0, [Shi18]'s finding).",
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
    lines, figures = checks(results)
    lookahead = results["methods"]["ac_lookahead"]["lookahead"]
    budget = []
    for method in METHODS.split(","):
        stage = "ac" if method == "ac_lookahead" else method
        cfg = json.loads((REPO / args.out / stage / "config.json").read_text())
        epochs = cfg["xe"]["epochs"] if cfg["algorithm"] == "xe" else cfg["rl"]["epochs"]
        if method != "ac_lookahead":
            budget.append(f"{method} {epochs}")
    import torch

    section, title, test_images = SECTIONS[args.benchmark]
    images = f"the first {args.max_train_images:,} training images" if args.max_train_images else "every training image"
    body = "\n".join([
        f"## Per-word credit on {title}: actor-critic ([Shi18]) and PG with rollouts ([Liu17]), Table 1 layout of [Shi18]", "",
        f"Command: `make {section}` (`{' '.join(command)}`), {seconds / 60:.0f} min in this run (stages already "
        f"trained by an earlier run of the same folder are reused). Machine: {machine(torch=torch.__version__)}.", "",
        f"Budget: {images}; epochs per stage: {', '.join(budget)}; every RL stage from the same XE checkpoint"
        + (f", with the overrides `{' '.join(args.rl)}`" if args.rl else "") + ". "
        f"Recipes: configs/{args.benchmark}_*.yaml. Test split, {test_images} images, beam size 3 "
        "(`ac_lookahead`: the ac checkpoint by lookahead inference, beam 3), pycocoevalcap metrics x 100 "
        "(SPICE by rlcap's Python port). `train min`, `s/update`: the method's own last stage.", "",
        *table(results), "",
        "Lookahead's lambda on validation (CIDEr-D by lambda; 1 is plain beam search): "
        + ", ".join(f"{lam}: {v:.3f}" for lam, v in lookahead["scores"].items())
        + f"; chosen {lookahead['best_lambda']}.", "",
        *lines,
    ])
    replace_section(section, body)
    print(body)
    print(json.dumps({**{k: round(v, 4) for k, v in figures.items()}, "minutes": round(seconds / 60, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
