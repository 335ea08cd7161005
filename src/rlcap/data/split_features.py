"""A split's features, read all at start (in memory) or batch by batch from the store (out of core).

``data.in_memory: auto`` keeps a split in memory when its features take at most
:data:`IN_MEMORY_LIMIT` bytes (estimated from the store: images x (fc + max regions x att) x item
size), and otherwise reads each batch's rows when it is asked for, so that memory does not grow
with the dataset: COCO with 36 bottom-up regions a image is about 18 GB in float16. An out-of-core
split pads every batch to the split's largest region count (read from an HDF5 store's region
counts), so its features are the same tensors an in-memory split gives; a folder store, whose counts
are not known without reading every file, pads each batch to its own largest. Each read checks its
rows as loading all would (non-finite values, region counts), so a damaged row is reported when its
batch is read.

A store file read out of core must not change under the run: HDF5 reads rows past the end of a
truncated file as zeros, which pass every check. Its size, modification time and inode are recorded
at open and compared before each read; a change, or a read error, stops the run with one line
naming the file (:class:`StoreChanged`). A split can also be checked whole at start
(:meth:`SplitFeatures.check_all`), as the run does for its validation split.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from rlcap.data.feats import Feats
from rlcap.data.features import open_feature_store, skipped_images
from rlcap.data.features.store import FeatureStore, LoadedFeatures
from rlcap.data.records import ImageRecord
from rlcap.errors import ConfigError, DataError

log = logging.getLogger(__name__)

IN_MEMORY_LIMIT = 2 * 1024 ** 3  # bytes of features above which in_memory: auto reads batch by batch
CHECK_ROWS = 256  # rows a read when a split is checked whole out of core


class StoreChanged(DataError):
    """The feature store a run reads out of core was changed, or could not be read, under it."""


def _stamp(path: Path) -> os.stat_result | None:
    """What says a store file is the one opened (a folder store: None, its files are read one by one)."""
    return os.stat(path) if path.is_file() else None


def check_in_memory(value: bool | str) -> None:
    if value not in (True, False, "auto") or (value in (0, 1) and not isinstance(value, bool)):
        raise ConfigError(f"data.in_memory: {value!r} is not one of true, false, auto")


def _as_feats(loaded: LoadedFeatures, n_max: int | None) -> Feats:
    att = loaded.att
    if n_max is not None and att.shape[1] < n_max:  # the split's width, as an in-memory split has it
        att = np.concatenate([att, np.zeros((att.shape[0], n_max - att.shape[1], att.shape[2]), att.dtype)], axis=1)
    fc = torch.from_numpy(np.ascontiguousarray(loaded.fc))
    att_t = torch.from_numpy(np.ascontiguousarray(att))
    counts = torch.from_numpy(np.asarray(loaded.att_count, dtype=np.int64))
    mask = torch.arange(att_t.shape[1])[None, :] < counts[:, None]  # cpu: the split's data
    return Feats(fc, att_t, mask)


def without_skipped(grouped: dict[str, list[ImageRecord]], store_path: str) -> dict[str, list[ImageRecord]]:
    """``grouped`` (split -> its images) without the images that ``rlcap features --skip-bad`` left out of the
    store as unreadable (the store records them), with one warning saying how many: a run trains and validates
    on the rest rather than stopping at the first id its store lacks."""
    skipped = skipped_images(store_path)
    dropped = [r.id for records in grouped.values() for r in records if r.id in skipped]
    if not dropped:
        return grouped
    total = sum(len(records) for records in grouped.values())
    log.warning("%d of the %d images (e.g. %r: %s) are not in %s: rlcap features --skip-bad left them out as "
                "unreadable, so this run leaves them out too; fix their pictures and run the same rlcap features "
                "command to add them", len(dropped), total, dropped[0], skipped[dropped[0]], store_path)
    return {split: [r for r in records if r.id not in skipped] for split, records in grouped.items()}


def estimated_bytes(store: FeatureStore, ids: Sequence[str]) -> int:
    """What ``ids``' features would take in memory, padded to the store's largest region count."""
    if not ids:
        return 0
    # a folder store does not know its largest region count: the first image's, as a guess
    regions = store.max_regions or store.get(ids[0])[1].shape[0]
    return len(ids) * (store.fc_dim + regions * store.att_dim) * store.itemsize


class SplitFeatures:
    """The features of a split's images (``ids``), by row: ``rows(index) -> Feats`` (float32)."""

    def __init__(self, store_path: str, ids: Sequence[str], in_memory: bool | str = "auto"):
        check_in_memory(in_memory)
        self.ids = list(ids)
        self._store = open_feature_store(store_path)
        store = self._store
        self.image_size: int | None = int(store.attrs["image_size"]) if "image_size" in store.attrs else None
        # which encoder made the features, and from where (an hf: model's folder), when the store records it; what
        # a vision-language model's fc holds beside the mean token (the picture's size: encoders/hf_vlm.py)
        self.encoder = {key: str(store.attrs[key]) for key in ("encoder", "encoder_path", "tower_weights",
                                                               "fc_layout", "preprocessing") if key in store.attrs}
        self.fc_dim, self.att_dim = store.fc_dim, store.att_dim
        self.in_memory = in_memory is True or (in_memory == "auto"
                                               and estimated_bytes(store, self.ids) <= IN_MEMORY_LIMIT)
        self._lock = threading.Lock()  # one reader at a time (the prefetching thread and the loop's)
        if self.in_memory:
            self._all = _as_feats(store.load_all(self.ids), None)
            store.close()
            self._n_max = int(self._all.att.shape[1])
        else:
            self._all = None
            self._opened = _stamp(store.path)
            counts = store.region_counts(self.ids)
            self._n_max = int(counts.max()) if counts is not None and len(counts) else None

    def rows(self, index: torch.Tensor) -> Feats:
        """Features of rows ``index`` (B,) in float32."""
        return self.as_float(self.read(index))

    def read(self, index: torch.Tensor) -> torch.Tensor | LoadedFeatures:
        """Rows ``index`` as stored: read from the store when out of core (what a read-ahead thread does),
        else the index itself; :meth:`as_float` makes them the float32 features."""
        if self._all is not None:
            return index
        with self._lock:
            return self._load([self.ids[i] for i in index.tolist()])

    def _load(self, ids: list[str]) -> LoadedFeatures:
        """``ids``' rows from the store, once it is known to be the file opened (out of core)."""
        path = self._store.path
        now = _stamp(path) if path.exists() else None
        was = self._opened
        if was is not None and (now is None or (now.st_size, now.st_mtime_ns, now.st_ino)
                                != (was.st_size, was.st_mtime_ns, was.st_ino)):
            what = ("it is gone" if now is None else "it is another file now" if now.st_ino != was.st_ino else
                    f"{was.st_size} -> {now.st_size} bytes" if now.st_size != was.st_size else "rewritten in place")
            raise StoreChanged(f"{path} changed while this run was reading it ({what}): rows read now could be "
                               "zeros or another extraction's, so the run stops here, its last checkpoint kept; put "
                               "the file back as it was (extract new features into another file), then run the same "
                               "command again to continue")
        try:
            return self._store.load_all(ids)
        except OSError as exc:  # h5py's read errors
            raise StoreChanged(f"{path}: cannot read the features of images {ids[0]!r}... ({exc}); the run stops "
                               "here, its last checkpoint kept: check the file, then run the same command again") \
                from None

    def check_all(self, limit: int = 0) -> None:
        """Read the first ``limit`` rows (0: every row) once to check them (non-finite values, region counts):
        done at load for a split in memory, and here, a block at a time, for one out of core (the rows a
        run validates on, at its start)."""
        n = len(self.ids) if limit <= 0 else min(limit, len(self.ids))
        if self._all is None:
            for start in range(0, n, CHECK_ROWS):
                with self._lock:
                    self._load(self.ids[start:min(start + CHECK_ROWS, n)])

    def as_float(self, read: torch.Tensor | LoadedFeatures) -> Feats:
        """The float32 features of :meth:`read`'s rows. The cast is torch's, on the thread that trains: the
        read-ahead thread only reads, since on a machine whose cores the training loop's threads fill, work
        there slows every step more than it costs (measured in docs/BENCHMARKS.md, "Scale")."""
        if self._all is not None:
            return Feats(self._all.fc[read].float(), self._all.att[read].float(), self._all.att_mask[read])
        feats = _as_feats(read, self._n_max)
        return Feats(feats.fc.float(), feats.att.float(), feats.att_mask)

    def everything(self) -> Feats:
        """Every row at once (in their stored precision), read now when the split is out of core."""
        if self._all is None:
            with self._lock:
                return _as_feats(self._load(self.ids), self._n_max)
        return self._all
