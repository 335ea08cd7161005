"""``rlcap data``: prepare datasets (``rlcap data shapes --out DIR``: the synthetic benchmark;
``rlcap data moving-shapes --out DIR``: its video counterpart; ``rlcap data concepts --captions
FILE --out DIR``: scenes from the concepts of human captions; ``rlcap data reader``: a text-only QA reader)."""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable

from rlcap.cli.reader import add_parser as add_reader_parser
from rlcap.cli.options import float_range, int_range
from rlcap.data.concepts import ConceptsConfig
from rlcap.data.synthetic.moving import MovingShapesConfig
from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes, is_complete
from rlcap.progress import progress

# What each numeric field of ShapesConfig accepts on the command line (every one must be listed).
SHAPES_RANGES: dict[str, Callable[[str], int]] = {
    "seed": int_range(0), "n_train": int_range(0), "n_val": int_range(0), "n_test": int_range(0),
    "image_size": int_range(32), "max_objects": int_range(1, 4), "workers": int_range(1), "captions": int_range(1, 2),
}

MOVING_RANGES: dict[str, Callable[[str], int]] = {
    "seed": int_range(0), "n_train": int_range(0), "n_val": int_range(0), "n_test": int_range(0),
    "image_size": int_range(32), "min_frames": int_range(8), "max_frames": int_range(8), "fps": int_range(1),
    "max_objects": int_range(1, 3), "captions": int_range(3, 5), "workers": int_range(1),
}


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("data", help="prepare datasets",
                                   description="Prepare datasets.")
    datasets = parser.add_subparsers(dest="dataset", metavar="DATASET", required=True)
    shapes = datasets.add_parser(
        "shapes", help="generate the synthetic 'shapes' captioning benchmark",
        description="Render the 'shapes' benchmark: PNG images and dataset_shapes.json "
                    "(Karpathy schema). Rerunning with the same options is a no-op.")
    shapes.add_argument("--out", required=True, help="output folder")
    _add_config_arguments(shapes, ShapesConfig, SHAPES_RANGES)
    shapes.set_defaults(func=run)
    moving = datasets.add_parser(
        "moving-shapes", help="generate the synthetic 'moving shapes' video captioning benchmark",
        description="Render 'moving shapes' clips (MP4 via PyAV) and annotations.json (MSR-VTT format): "
                    "1-3 objects, 2-4 actions in order or together, captions that tell them with connectives. "
                    "Rerunning with the same options is a no-op.")
    moving.add_argument("--out", required=True, help="output folder")
    _add_config_arguments(moving, MovingShapesConfig, MOVING_RANGES)
    moving.set_defaults(func=run_moving)
    concepts = datasets.add_parser(
        "concepts", help="build a dataset of scenes from the concepts of human captions (docs/CONCEPTS.md)",
        description="For every image of a caption file, hold out caption 0 and turn its content words, "
                    "with perception noise, into GloVe region features; the other captions are the "
                    "references. Writes feats.h5, dataset_concepts.json and concepts.json. Rerunning "
                    "with the same options is a no-op.")
    concepts.add_argument("--captions", required=True,
                          help="{id: [captions]} JSON, COCO annotations or a Karpathy split file")
    concepts.add_argument("--out", required=True, help="output folder")
    _add_config_arguments(concepts, ConceptsConfig, CONCEPTS_TYPES)
    concepts.set_defaults(func=run_concepts)
    add_reader_parser(datasets)
    return parser


_share = float_range(0.0, 1.0)  # argparse type: a probability in [0, 1)


def _distractors(text: str) -> str:
    """argparse ``type``: N or LO-HI."""
    from rlcap.data.concepts.noise import parse_distractors
    from rlcap.errors import ConfigError

    try:
        parse_distractors(text)
    except ConfigError:
        raise argparse.ArgumentTypeError(f"expected N or LO-HI with 0 <= LO <= HI (e.g. 1-2), got {text!r}") from None
    return text


# What each field of ConceptsConfig accepts on the command line (every one must be listed).
CONCEPTS_TYPES: dict[str, Callable[[str], object]] = {
    "seed": int_range(0), "drop": _share, "distractors": _distractors, "n_val": int_range(0),
    "n_test": int_range(0), "agreement": str, "max_train_images": int_range(0),
}


def _add_config_arguments(parser: argparse.ArgumentParser, config_cls: type,
                          types: dict[str, Callable[[str], int]]) -> None:
    """One ``--flag`` per dataclass field, with the field's help text and default; a field that is
    not a bool is read by its entry in ``types`` (which checks the value's range)."""
    for f in dataclasses.fields(config_cls):
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.metadata['help']} (default: {f.default})"
        if isinstance(f.default, bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=f.default, help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, type=types[f.name], default=f.default,
                                help=help_text)


def run_concepts(args: argparse.Namespace) -> int:
    from rlcap.data.concepts import build_concepts

    config = ConceptsConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ConceptsConfig)})
    start = time.perf_counter()
    result = build_concepts(args.captions, args.out, config)
    counts = ", ".join(f"{n} {split}" for split, n in result.n_images.items())
    if result.skipped:
        print(f"{args.out}: up to date ({counts})")
    else:
        print(f"wrote {result.features} and {result.dataset} ({counts}) in {time.perf_counter() - start:.1f} s")
    _print_split_stats(args.out)
    return 0


def _print_split_stats(folder: str) -> None:
    """Per split: its scenes (and share of all) and the mean concepts per scene (docs/CONCEPTS.md)."""
    from rlcap.data.concepts import load_concepts
    from rlcap.data.concepts.stats import scene_stats

    concepts = load_concepts(folder)
    print(f"{'split':5s}  {'scenes':>6s}  {'share':>5s}  {'concepts':>8s}  {'kept':>5s}  {'dropped':>7s}  "
          f"{'distractors':>11s}  {'regions':>7s}")
    for split in ("train", "val", "test"):
        if not any(scene["split"] == split for scene in concepts.values()):
            continue
        st = scene_stats(concepts, split)
        print(f"{split:5s}  {st.n_scenes:6d}  {st.n_scenes / len(concepts):5.0%}  {st.concepts:8.2f}  {st.kept:5.2f}  "
              f"{st.dropped:7.2f}  {st.distractors:11.2f}  {st.regions:7.2f}")


def _generate(args: argparse.Namespace, config_cls: type, complete: Callable, generate: Callable, count: str,
              name: str, unit: str, what: str) -> int:
    """Build ``config_cls`` from the flags, then generate into ``--out`` unless it is complete already.
    ``unit``: the progress bar's ("img"); ``what``: the printed plural ("images")."""
    config = config_cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)})
    n = getattr(config, count)
    if complete(config, args.out):
        generate(config, args.out)  # (nothing to draw; writes what a complete folder of an earlier rlcap lacks)
        print(f"{args.out}: up to date ({n} {what})")
        return 0
    start = time.perf_counter()
    with progress(n, name, unit=unit) as bar:
        path = generate(config, args.out, progress=bar.update)
    print(f"wrote {n} {what} and {path} in {time.perf_counter() - start:.1f} s")
    return 0


def run_moving(args: argparse.Namespace) -> int:
    from rlcap.data.synthetic.moving import generate_moving_shapes, is_complete as moving_complete

    return _generate(args, MovingShapesConfig, moving_complete, generate_moving_shapes, "n_videos", "moving-shapes",
                     "clip", "clips")


def run(args: argparse.Namespace) -> int:
    return _generate(args, ShapesConfig, is_complete, generate_shapes, "n_images", "shapes", "img", "images")
