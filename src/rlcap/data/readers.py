"""Caption readers: the Karpathy split file, COCO annotations plus a split list, MSR-VTT's
annotation file (videos), and JSONL.

Each returns a list of :class:`ImageRecord`. Captions are tokenized with the same function as
evaluation (:func:`rlcap.metrics.tokenize`), so that the training vocabulary, the rewards and
the scores all see the same words; the Karpathy file's own ``tokens`` are not used for that
reason (they differ from the PTB tokenization in a few hundred COCO captions).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlcap.data.hf_datasets import Columns, layout, read_hf_dataset
from rlcap.data.records import SPLITS, ImageRecord
from rlcap.errors import DataError
from rlcap.metrics.io import read_json  # one JSON reader for every file rlcap reads


_TOKENIZE: contextvars.ContextVar[bool] = contextvars.ContextVar("rlcap_readers_tokenize", default=True)


@contextlib.contextmanager
def raw_captions() -> Iterator[None]:
    """Inside it, the readers leave ``ImageRecord.tokens`` empty: for a reader that shows captions and needs
    no words (``rlcap report``), tokenizing COCO's 600k captions would be most of its time."""
    token = _TOKENIZE.set(False)
    try:
        yield
    finally:
        _TOKENIZE.reset(token)


def _tokenize_all(records: list[ImageRecord]) -> list[ImageRecord]:
    from rlcap.metrics import tokenize

    for rec in records:
        if not rec.captions:
            raise DataError(f"image {rec.id!r} has no captions")
        if _TOKENIZE.get():
            rec.tokens = [tokenize(c) for c in rec.captions]
    return records


def _record_id(item: dict[str, Any], where: str) -> str:
    for key in ("cocoid", "id", "imgid"):
        if key in item:
            return _id_text(item[key], f"{where} {key}")
    raise DataError(f"{where}: image entry has none of the id fields cocoid, id, imgid")


def _id_text(value: Any, where: str) -> str:
    """An image id as the string rlcap keys everything by; a string or an integer is expected."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{where}: image id {value!r} is a {_kind(value)}; expected a string or an integer")
    return str(value)


def _kind(value: Any) -> str:
    """A JSON value's type in words, for messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object", type(None): "null"}.get(type(value), type(value).__name__)


def _caption_list(value: Any, where: str) -> list[str]:
    """A record's captions: a list of strings, else one line naming the record and what was expected
    (a bare string would otherwise be read as one caption per character)."""
    if not isinstance(value, list):
        hint = f" ([{json.dumps(value)}] for one caption)" if isinstance(value, str) else ""
        raise DataError(f"{where}: 'captions' is a {_kind(value)}; expected a list of caption strings{hint}")
    for k, caption in enumerate(value):
        if not isinstance(caption, str):
            raise DataError(f"{where}: captions[{k}] is a {_kind(caption)} ({caption!r}); expected a caption string")
    return list(value)


class _UniqueIds:
    """Refuses an image id seen before in the same file: two images under one id would share
    features, references and one prediction (``where`` says where each was seen)."""

    def __init__(self, path: str | Path, what: str = "image"):
        self.path, self.what = path, what
        self.first: dict[str, str] = {}

    def add(self, image_id: str, where: str) -> None:
        if image_id in self.first:
            raise DataError(f"{self.path}: {self.what} id {image_id!r} appears twice ({self.first[image_id]} and "
                            f"{where}); every {self.what} needs its own id")
        self.first[image_id] = where


def read_karpathy(path: str | Path, restval_to_train: bool = True) -> list[ImageRecord]:
    """``dataset_coco.json`` schema: ``{"images": [{filename, split, sentences: [{raw, tokens}], cocoid}]}``."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise DataError(f"{path}: expected a Karpathy split file with an 'images' list")
    records = []
    seen = _UniqueIds(path)
    for i, item in enumerate(data["images"]):
        if not isinstance(item, dict):
            raise DataError(f"{path}: images[{i}] is a {_kind(item)}; expected an object")
        rid = _record_id(item, f"{path} images[{i}]")
        seen.add(rid, f"images[{i}]")
        split = item.get("split")
        if split not in SPLITS:
            raise DataError(f"{path}: image {rid!r} has split {split!r}; expected one of {list(SPLITS)}")
        if split == "restval" and restval_to_train:
            split = "train"
        sentences = item.get("sentences")
        if not isinstance(sentences, list):
            raise DataError(f"{path}: image {rid!r} has no 'sentences' list")
        captions = [s["raw"] if isinstance(s, dict) and "raw" in s else None for s in sentences]
        if None in captions:
            raise DataError(f"{path}: image {rid!r} has a sentence without 'raw' text")
        for k, raw in enumerate(captions):
            if not isinstance(raw, str):
                raise DataError(f"{path}: image {rid!r} sentences[{k}] 'raw' is a {_kind(raw)} ({raw!r}); "
                                "expected the caption text")
        filename = item.get("filename")
        if filename and item.get("filepath"):
            filename = f"{item['filepath']}/{filename}"
        records.append(ImageRecord(id=rid, split=split, captions=captions, filename=filename))
    return _tokenize_all(records)


def read_coco(annotations: str | Path, splits: str | Path) -> list[ImageRecord]:
    """COCO caption annotations plus a split list ``{"train": [ids], "val": [...], "test": [...]}``."""
    data = read_json(annotations)
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        raise DataError(f"{annotations}: expected COCO annotations with an 'annotations' list")
    split_of: dict[str, str] = {}
    split_data = read_json(splits)
    if not isinstance(split_data, dict):
        raise DataError(f"{splits}: expected a mapping from split name to a list of image ids")
    listed = _UniqueIds(splits)
    for split, ids in split_data.items():
        if split not in SPLITS:
            raise DataError(f"{splits}: unknown split {split!r}; expected one of {list(SPLITS)}")
        if not isinstance(ids, list):
            raise DataError(f"{splits}: split {split!r} is a {_kind(ids)}; expected a list of image ids")
        for k, image_id in enumerate(ids):
            image_id = _id_text(image_id, f"{splits} {split}[{k}]")
            listed.add(image_id, f"{split}[{k}]")
            split_of[image_id] = "train" if split == "restval" else split
    filenames: dict[str, str | None] = {}
    images = _UniqueIds(annotations)
    for i, im in enumerate(data.get("images", [])):
        if not isinstance(im, dict) or "id" not in im:
            raise DataError(f"{annotations}: images[{i}] needs an 'id'")
        image_id = _id_text(im["id"], f"{annotations} images[{i}]")
        images.add(image_id, f"images[{i}]")
        filenames[image_id] = im.get("file_name")
    captions: dict[str, list[str]] = {}
    for i, ann in enumerate(data["annotations"]):
        if not isinstance(ann, dict) or "image_id" not in ann or "caption" not in ann:
            raise DataError(f"{annotations}: annotations[{i}] needs 'image_id' and 'caption'")
        if not isinstance(ann["caption"], str):
            raise DataError(f"{annotations}: annotations[{i}] 'caption' is a {_kind(ann['caption'])} "
                            f"({ann['caption']!r}); expected the caption text")
        image_id = _id_text(ann["image_id"], f"{annotations} annotations[{i}]")
        captions.setdefault(image_id, []).append(ann["caption"])
    records = [ImageRecord(id=i, split=split_of[i], captions=c, filename=filenames.get(i))
               for i, c in captions.items() if i in split_of]
    return _tokenize_all(records)


def read_jsonl(path: str | Path) -> list[ImageRecord]:
    """One JSON object per line: ``{"id", "split", "captions": [...]}`` (optional ``filename``)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text") from exc
    records = []
    seen = _UniqueIds(path)
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: not valid JSON: {exc.msg}") from exc
        if not isinstance(item, dict):
            raise DataError(f"{path}:{lineno}: a {_kind(item)}; expected an object {{\"id\", \"split\", \"captions\"}}")
        missing = [k for k in ("id", "split", "captions") if k not in item]
        if missing:
            raise DataError(f"{path}:{lineno}: missing {', '.join(missing)}")
        if not isinstance(item["split"], str) or item["split"] not in SPLITS:
            raise DataError(f"{path}:{lineno}: split {item['split']!r} is not one of {list(SPLITS)}")
        split = "train" if item["split"] == "restval" else item["split"]
        image_id = _id_text(item["id"], f"{path}:{lineno}")
        seen.add(image_id, f"line {lineno}")
        captions = _caption_list(item["captions"], f"{path}:{lineno}")
        records.append(ImageRecord(id=image_id, split=split, captions=captions, filename=item.get("filename")))
    return _tokenize_all(records)


MSRVTT_SPLITS = {"train": "train", "validate": "val", "val": "val", "test": "test"}


def read_msrvtt(path: str | Path) -> list[ImageRecord]:
    """MSR-VTT's annotation file: ``{"videos": [{video_id, split, ...}], "sentences": [{video_id,
    caption}]}``; split ``validate`` is ``val``. A video's file is ``<video_id>.mp4`` unless its entry
    names one (``filename`` or ``url``-less ``path``). Multi-sentence captions (Charades Captions'
    paragraphs) are one caption each; the tokenizer keeps their words and drops the periods."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("videos"), list) or not isinstance(
            data.get("sentences"), list):
        raise DataError(f"{path}: expected MSR-VTT annotations with 'videos' and 'sentences' lists")
    captions: dict[str, list[str]] = {}
    for k, sentence in enumerate(data["sentences"]):
        if not isinstance(sentence, dict) or "video_id" not in sentence or "caption" not in sentence:
            raise DataError(f"{path}: sentences[{k}] lacks video_id or caption")
        if not isinstance(sentence["caption"], str):
            raise DataError(f"{path}: sentences[{k}] 'caption' is a {_kind(sentence['caption'])} "
                            f"({sentence['caption']!r}); expected the caption text")
        captions.setdefault(_id_text(sentence["video_id"], f"{path} sentences[{k}]"), []).append(sentence["caption"])
    records = []
    seen = _UniqueIds(path, "video")
    for k, video in enumerate(data["videos"]):
        if not isinstance(video, dict) or "video_id" not in video or "split" not in video:
            raise DataError(f"{path}: videos[{k}] lacks video_id or split")
        vid, split = _id_text(video["video_id"], f"{path} videos[{k}]"), MSRVTT_SPLITS.get(str(video["split"]))
        seen.add(vid, f"videos[{k}]")
        if split is None:
            raise DataError(f"{path}: video {vid!r} has split {video['split']!r}; expected one of {sorted(MSRVTT_SPLITS)}")
        if vid not in captions:
            raise DataError(f"{path}: video {vid!r} has no sentences")
        records.append(ImageRecord(id=vid, split=split, captions=captions[vid],
                                   filename=video.get("filename") or video.get("path") or f"{vid}.mp4"))
    return _tokenize_all(records)


READERS: dict[str, Callable[..., list[ImageRecord]]] = {
    "karpathy": read_karpathy,
    "coco": read_coco,
    "jsonl": read_jsonl,
    "msrvtt": read_msrvtt,
}


def _looks_like_msrvtt(path: Path) -> bool:
    """An annotation file with a top-level "videos" key (read cheaply: the first 64 KB)."""
    try:
        with path.open("rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    return b'"videos"' in head and b'"images"' not in head


def read_dataset(path: str | Path, fmt: str = "auto", coco_splits: str | Path | None = None,
                 columns: Columns = Columns()) -> list[ImageRecord]:
    """Read any supported format; ``auto`` picks a Hugging Face datasets dataset by its layout (``columns``: which
    of its columns hold what, :mod:`rlcap.data.hf_datasets`), JSONL by the ``.jsonl`` suffix, else inspects the
    JSON."""
    path = Path(path)
    if fmt == "hf" or (fmt == "auto" and layout(path) is not None):
        return _tokenize_all(read_hf_dataset(path, columns))
    if fmt == "auto":
        if path.suffix == ".jsonl":
            fmt = "jsonl"
        elif coco_splits is not None:
            fmt = "coco"
        else:
            fmt = "msrvtt" if _looks_like_msrvtt(path) else "karpathy"
    if fmt not in READERS:
        raise DataError(f"unknown dataset format {fmt!r}; expected one of {['auto', *READERS, 'hf']}")
    if fmt == "coco":
        if coco_splits is None:
            raise DataError("the coco format needs a split list (data.coco_splits)")
        return read_coco(path, coco_splits)
    return READERS[fmt](path)


def by_split(records: list[ImageRecord]) -> dict[str, list[ImageRecord]]:
    out: dict[str, list[ImageRecord]] = {}
    for rec in records:
        out.setdefault(rec.split, []).append(rec)
    return out
