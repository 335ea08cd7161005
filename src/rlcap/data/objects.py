"""The ground-truth objects of ``--objects FILE`` (rlcap score, rlcap eval): a shapes dataset or COCO instances.

- a shapes dataset (``dataset_shapes.json``: ``images``, each with its ``scene``): exact, from the scenes
  (:mod:`rlcap.data.synthetic.objects`);
- COCO's instance annotations (``instances_val2014.json``: ``categories`` and ``annotations``): the annotated
  categories, with [Rohrbach18]'s union of the objects the references name (:mod:`rlcap.metrics.coco_objects`).
"""

from __future__ import annotations

import json
from pathlib import Path

from rlcap.data.synthetic.objects import shapes_truth
from rlcap.errors import DataError
from rlcap.metrics.coco_objects import read_coco_instances
from rlcap.metrics.hallucination import ObjectTruth


def read_object_truth(path: str | Path) -> ObjectTruth:
    """The objects of every picture ``path`` describes; one clear error when it is neither format."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path}: cannot read it as JSON ({exc})") from None
    if isinstance(data, dict) and "categories" in data and "annotations" in data:
        return read_coco_instances(path, data)
    if isinstance(data, dict) and isinstance(data.get("images"), list) and data["images"] and all(
            isinstance(im, dict) and "scene" in im for im in data["images"]):
        return shapes_truth(data["images"], str(path))
    raise DataError(f"{path}: expected a shapes dataset ({{'images': [...]}}, each image with its 'scene') or "
                    "COCO instance annotations ({'categories': [...], 'annotations': [...]})")
