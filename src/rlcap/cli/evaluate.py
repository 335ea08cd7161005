"""``rlcap eval CHECKPOINT``: caption a split, write COCO results JSON and the scores."""

from __future__ import annotations

import argparse

from rlcap import api
from rlcap.cli.tables import print_scores


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("eval", help="caption a split with a checkpoint and score it")
    p.add_argument("checkpoint", help="checkpoint folder (e.g. runs/x/best)")
    p.add_argument("--split", default="test", help="split to caption (default: test)")
    p.add_argument("--beam-size", type=int, default=3, help="beam size (1: greedy; default 3)")
    p.add_argument("--max-len", type=int, default=16, help="longest caption in words (default 16)")
    p.add_argument("--length-penalty", type=float, default=0.0,
                   help="rank beams by log-probability / length**this (0: summed log-probability, the default; "
                        "1: per-word average, which RL models trained with a leave-one-out baseline may need)")
    p.add_argument("--out", default=None, help="folder for predictions.json and scores.json (default: beside the checkpoint)")
    p.add_argument("--baseline", action="append", default=[], choices=sorted(api.BASELINES),
                   help="also score this baseline (repeatable)")
    p.add_argument("data_overrides", nargs="*", help="data.key=value overrides, e.g. data.features=other.h5")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    overrides = [o.removeprefix("data.") for o in args.data_overrides]
    out = args.out or f"{args.checkpoint.rstrip('/')}/eval_{args.split}"
    scores = api.evaluate(args.checkpoint, split=args.split, beam_size=args.beam_size, max_len=args.max_len,
                          out_dir=out, baselines=tuple(args.baseline), data_overrides=overrides, progress=True,
                          length_penalty=args.length_penalty)
    rows = {"model": scores["model"], **scores["baselines"]}
    print_scores(rows)
    print(f"wrote {out}/predictions.json and {out}/scores.json")
    return 0
