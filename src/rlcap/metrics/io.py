"""Reading reference and prediction files, with errors that name the file and the item.

REFS: COCO annotations ``{"annotations": [{"image_id", "caption"}, ...]}``, ``{id: [captions]}``, or a
Karpathy split file ``{"images": [{"cocoid"|"id"|"imgid", "sentences": [{"raw"}]}]}`` (the references of
every image in it, whatever its split: the predictions pick the images scored).
PREDS: COCO results ``[{"image_id", "caption"}, ...]``, one caption per image (an id twice is an error),
or ``{id: [captions]}`` (or ``{id: caption}``), which may hold several captions per image.
Image ids are strings. An image id twice (a key twice in ``{id: [captions]}``, an image twice in a
Karpathy file, one result twice) is refused: JSON keeps only the last of two keys, and two images
under one id would be scored as one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlcap.errors import DataError


def read_json(path: Path, unique_keys: bool = False) -> Any:
    """The JSON value in ``path``; with ``unique_keys``, a top-level object holding a key twice is refused."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text, object_pairs_hook=_object if unique_keys else None)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if isinstance(data, _Object) and data.repeated is not None:  # {image_id: [captions]} with an id twice
        raise DataError(f"{path}: image id {data.repeated!r} appears twice as a key; every image needs its own id "
                        "(JSON keeps only the last of the two)")
    return data


class _Object(dict):
    """A parsed JSON object that remembers the first key it held twice (json keeps the last value)."""

    repeated: str | None = None


def _object(items: list[tuple[str, Any]]) -> _Object:
    out = _Object()
    for key, value in items:
        if key in out and out.repeated is None:
            out.repeated = key
        out[key] = value
    return out


def read_refs(path: Path) -> dict[str, list[str]]:
    data = read_json(path, unique_keys=True)
    if isinstance(data, dict) and "annotations" in data:
        return _from_records(path, data["annotations"], "annotations")
    if isinstance(data, dict) and isinstance(data.get("images"), list):
        return _from_karpathy(path, data["images"])
    if isinstance(data, dict):
        return _from_mapping(path, data)
    raise DataError(f"{path}: expected COCO annotations {{'annotations': [...]}}, a Karpathy split file "
                    "{'images': [...]} or {image_id: [captions]}")


def read_preds(path: Path) -> dict[str, list[str]]:
    """COCO results, ``{image_id: [captions]}`` (or one caption string an image), or a captions file that ``rlcap
    bench`` writes (``captions/NAME.json``: ``{"captions": {image_id: caption}, "per_image": ...}``)."""
    data = read_json(path, unique_keys=True)
    if isinstance(data, list):
        return _from_records(path, data, "results", one_per_image=True)
    if isinstance(data, dict) and isinstance(data.get("captions"), dict) and "per_image" in data:
        return _from_mapping(path, data["captions"])  # (rlcap bench's captions file)
    if isinstance(data, dict):
        return _from_mapping(path, data)
    raise DataError(f"{path}: expected COCO results [{{'image_id', 'caption'}}] or {{image_id: [captions]}}")


def _from_records(path: Path, records: Any, what: str, one_per_image: bool = False) -> dict[str, list[str]]:
    if not isinstance(records, list):
        raise DataError(f"{path}: {what} must be a list of {{'image_id', 'caption'}}")
    out: dict[str, list[str]] = {}
    first: dict[str, int] = {}
    for i, record in enumerate(records):
        if not isinstance(record, dict) or "image_id" not in record or "caption" not in record:
            raise DataError(f"{path}: {what}[{i}] needs 'image_id' and 'caption'")
        if not isinstance(record["caption"], str):
            raise DataError(f"{path}: {what}[{i}] (image {record['image_id']}): caption is not a string")
        image_id = str(record["image_id"])
        if one_per_image and image_id in first:
            raise DataError(f"{path}: image {image_id!r} appears twice ({what}[{first[image_id]}] and [{i}]); "
                            "COCO results hold one caption per image (for several, use {image_id: [captions]})")
        first.setdefault(image_id, i)
        out.setdefault(image_id, []).append(record["caption"])
    return out


_KARPATHY_ID_KEYS = ("cocoid", "id", "imgid")  # the first present is the id, as rlcap.data.readers reads it


def _from_karpathy(path: Path, images: list[Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    first: dict[str, int] = {}
    for i, image in enumerate(images):
        key = next((k for k in _KARPATHY_ID_KEYS if isinstance(image, dict) and k in image), None)
        sentences = image.get("sentences") if key is not None else None
        if key is None or not isinstance(sentences, list):
            raise DataError(f"{path}: images[{i}] needs one of {', '.join(_KARPATHY_ID_KEYS)} and a "
                            "'sentences' list (a Karpathy split file)")
        captions = [s.get("raw") if isinstance(s, dict) else None for s in sentences]
        if not all(isinstance(c, str) for c in captions):
            raise DataError(f"{path}: images[{i}] (image {image[key]}): every sentence needs 'raw' text")
        image_id = str(image[key])
        if image_id in first:
            raise DataError(f"{path}: image id {image_id!r} appears twice (images[{first[image_id]}] and "
                            f"images[{i}]); every image needs its own id")
        first[image_id] = i
        out[image_id] = captions
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
