"""``rlcap report PATH``: one self-contained HTML page for a run, an evaluation, the demo or a bench folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlcap.cli.options import int_range
from rlcap.files import check_writable


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "report", help="an HTML page of a run or bench folder: metrics, curves, diversity, a caption gallery",
        description="Write one self-contained HTML file (styles, script, plots and thumbnails inline; opens "
                    "without a network) for a run folder, a checkpoint folder, an evaluation folder "
                    "(rlcap eval --out), a bench folder (rlcap bench --out) or the demo's folder. docs/REPORT.md.")
    parser.add_argument("path", type=Path, help="the folder to report on")
    parser.add_argument("--out", type=Path, help="the HTML file to write (default: PATH/report.html)")
    parser.add_argument("--all", action="store_true", dest="everything",
                        help="every image of the split in the gallery (default: a seeded sample and the "
                             "largest gains and losses between methods)")
    parser.add_argument("--sample", type=int_range(1), default=48, help="images in the gallery's seeded sample (default 48)")
    parser.add_argument("--seed", type=int_range(0), default=0, help="seed of the gallery's sample")
    parser.add_argument("--dataset", type=Path,
                        help="the caption file for references and pictures (default: the run's data.dataset, "
                             "looked up from the working directory and from PATH's parent folders)")
    parser.set_defaults(func=run)  # fmt: skip
    return parser


def run(args: argparse.Namespace) -> int:
    from rlcap.report import write_report
    from rlcap.report.collect import check_source

    check_source(args.path)  # before the output, which would be inside it, is checked
    out = args.out or args.path / "report.html"
    check_writable(out)
    path = write_report(args.path, out, sample=args.sample, seed=args.seed, everything=args.everything,
                        dataset=args.dataset)
    print(f"report: {path}")
    return 0
