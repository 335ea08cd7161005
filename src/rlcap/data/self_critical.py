"""self-critical.pytorch's prepared ``data/`` folder, made readable by rlcap.

That repository's scripts (``prepro_labels.py``, ``prepro_feats.py``) leave, in ``data/``:

* ``cocotalk.json``: ``{"ix_to_word": {"1": "a", ...}, "images": [{"id", "split", "file_path"}, ...]}``;
* ``cocotalk_label.h5``: ``labels`` (M, L) word ids (1-based, 0 pads), ``label_start_ix`` and
  ``label_end_ix`` (N,), each image's first and last caption row, 1-based and inclusive, images in
  ``cocotalk.json``'s order;
* ``cocobu_fc/<id>.npy`` and ``cocobu_att/<id>.npz`` (key ``feat``): the features;
* often Karpathy's ``dataset_coco.json``, which those scripts start from.

rlcap reads the features as they are (``data.features=data/cocobu``: :mod:`rlcap.data.features.folder`)
and Karpathy's file as it is (``data.dataset=data/dataset_coco.json``). :func:`import_self_critical`
gives the caption file when only ``cocotalk.json`` and its labels are there: it writes them out in the
Karpathy schema, each caption the words of its label row. Those captions are as the scripts left them:
lower-cased, cut to L words (16), rare words spelled as their ``UNK``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from rlcap.data.records import SPLITS
from rlcap.errors import DataError
from rlcap.files import write_json
from rlcap.metrics.io import read_json

INFO, LABELS, KARPATHY = "cocotalk.json", "cocotalk_label.h5", "dataset_coco.json"
FEATURE_PREFIXES = ("cocobu", "cocotalk")  # bottom-up features first, then the ResNet ones


class SelfCriticalData(NamedTuple):
    """What a run's ``data.dataset`` and ``data.features`` are set to for the folder."""

    dataset: Path
    features: Path


def cocotalk_images(info: str | Path, labels: str | Path) -> list[dict]:
    """The images of ``cocotalk.json`` with their captions from ``cocotalk_label.h5``, as Karpathy-schema
    entries (``cocoid``, ``split``, ``filename``, ``sentences``: ``raw`` text and ``tokens``)."""
    import h5py

    meta = read_json(info)
    if not isinstance(meta, dict) or not isinstance(meta.get("ix_to_word"), dict) or \
            not isinstance(meta.get("images"), list):
        raise DataError(f"{info}: expected self-critical's cocotalk.json, with 'ix_to_word' and 'images'")
    words = {int(ix): word for ix, word in meta["ix_to_word"].items()}
    try:
        with h5py.File(labels, "r") as h5:
            rows, start, end = (np.asarray(h5[key]) for key in ("labels", "label_start_ix", "label_end_ix"))
    except (OSError, KeyError) as exc:
        raise DataError(f"{labels}: expected self-critical's label file with labels, label_start_ix and "
                        f"label_end_ix ({exc})") from exc
    images = meta["images"]
    if not len(images) == len(start) == len(end):
        raise DataError(f"{labels}: {len(start)} images' label ranges for the {len(images)} images of {info}")
    return [_entry(image, rows[start[i] - 1:end[i]], words, f"{info} images[{i}]") for i, image in enumerate(images)]


def _entry(image: dict, labels: np.ndarray, words: dict[int, str], where: str) -> dict:
    """One Karpathy-schema image from a cocotalk image and its label rows (K, L)."""
    if "id" not in image or image.get("split") not in SPLITS:
        raise DataError(f"{where}: expected an 'id' and a 'split' in {list(SPLITS)}, got {image!r:.120}")
    if len(labels) == 0:
        raise DataError(f"{where} (id {image['id']}): no caption rows in the label file")
    sentences = []
    for row in labels:
        tokens = []
        for ix in row.tolist():
            if ix == 0:  # padding: the caption has ended
                break
            if ix not in words:
                raise DataError(f"{where} (id {image['id']}): word id {ix} is not in ix_to_word")
            tokens.append(words[ix])
        sentences.append({"raw": " ".join(tokens), "tokens": tokens})
    return {"cocoid": image["id"], "split": image["split"], "filename": image.get("file_path", ""),
            "sentences": sentences}


def feature_prefix(folder: Path) -> Path:
    """``folder/<prefix>`` of the first feature folders present (``cocobu_att``, then ``cocotalk_att``)."""
    for prefix in FEATURE_PREFIXES:
        if (folder / f"{prefix}_att").is_dir():
            return folder / prefix
    raise DataError(f"{folder}: no features, expected one of "
                    + ", ".join(f"{p}_att/ (with {p}_fc/)" for p in FEATURE_PREFIXES))


def import_self_critical(folder: str | Path, out: str | Path) -> SelfCriticalData:
    """The caption file and feature store of a self-critical.pytorch ``data/`` folder: its
    ``dataset_coco.json`` when there, else ``cocotalk.json`` and its labels written to ``out`` in the
    Karpathy schema; the features are the folder's own, read in place."""
    folder = Path(folder)
    features = feature_prefix(folder)
    if (folder / KARPATHY).is_file():
        return SelfCriticalData(folder / KARPATHY, features)
    if not (folder / INFO).is_file() or not (folder / LABELS).is_file():
        raise DataError(f"{folder}: no captions, expected {KARPATHY}, or {INFO} with {LABELS}")
    write_json(out, {"dataset": "coco", "source": str(folder.resolve()),
                     "images": cocotalk_images(folder / INFO, folder / LABELS)})
    return SelfCriticalData(Path(out), features)
