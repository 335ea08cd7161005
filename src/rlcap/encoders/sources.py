"""Which images to encode: id -> file, from a folder or from a Karpathy-split dataset JSON; the
files named on the ``rlcap caption`` command line, folders expanded."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rlcap.data.embedded import EmbeddedImage
from rlcap.data.hf_datasets import Columns, layout, named_pictures
from rlcap.data.media import IMAGE_SUFFIXES, VIDEO_SUFFIXES
from rlcap.data.records import ImageRecord
from rlcap.errors import DataError

KARPATHY_ID_KEYS = ("cocoid", "id", "imgid")  # first present wins (COCO, then generic, then Flickr)


def find_images(image_dir: str | Path, suffixes: tuple[str, ...] = IMAGE_SUFFIXES) -> dict[str, Path]:
    """Every image (or, with ``suffixes=VIDEO_SUFFIXES``, video) under ``image_dir`` (recursively),
    keyed by file stem, sorted by id. Two files with the same stem are an error (the id would be ambiguous).
    """
    image_dir = Path(image_dir)
    what = "videos" if suffixes == VIDEO_SUFFIXES else "images"
    if not image_dir.is_dir():
        raise DataError(f"{what[:-1]} folder not found: {image_dir}")
    images: dict[str, Path] = {}
    for path in sorted(image_dir.rglob("*")):
        if path.suffix.lower() not in suffixes or not path.is_file():
            continue
        if path.stem in images:
            raise DataError(f"two {what} share the id '{path.stem}': {images[path.stem]} and {path}")
        images[path.stem] = path
    if not images:
        raise DataError(f"no {what} ({', '.join(suffixes)}) in {image_dir}")
    return dict(sorted(images.items()))


def find_media(folder: str | Path) -> dict[str, Path]:
    """The images under ``folder``, or its videos (:func:`find_images`). A folder holding both is an
    error: one feature store holds one kind, and leaving either out without a word would lose them."""
    folder = Path(folder)
    if not folder.is_dir():
        return find_images(folder)  # its "not found" error
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
    videos = [p for p in files if p.suffix.lower() in VIDEO_SUFFIXES]
    if images and videos:
        raise DataError(f"{folder} holds both images ({len(images)}, e.g. {images[0].name}) and videos "
                        f"({len(videos)}, e.g. {videos[0].name}): a feature store holds one kind; give a folder of "
                        "images or a folder of videos")
    if not videos:
        return find_images(folder)  # the images, or its "no images" error
    return find_images(folder, VIDEO_SUFFIXES)


def dataset_files(dataset: str | Path, folder: str | Path,
                  columns: Columns = Columns()) -> dict[str, Path | EmbeddedImage]:
    """Ids and files of any caption file rlcap reads (``folder/filename``): MSR-VTT's videos, JSONL, ...; a picture
    a datasets dataset stores in its own files is read there (``columns``: which of its columns hold what)."""
    from rlcap.data.readers import raw_captions, read_dataset

    with raw_captions():  # the files are what is read here, not the words
        records = read_dataset(dataset, columns=columns)
    return record_pictures(records, dataset, folder)


def record_pictures(records: Sequence[ImageRecord], dataset: str | Path,
                    folder: str | Path) -> dict[str, Path | EmbeddedImage]:
    """Each record's picture: the one a datasets dataset stores in its own files, else ``folder/filename`` (a
    datasets dataset's file names are relative to its own folder); :class:`DataError` for a record naming none."""
    missing = [r.id for r in records if not r.filename and r.image is None]
    if missing:
        raise DataError(f"{dataset}: {missing[0]!r} names no file")
    if layout(dataset) is not None:
        folder = dataset if Path(dataset).is_dir() else Path(dataset).parent
    return {r.id: r.image if r.image is not None else Path(folder) / str(r.filename) for r in records}


def expand_image_paths(paths: Sequence[str | Path]) -> list[Path | EmbeddedImage]:
    """The pictures of :func:`named_images`, in order."""
    return [picture for _, picture in named_images(paths)]


def named_images(paths: Sequence[str | Path]) -> list[tuple[str, Path | EmbeddedImage]]:
    """``paths`` in order as (name, picture), each folder replaced by the images under it (recursively, sorted):
    what ``rlcap caption`` captions, and the names it gives the captions.

    Files are kept whatever their suffix (a bad one fails when it is read), each named by its path; a folder
    stands for its images and videos (:data:`IMAGE_SUFFIXES`, :data:`VIDEO_SUFFIXES`), and one holding neither is
    a :class:`DataError`. A Hugging Face datasets dataset (:mod:`rlcap.data.hf_datasets`) stands for its pictures
    in its order, each named by its row (``DATASET train row 0``) whether it stores the picture's bytes (read
    where they lie) or its file name.
    """
    suffixes = IMAGE_SUFFIXES + VIDEO_SUFFIXES
    out: list[tuple[str, Path | EmbeddedImage]] = []
    for path in map(Path, paths):
        if layout(path) is not None:
            out.extend(named_pictures(path))
            continue
        if not path.is_dir():
            out.append((str(path), path))
            continue
        found = sorted(p for p in path.rglob("*") if p.suffix.lower() in suffixes and p.is_file())
        if not found:
            raise DataError(f"{path} is a folder with no images or videos in it ({', '.join(suffixes)})")
        out.extend((str(p), p) for p in found)
    return out


def karpathy_images(dataset_json: str | Path, image_dir: str | Path) -> dict[str, Path]:
    """Ids and files of a Karpathy-split ``dataset_*.json``: ``image_dir/[filepath/]filename``.

    The id of a record is its first key among ``cocoid``, ``id``, ``imgid``, as a string.
    Files are not checked here; a missing one fails (or is skipped) during extraction.
    """
    dataset_json, image_dir = Path(dataset_json), Path(image_dir)
    try:
        records = json.loads(dataset_json.read_text(encoding="utf-8"))["images"]
    except FileNotFoundError as exc:
        raise DataError(f"dataset file not found: {dataset_json}") from exc
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"{dataset_json} is not a Karpathy dataset JSON with an 'images' list: {exc}") from exc
    images: dict[str, Path] = {}
    for i, record in enumerate(records):
        key = next((k for k in KARPATHY_ID_KEYS if k in record), None)
        if key is None or "filename" not in record:
            raise DataError(f"{dataset_json}: image record {i} needs 'filename' and one of {KARPATHY_ID_KEYS}")
        id = str(record[key])
        if id in images:
            raise DataError(f"{dataset_json}: image id '{id}' appears twice")
        images[id] = image_dir / record.get("filepath", "") / record["filename"]
    return images
