"""``rlcap demo``: the main job on the bundled synthetic shapes data (what `make demo` runs)."""

from __future__ import annotations

import argparse

from rlcap.cli.options import COUNT, IMAGE_SIZE, add_data_folder_arguments
from rlcap.cli.tables import print_scores


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("demo", help="shapes data, features, XE, SCST and evaluation, end to end")
    p.add_argument("--out", default="runs/demo", help="output folder: its xe/ and scst/ runs are replaced (overwrite=true), nothing else in it")
    add_data_folder_arguments(p, "data/shapes", "where the shapes data and features go (reused)",
                              "folder holding shapes_xe.yaml and shapes_scst.yaml")
    p.add_argument("--image-size", type=IMAGE_SIZE, default=128, help="encoder input size (128 px gives a 4x4 grid)")
    p.add_argument("--n-train", type=COUNT, default=10_000, help="shapes training images (default 10,000)")
    p.add_argument("--n-val", type=COUNT, default=1_000, help="shapes validation images (default 1,000)")
    p.add_argument("--n-test", type=COUNT, default=1_000, help="shapes test images (default 1,000)")
    p.add_argument("overrides", nargs="*", help="key=value overrides applied to both training recipes")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from rlcap.data.synthetic.shapes import ShapesConfig
    from rlcap.demo import run_demo

    shapes = ShapesConfig(n_train=args.n_train, n_val=args.n_val, n_test=args.n_test)
    scores = run_demo(args.out, args.data, args.configs, args.image_size, args.overrides, report=print, shapes=shapes,
                      regenerate=args.regenerate)
    print()
    print("shapes test split, beam size 3")
    print_scores({"xe": scores["stages"]["xe"], "scst": scores["stages"]["scst"], **scores["references"]})
    print(f"\nwrote {args.out}/scores.json, checkpoints, logs and predictions under {args.out}/")
    print(f"report (open in a browser): {scores['report']}")
    return 0
