"""``rlcap score``: score predicted captions against references (pycocoevalcap metric names)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from rlcap.errors import ConfigError, DataError
from rlcap.files import check_writable, write_text
from rlcap.metrics import METRIC_NAMES, default_metrics, retrieval_metrics, score_captions
from rlcap.metrics.io import read_preds, read_refs
from rlcap.metrics.scoring import object_metrics
from rlcap.metrics.spice import SPICE_IMPLEMENTATIONS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("score", help="score captions: BLEU, METEOR, ROUGE-L, CIDEr-D, SPICE, diversity")
    parser.add_argument("--refs", type=Path, required=True,
                        help="references: COCO annotations JSON, a Karpathy split file (every image's "
                             "sentences) or {image_id: [captions]}")
    parser.add_argument("--preds", type=Path, required=True,
                        help="predictions: COCO results JSON (one caption per image), {image_id: [captions]} or a "
                             "captions file of rlcap bench (its out folder's captions/NAME.json)")
    parser.add_argument("--metrics",
                        help=f"comma-separated, from {', '.join(METRIC_NAMES)} (default: pycocoevalcap's set, "
                             "Bleu_1..4, METEOR if Java is there, ROUGE_L, CIDEr, SPICE)")
    parser.add_argument("--spice-impl", choices=SPICE_IMPLEMENTATIONS, default="python",
                        help="SPICE by the Python port (default) or the official jar (needs --corenlp-dir)")
    parser.add_argument("--out", type=Path, help="write {'corpus': ..., 'per_image': ...} JSON to this file "
                                                 "(an existing folder: to scores.json inside it)")
    parser.add_argument("--corenlp-dir", type=Path,
                        help="folder with the Stanford CoreNLP 3.6.0 jars for --spice-impl official-jar")
    parser.add_argument("--train-refs", type=Path, help="training captions (same formats as --refs), for Novelty")
    parser.add_argument("--objects", type=Path, metavar="FILE",
                        help="each picture's objects, for CHAIR_i, CHAIR_s and Coverage ([Rohrbach18], "
                             "docs/METRICS.md), added to the default set: a shapes dataset (dataset_shapes.json, "
                             "exact from its scenes; adds Colour-err) or COCO instance annotations "
                             "(instances_val2014.json)")
    parser.add_argument("--similarity", type=Path,
                        help=".npz with 'similarity' (images, captions) and 'caption_image' (captions,) for R@k")
    parser.add_argument("--clip", metavar="DIR",
                        help="also CLIP-S and RefCLIP-S ([Hessel21], docs/METRICS.md) with the CLIP of this local "
                             "transformers folder (needs --images)")
    parser.add_argument("--images", type=Path, metavar="DIR",
                        help="with --clip: the pictures, a folder whose file names (without suffix) are the image ids")
    parser.add_argument("--reader", metavar="DIR",
                        help="also QA-acc ([Xing26], docs/RL.md): the share of its picture's questions this held-out "
                             "text-only reader (a local causal LM folder) answers right from the caption (needs --qa)")
    parser.add_argument("--qa", type=Path, metavar="FILE",
                        help="with --reader: the multiple-choice questions by image id (rlcap's QA JSON, as rlcap "
                             "data shapes writes questions.json, or CapRL's file)")
    parser.set_defaults(func=run)  # fmt: skip
    return parser


def run(args: argparse.Namespace) -> int:
    if (args.clip is None) != (args.images is None):
        raise ConfigError("--clip DIR and --images DIR go together: CLIP-S reads the pictures with the CLIP")
    if (args.reader is None) != (args.qa is None):
        raise ConfigError("--reader DIR and --qa FILE go together: QA-acc asks the reader the file's questions")
    objects = _read_objects(args.objects) if args.objects is not None else None
    metrics = _metrics(args.metrics, args.clip is not None)
    if objects is not None and args.metrics is None:
        metrics += object_metrics(objects)
    refs, preds = read_refs(args.refs), read_preds(args.preds)
    clip = _load_clip(args.clip) if args.clip is not None else None  # (a bad folder: before the scoring)
    pictures = _clip_pictures(args.images, preds) if clip is not None else {}  # (a missing one: before it too)
    judge = _load_judge(args.reader, args.qa) if args.reader is not None else None
    if args.out is not None:
        check_writable(args.out, folder=args.out.is_dir())  # before scoring (SPICE can take minutes)
    training = None
    if args.train_refs is not None:
        training = [c for captions in read_refs(args.train_refs).values() for c in captions]
    report = score_captions(refs, preds, metrics, corenlp_dir=args.corenlp_dir, training_captions=training,
                            spice_impl=args.spice_impl, objects=objects)
    corpus = dict(report.corpus)
    if args.similarity is not None:
        corpus.update(_retrieval(args.similarity))
    if clip is not None:
        corpus.update(_clip_scores(clip, pictures, refs, preds, report.per_image))
    if judge is not None:
        corpus.update(_qa_scores(judge, preds, report.per_image))
    _print_table(corpus, len(report.per_image))
    if report.spice_impl is not None:
        print(f"spice_impl: {report.spice_impl}")
    if args.out is not None:
        out = {"corpus": corpus, "per_image": report.per_image}
        if report.spice_impl is not None:
            out["spice_impl"] = report.spice_impl
        print(f"wrote {_write_scores(args.out, out)}")
    return 0


def _write_scores(path: Path, scores: dict) -> Path:
    """Write ``scores`` as JSON to ``path``, or to ``path/scores.json`` when ``path`` is a folder."""
    if path.is_dir():
        path = path / "scores.json"
    write_text(path, json.dumps(scores, indent=1))  # atomic; a full disk or read-only folder is one line
    return path


def _metrics(text: str | None, clip: bool) -> list[str]:
    """The metrics ``--metrics`` names (None: the default set). CLIP-S and RefCLIP-S are not among them: ``--clip``
    scores them, so they are refused without it, pointing there, and taken as said with it."""
    if text is None:
        return list(default_metrics())
    metrics = [m.strip() for m in text.split(",") if m.strip()]
    if not metrics:
        raise ConfigError(f"--metrics {text!r} names no metric; give one or more of {', '.join(METRIC_NAMES)} (or "
                          "leave --metrics out for the default set)")
    named = [m for m in metrics if m.lower() in _CLIP_METRICS]
    if named and not clip:
        raise ConfigError(f"--metrics {named[0]}: CLIP-S and RefCLIP-S are scored with a CLIP, not by --metrics: "
                          "give --clip DIR (a local CLIP folder) and --images DIR (the pictures), which add both")
    return [m for m in metrics if m.lower() not in _CLIP_METRICS]


_CLIP_METRICS = ("clip-s", "refclip-s", "clips", "refclips", "clipscore", "refclipscore")  # as users write them


def _read_objects(path: Path) -> Any:
    from rlcap.data.objects import read_object_truth

    return read_object_truth(path)


def _load_clip(folder: str) -> Any:
    from rlcap.eval.clip_score import load_clip

    return load_clip(folder)


def _clip_pictures(images: Path, preds: dict) -> dict[str, Path]:
    """The pictures in ``images`` (file name without suffix: the id), checked to hold every predicted image's."""
    from rlcap.encoders.sources import find_images
    from rlcap.eval.clip_score import check_pictures

    pictures = find_images(images)
    check_pictures([i for i, c in preds.items() if c], pictures)
    return pictures


def _clip_scores(clip: Any, pictures: dict, refs: dict, preds: dict, per_image: dict) -> dict[str, float]:
    """CLIP-S and RefCLIP-S of the first prediction of each image, its picture in ``pictures`` (id -> file): the
    corpus values; the per-caption ones are added to ``per_image``."""
    from rlcap.eval.clip_score import score_with_clip

    captions = {i: c[0] for i, c in preds.items() if c}
    corpus, per_caption = score_with_clip(clip, captions, pictures, refs)
    for i, values in per_caption.items():
        per_image.setdefault(i, {}).update(values)
    return corpus


def _load_judge(reader: str, qa: Path) -> Any:
    from rlcap.eval.qa_accuracy import load_judge

    return load_judge(reader, qa)


def _qa_scores(judge: Any, preds: dict, per_image: dict) -> dict[str, float]:
    """QA-acc of the first prediction of each image: the corpus value; the per-caption ones go to ``per_image``."""
    from rlcap.eval.qa_accuracy import qa_accuracy

    corpus, per_caption = qa_accuracy(*judge, {i: c[0] for i, c in preds.items() if c})
    for i, values in per_caption.items():
        per_image.setdefault(i, {}).update(values)
    return corpus


def _retrieval(path: Path) -> dict[str, float]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return retrieval_metrics(data["similarity"], data["caption_image"])
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: expected an .npz with 'similarity' and 'caption_image' ({exc})") from None


def _print_table(corpus: dict[str, float], num_images: int) -> None:
    width = max(len(name) for name in corpus)
    print(f"{'metric':<{width}}  {'score':>9}   ({num_images} images)")
    print(f"{'-' * width}  {'-' * 9}")
    for name, value in corpus.items():
        shown = "nan" if math.isnan(value) else f"{value:.4f}"
        print(f"{name:<{width}}  {shown:>9}")
