"""Reading reference and prediction files, with errors that name the file and the item.

REFS: COCO annotations ``{"annotations": [{"image_id", "caption"}, ...]}`` or ``{id: [captions]}``.
PREDS: COCO results ``[{"image_id", "caption"}, ...]`` or ``{id: [captions]}`` (or ``{id: caption}``).
Image ids are strings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlcap.errors import DataError


def read_json(path: Path) -> Any:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None


def read_refs(path: Path) -> dict[str, list[str]]:
    data = read_json(path)
    if isinstance(data, dict) and "annotations" in data:
        return _from_records(path, data["annotations"], "annotations")
    if isinstance(data, dict):
        return _from_mapping(path, data)
    raise DataError(f"{path}: expected COCO annotations {{'annotations': [...]}} or {{image_id: [captions]}}")


def read_preds(path: Path) -> dict[str, list[str]]:
    data = read_json(path)
    if isinstance(data, list):
        return _from_records(path, data, "results")
    if isinstance(data, dict):
        return _from_mapping(path, data)
    raise DataError(f"{path}: expected COCO results [{{'image_id', 'caption'}}] or {{image_id: [captions]}}")


def _from_records(path: Path, records: Any, what: str) -> dict[str, list[str]]:
    if not isinstance(records, list):
        raise DataError(f"{path}: {what} must be a list of {{'image_id', 'caption'}}")
    out: dict[str, list[str]] = {}
    for i, record in enumerate(records):
        if not isinstance(record, dict) or "image_id" not in record or "caption" not in record:
            raise DataError(f"{path}: {what}[{i}] needs 'image_id' and 'caption'")
        if not isinstance(record["caption"], str):
            raise DataError(f"{path}: {what}[{i}] (image {record['image_id']}): caption is not a string")
        out.setdefault(str(record["image_id"]), []).append(record["caption"])
    return out


def _from_mapping(path: Path, data: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for image_id, captions in data.items():
        if isinstance(captions, str):
            captions = [captions]
        if not isinstance(captions, list) or not all(isinstance(c, str) for c in captions):
            raise DataError(f"{path}: image {image_id}: expected a list of caption strings")
        out[str(image_id)] = list(captions)
    return out
