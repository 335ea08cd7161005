"""``rlcap eval CHECKPOINT [data.key=value ...]``: caption a split, write COCO results JSON and the scores.

The data overrides may come anywhere after ``eval`` (:class:`rlcap.cli.options.CommandParser`);
their paths are taken from the working directory, while the checkpoint's own data paths are
resolved as :func:`rlcap.eval.open_run.checkpoint_data_config` says."""

from __future__ import annotations

import argparse

from rlcap import api
from rlcap.cli.options import add_decoding_arguments, float_range, int_range, output_folder, set_threads
from rlcap.cli.tables import print_scores
from rlcap.errors import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("eval", help="caption a split with a checkpoint and score it")
    p.add_argument("checkpoint", help="checkpoint folder (e.g. runs/x/best)")
    p.add_argument("--split", default=None, help="split to caption (default: test; val with --lookahead)")
    add_decoding_arguments(p)
    p.add_argument("--length-penalty", type=float_range(0.0), default=None,
                   help="rank beams by log-probability / length**this (default: the checkpoint's "
                        "decode.length_penalty; 0: summed log-probability; 1: per-word average, which RL models trained with a leave-one-out baseline may need)")
    p.add_argument("--no-repeat-ngram", type=int_range(0), default=None, metavar="N",
                   help="beam search never repeats an n-gram of N words (default: the checkpoint's "
                        "decode.no_repeat_ngram; 0: off; [Chaffin24]'s released code uses 3)")
    p.add_argument("--lookahead", type=lambdas, default=None, metavar="L1,L2,...",
                   help="with an actor-critic checkpoint: CIDEr-D of lookahead inference ([Shi18]) at each lambda "
                        "in [0, 1] (1: plain beam search), to choose lambda on validation")
    p.add_argument("--out", type=output_folder, default=None, help="folder for predictions.json and scores.json (default: beside the checkpoint)")
    p.add_argument("--dataset", default=None, metavar="DIR",
                   help="evaluate on a folder built by `rlcap data concepts` (its dataset_concepts.json and "
                        "feats.h5) instead of the checkpoint's own data; the checkpoint's vocabulary is "
                        "kept (unknown words count as <unk>)")
    p.add_argument("--reference", action="append", default=[], choices=sorted(api.REFERENCE_CAPTIONERS),
                   help="also score this reference captioner, which needs no training (repeatable)")
    p.add_argument("--clip", default=None, metavar="DIR",
                   help="also CLIP-S and RefCLIP-S ([Hessel21], docs/METRICS.md) with the CLIP of this local "
                        "transformers folder, from the split's pictures")
    p.add_argument("--images", default=None, metavar="DIR",
                   help="with --clip: the folder the dataset's file names are relative to (default: the caption "
                        "file's folder)")
    p.add_argument("--objects", default=None, metavar="FILE",
                   help="also CHAIR_i, CHAIR_s and Coverage ([Rohrbach18], docs/METRICS.md) from each picture's "
                        "objects: the shapes dataset's JSON (exact from its scenes; adds Colour-err) or COCO "
                        "instance annotations (instances_val2014.json)")
    p.add_argument("--reader", default=None, metavar="DIR",
                   help="also QA-acc ([Xing26]): the share of its picture's questions this held-out text-only reader "
                        "(a local causal LM folder) answers right from the caption (needs --qa)")
    p.add_argument("--qa", default=None, metavar="FILE",
                   help="with --reader: the questions by image id (rlcap's QA JSON, e.g. a shapes folder's "
                        "questions.json, or CapRL's file)")
    p.add_argument("data_overrides", nargs="*", metavar="data.KEY=VALUE",
                   help="data overrides, anywhere after the checkpoint, e.g. data.features=other.h5")
    p.set_defaults(func=run)
    return p


def lambdas(text: str) -> list[float]:
    """``0.3,0.5,1`` -> [0.3, 0.5, 1.0], each in [0, 1]."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers in [0, 1], got {text!r}") from None
    if not values or any(not 0 <= v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers in [0, 1], got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    set_threads(args.threads)
    overrides = [o.removeprefix("data.") for o in args.data_overrides]
    if args.lookahead is not None:
        return run_lookahead(args, overrides)
    args.split = args.split or "test"
    out = args.out or f"{args.checkpoint.rstrip('/')}/eval_{args.split}"
    scores = api.evaluate(args.checkpoint, split=args.split, beam_size=args.beam_size, max_len=args.max_len,
                          out_dir=out, references=tuple(args.reference), data_overrides=overrides, progress=True,
                          length_penalty=args.length_penalty, dataset=args.dataset,
                          no_repeat_ngram=args.no_repeat_ngram, device=args.device,
                          precision=args.precision, clip=args.clip, images=args.images,
                          objects=args.objects, reader=args.reader, qa=args.qa)
    rows = {"model": scores["model"], **scores["references"]}
    print_scores(rows)
    print(f"wrote {out}/predictions.json and {out}/scores.json")
    return 0


def run_lookahead(args: argparse.Namespace, overrides: list[str]) -> int:
    if args.no_repeat_ngram:
        raise ConfigError("rlcap eval: --no-repeat-ngram is for beam search; lookahead inference does not take it")
    split = args.split or "val"
    out = args.out or f"{args.checkpoint.rstrip('/')}/lookahead_{split}"
    choice = api.lookahead(args.checkpoint, args.lookahead, split=split, beam_size=args.beam_size,
                           max_len=args.max_len, length_penalty=args.length_penalty, out_dir=out,
                           data_overrides=overrides, progress=True, dataset=args.dataset)
    print(f"{'lambda':>8s}  CIDEr-D ({split})")
    for lam, value in choice.scores.items():
        print(f"{lam:8.3g}  {value:.4f}{'  <- best' if lam == choice.best else ''}")
    print(f"wrote {out}/lookahead.json")
    return 0
