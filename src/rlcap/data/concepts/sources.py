"""Caption files a concepts dataset is built from, read as ``{image id: [captions]}`` in file order.

Three layouts, told apart by their contents:

* ``{id: [caption, ...]}`` (``val2014_captions.json`` in ``../shared/data/coco``);
* COCO annotations, ``{"annotations": [{"image_id", "caption"}, ...]}``: captions in annotation order;
* a Karpathy split file, ``{"images": [{"sentences": [{"raw"}], ...}]}`` (read by
  :func:`rlcap.data.readers.read_karpathy`; its splits are not used, the build makes its own).

Caption 0 of each image is the one held out to describe the scene, so the order matters.
"""

from __future__ import annotations

from pathlib import Path

from rlcap.data.readers import read_karpathy
from rlcap.errors import DataError
from rlcap.metrics.io import read_json


def read_caption_file(path: str | Path) -> dict[str, list[str]]:
    """Image id -> its captions; every image must have at least two (one held out, one reference)."""
    data = read_json(path)
    if isinstance(data, dict) and isinstance(data.get("images"), list):
        captions = {r.id: list(r.captions) for r in read_karpathy(path)}
    elif isinstance(data, dict) and isinstance(data.get("annotations"), list):
        captions = _coco_annotations(data["annotations"], path)
    elif isinstance(data, dict) and all(isinstance(v, list) for v in data.values()):
        captions = {str(k): list(v) for k, v in data.items()}
    else:
        raise DataError(f"{path}: expected {{id: [captions]}}, COCO annotations or a Karpathy split file")
    for image_id, caps in captions.items():
        if len(caps) < 2 or not all(isinstance(c, str) for c in caps):
            raise DataError(f"{path}: image {image_id!r} needs at least 2 caption strings "
                            f"(one held out, one reference); it has {len(caps)}")
    if not captions:
        raise DataError(f"{path}: no images")
    return captions


def _coco_annotations(annotations: list, path: str | Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i, ann in enumerate(annotations):
        if not isinstance(ann, dict) or "image_id" not in ann or "caption" not in ann:
            raise DataError(f"{path}: annotations[{i}] needs 'image_id' and 'caption'")
        out.setdefault(str(ann["image_id"]), []).append(ann["caption"])
    return out
