"""Any feature store rlcap reads, converted into its chunked HDF5 layout (``rlcap features convert IN OUT.h5``).

Why convert: a TSV store decodes base64 text on every read and a folder store opens a file per image,
while the HDF5 layout reads each row of a random batch as one raw chunk and can keep float16 (half the
disk and memory; rows rounded once, here). Rows are copied as the source store gives them: a TSV
image's ``fc`` is the mean of its regions (:class:`~rlcap.data.features.tsv.TsvFeatureStore`), and
its boxes are kept in the optional ``boxes`` dataset.

Resumable like ``rlcap features``: rows are written in batches, each committed by its ids
(:class:`~rlcap.data.features.hdf5_writer.HDF5FeatureWriter`), and ids already in ``out`` are
skipped, so a killed conversion continues when run again. The output records the resolved source
path and its layout (``source``, ``source_layout``), and the attributes of an HDF5 source (``encoder``,
``image_size``, ...); a run whose source differs from what ``out`` records is refused, so that rows of
two sources never mix in one file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rlcap.data.features import (HDF5_SUFFIXES, HDF5FeatureStore, HDF5FeatureWriter, NpzFolderStore,
                                 SelfCriticalFolderStore, TsvFeatureStore, open_feature_store)
from rlcap.data.features.hdf5_writer import open_h5, plain_attr
from rlcap.data.features.store import FeatureStore
from rlcap.errors import ConfigError, DataError
from rlcap.locks import hold, store_lock

log = logging.getLogger(__name__)

# the ``source_layout`` recorded for each kind of store
LAYOUTS: dict[type[FeatureStore], str] = {
    TsvFeatureStore: "bottom-up-attention tsv", HDF5FeatureStore: "rlcap hdf5",
    SelfCriticalFolderStore: "self-critical folders", NpzFolderStore: "npz folder",
}
SOURCE_KEYS = ("source", "source_layout")
_FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504: larger values would be stored as inf


class ConvertStats(NamedTuple):
    converted: int  # rows written by this call
    already_present: int  # rows of the source that ``out`` held already (skipped)
    seconds: float


def convert_store(src: str | Path, out: str | Path, dtype: str = "float16", batch: int = 256,
                  progress: Callable[[int], None] | None = None) -> ConvertStats:
    """Copy every image of the store at ``src`` (any layout :func:`open_feature_store` reads) into the HDF5
    file ``out``, ``batch`` rows a write, as ``dtype`` (float16 or float32: float32 keeps the rows bit for
    bit, float16 rounds them once). ``out`` is resumed when it exists (see the module docstring).
    ``progress(n)`` is called with the number of images handled since the last call (e.g. ``tqdm.update``).
    """
    if batch < 1:
        raise ConfigError(f"batch must be at least 1, got {batch}")
    out = Path(out)
    if out.suffix.lower() not in HDF5_SUFFIXES:
        raise ConfigError(f"the converted store {out} must be an .h5 or .hdf5 file")
    started = time.perf_counter()
    with open_feature_store(src) as store:
        if out.resolve() == store.path.resolve():
            raise DataError(f"{out} is the store being converted: give another output file")
        ids = store.ids()
        recorded = {**_plain_attrs(store.attrs), "source": str(store.path.resolve()),
                    "source_layout": LAYOUTS[type(store)]}
        if out.exists():  # before the writer, whose own checks (shapes, boxes) say less
            _check_source(out, _recorded(out), recorded)
        max_regions = _max_regions(store, ids)
        with HDF5FeatureWriter(out, store.fc_dim, store.att_dim, max_regions, dtype=dtype, attrs=recorded,
                               boxes=store.has_boxes) as writer:
            todo = [id for id in ids if id not in writer]
            if progress and len(ids) > len(todo):
                progress(len(ids) - len(todo))
            log.info("%d images to convert from %s, %d already in %s", len(todo), store.path,
                     len(ids) - len(todo), out)
            for start in range(0, len(todo), batch):
                _copy_rows(store, writer, todo[start:start + batch])
                if progress:
                    progress(len(todo[start:start + batch]))
    stats = ConvertStats(len(todo), len(ids) - len(todo), time.perf_counter() - started)
    log.info("converted %d images into %s in %.1fs", stats.converted, out, stats.seconds)
    return stats


def _copy_rows(store: FeatureStore, writer: HDF5FeatureWriter, ids: Sequence[str]) -> None:
    """One batch: read (checked as every read is: finite values, region counts), then written."""
    loaded = store.load_all(ids)
    if writer.dtype == np.float16:
        _check_float16(writer.path, ids, loaded.fc, loaded.att)
    boxes = None
    if writer.has_boxes:
        boxes = np.zeros((len(ids), loaded.att.shape[1], 4), dtype=np.float32)  # (b, N, 4), zero past each count
        for k, regions in enumerate(store.boxes(ids)):
            boxes[k, : len(regions)] = regions
    writer.write(ids, loaded.fc, loaded.att, loaded.att_count, boxes=boxes)


def _plain_attrs(attrs: dict[str, object]) -> dict[str, str | int | float]:
    """The source's scalar attributes (how its features were made), carried into the converted file; its own
    ``source`` (a store converted before) is replaced by this conversion's."""
    return {key: value for key, value in attrs.items()
            if isinstance(value, (str, int, float)) and key not in SOURCE_KEYS}


def _max_regions(store: FeatureStore, ids: Sequence[str]) -> int:
    """The largest region count of the source: from the store when it knows it without decoding (TSV's
    index, HDF5), else by reading every image once (folder stores)."""
    known = store.max_regions
    if known is not None:
        return known
    log.info("reading the %d images of %s once for their region counts", len(ids), store.path)
    return max(store.get(id)[1].shape[0] for id in ids)


def _recorded(out: Path) -> dict[str, object]:
    """The attributes of the existing file ``out``, read while holding its lock (no writer is changing it)."""
    with hold(store_lock(out), f"feature store {out}"), open_h5(out, "r") as f:
        return {key: plain_attr(value) for key, value in f.attrs.items()}


def _check_source(out: Path, recorded: dict[str, object], expected: dict[str, object]) -> None:
    """Refuse to add rows to ``out`` when it holds rows of another source (or of no conversion at all), or of
    the same source made otherwise (an HDF5 source extracted again with another image size)."""
    again = f"rows of two sources do not mix in one file: convert into another file, or delete {out} to start over"
    if "source" not in recorded:
        raise DataError(f"{out} holds features that were not converted from a store (no 'source' attribute): "
                        f"{again}")
    was, now = (f"{record['source']} ({record.get('source_layout')})" for record in (recorded, expected))
    if was != now:
        raise DataError(f"{out} holds features converted from {was}, not from {now}: {again}")
    for key, value in expected.items():
        if recorded.get(key) != value:
            raise DataError(f"{out} holds features converted from {was} when it recorded {key}="
                            f"{recorded.get(key)!r}, and it records {key}={value!r} now (extracted again?): {again}")


def _check_float16(out: Path, ids: Sequence[str], fc: np.ndarray, att: np.ndarray) -> None:
    """:class:`DataError` naming the first image with a value beyond float16's range, which would be stored as
    an infinity (and refused when read)."""
    big = np.abs(fc).max(axis=1, initial=0) > _FLOAT16_MAX
    big |= np.abs(att).max(axis=(1, 2), initial=0) > _FLOAT16_MAX
    if big.any():
        raise DataError(f"{out}: image {ids[int(np.argmax(big))]!r} has values beyond float16's range "
                        f"({_FLOAT16_MAX:g}): convert with dtype float32")
