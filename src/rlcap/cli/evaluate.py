"""``rlcap eval CHECKPOINT [data.key=value ...]``: caption a split, write COCO results JSON and the scores.

The data overrides may come anywhere after ``eval`` (:class:`rlcap.cli.options.CommandParser`);
their paths are taken from the working directory, while the checkpoint's own data paths are
resolved as :func:`rlcap.api.checkpoint_data_config` says."""

from __future__ import annotations

import argparse

from rlcap import api
from rlcap.cli.options import BEAM_SIZE, MAX_LEN, float_range
from rlcap.cli.tables import print_scores


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("eval", help="caption a split with a checkpoint and score it")
    p.add_argument("checkpoint", help="checkpoint folder (e.g. runs/x/best)")
    p.add_argument("--split", default="test", help="split to caption (default: test)")
    p.add_argument("--beam-size", type=BEAM_SIZE, default=None,
                   help="beam size (1: greedy; default: the checkpoint's decode.beam_size)")
    p.add_argument("--max-len", type=MAX_LEN, default=None,
                   help="longest caption in words (default: the checkpoint's decode.max_len)")
    p.add_argument("--length-penalty", type=float_range(0.0), default=None,
                   help="rank beams by log-probability / length**this (default: the checkpoint's "
                        "decode.length_penalty; 0: summed log-probability; 1: per-word average, which RL models trained with a leave-one-out baseline may need)")
    p.add_argument("--out", default=None, help="folder for predictions.json and scores.json (default: beside the checkpoint)")
    p.add_argument("--reference", action="append", default=[], choices=sorted(api.REFERENCE_CAPTIONERS),
                   help="also score this reference captioner, which needs no training (repeatable)")
    p.add_argument("data_overrides", nargs="*", metavar="data.KEY=VALUE",
                   help="data overrides, anywhere after the checkpoint, e.g. data.features=other.h5")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    overrides = [o.removeprefix("data.") for o in args.data_overrides]
    out = args.out or f"{args.checkpoint.rstrip('/')}/eval_{args.split}"
    scores = api.evaluate(args.checkpoint, split=args.split, beam_size=args.beam_size, max_len=args.max_len,
                          out_dir=out, references=tuple(args.reference), data_overrides=overrides, progress=True,
                          length_penalty=args.length_penalty)
    rows = {"model": scores["model"], **scores["references"]}
    print_scores(rows)
    print(f"wrote {out}/predictions.json and {out}/scores.json")
    return 0
