"""``rlcap train CONFIG [key=value ...]``: run a training recipe."""

from __future__ import annotations

import argparse

from rlcap import api
from rlcap.config import describe
from rlcap.train.config import RunConfig


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("train", help="train a captioner from a YAML recipe",
                       description="Train from a YAML recipe in configs/, with key=value overrides "
                                   "(e.g. model.hidden_dim=256 resume=true).")
    p.add_argument("config", nargs="?", help="YAML recipe")
    p.add_argument("overrides", nargs="*", help="key=value overrides, dotted for sections")
    p.add_argument("--help-config", action="store_true", help="list every config key with its default and help")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    if args.help_config:
        for key, default, text in describe(RunConfig):
            print(f"{key:28s} {default:24s} {text}")
        return 0
    if args.config is None:
        print("rlcap train: error: give a YAML recipe (see configs/) or --help-config")
        return 2
    cfg = api.load_run_config(args.config, args.overrides)
    result = api.train(cfg)
    print(f"done: {result.steps} steps, best val CIDEr-D {result.best_score:.4f}, run folder {result.out_dir}")
    return 0
