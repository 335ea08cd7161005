"""Train, validation and test splits of a concepts dataset, and each scene's held-out caption.

COCO (``--agreement human_agreement_5k.json``): the test split is exactly the images of the
human-agreement file, each with that file's held-out caption (``candidate``) and references, so the
human agreement of the test split is the file's (pycocoevalcap's CIDEr-D 0.893). Validation is
``n_val`` other images drawn with the seed, training the rest. Any other caption file: ``n_test``
and ``n_val`` images drawn with the seed. Elsewhere caption 0 of an image is held out and the
others are its references. ``max_train_images`` keeps the first N training images of the seeded
order (quick runs); validation and test do not change with it. Sizes that would leave training
less than half of the images are refused.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from rlcap.errors import DataError
from rlcap.metrics.io import read_json


class SceneText(NamedTuple):
    id: str
    split: str
    held_out: str  # describes the scene: its concepts come from it
    references: list[str]  # the captions a model is trained on and scored against


def read_agreement(path: str | Path) -> dict[str, tuple[str, list[str]]]:
    """``[{image_id, candidate, references}]`` -> id -> (held-out caption, references)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a list of {{image_id, candidate, references}}")
    out = {}
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not {"image_id", "candidate", "references"} <= item.keys():
            raise DataError(f"{path}: entry {i} needs image_id, candidate and references")
        out[str(item["image_id"])] = (item["candidate"], list(item["references"]))
    return out


def make_splits(captions: Mapping[str, list[str]], seed: int, n_val: int, n_test: int,
                agreement: str | Path | None = None, max_train_images: int = 0) -> list[SceneText]:
    """Every scene kept, test first, then validation, then training (see the module docstring)."""
    test: dict[str, tuple[str, list[str]]] = {}
    if agreement is not None:
        test = read_agreement(agreement)
        missing = [i for i in test if i not in captions]
        if missing:
            raise DataError(f"{agreement}: image {missing[0]!r} (and {len(missing) - 1} more) "
                            "is not in the caption file")
        n_test = 0
    rest = sorted((i for i in captions if i not in test), key=_id_order)
    random.Random(f"concepts-splits/{seed}").shuffle(rest)
    _check_training_share(len(captions), len(test) or n_test, n_val, agreement is not None)
    test.update((i, (captions[i][0], captions[i][1:])) for i in rest[:n_test])
    val, train = rest[n_test:n_test + n_val], rest[n_test + n_val:]
    if max_train_images:
        train = train[:max_train_images]
    scenes = [SceneText(i, "test", *test[i]) for i in sorted(test, key=_id_order)]
    scenes += [SceneText(i, split, captions[i][0], captions[i][1:])
               for split, ids in (("val", val), ("train", train)) for i in ids]
    return scenes


def _check_training_share(total: int, n_test: int, n_val: int, agreement: bool) -> None:
    """Refuse split sizes that leave training less than half of the scenes (the defaults, 5,000 test
    and 2,500 validation, are sized for COCO's 40,504; on a small corpus they leave little to train on)."""
    n_train = total - n_test - n_val
    if 2 * n_train >= total:
        return
    test = "the agreement file's" if agreement else "--n-test"
    lower = "--n-val" if agreement else "--n-test and --n-val"
    example = f"--n-val {total // 10}" if agreement else f"--n-test {total // 10} --n-val {total // 10}"
    raise DataError(f"the caption file has {total} images: {n_test} test ({test}) and {n_val} validation "
                    f"(--n-val) would leave {max(n_train, 0)} for training, less than half; lower {lower} "
                    f"(e.g. {example})")


def _id_order(image_id: str) -> tuple[int, int | str]:
    """Numeric ids in numeric order, others after them as strings."""
    return (0, int(image_id)) if image_id.isdigit() else (1, image_id)
