"""Features of a whole dataset in one HDF5 file.

Layout (every dataset resizable along axis 0, one row per image):

* ``ids`` (n,) variable-length UTF-8 strings;
* ``fc`` (n, D) pooled vectors;
* ``att`` (n, Nmax, D) region or grid vectors, zero past ``att_count``;
* ``att_count`` (n,) int32, the number of real regions of each row;
* ``boxes`` (n, Nmax, 4) float32, optional: each region's box (x1, y1, x2, y2, pixels), zero past
  ``att_count``, kept when the rows were converted from a store that has them (bottom-up-attention TSVs);
* ``file_size``, ``file_mtime_ns`` (n,) int64 and ``file_digest`` (n,) UTF-8: the fingerprint of the
  image file each row was encoded from (:mod:`rlcap.data.features.fingerprint`; -1, -1, "" when
  unknown, e.g. in files written before rlcap recorded it), so that re-running ``rlcap features``
  re-encodes exactly the images that changed;
* ``skipped`` and ``skipped_reason`` (k,) UTF-8, optional: the ids ``rlcap features --skip-bad`` left out as
  unreadable, and why (an id leaves them when its row is written), so that a run can leave those images out
  and say so rather than find an id missing;
* file attributes describing the extraction (``encoder``, ``image_size``, ``grid``, ...).

``fc`` and ``att`` are float16 by default: half the disk and memory of float32, and
EfficientNet's ReLU6 outputs lie in [0, 6], where float16 keeps about three significant digits.

Rows are committed by ``ids``: the writer extends and writes the feature datasets and flushes
them first, then extends ``ids`` and flushes again, so a run killed (or a disk filled) mid-batch
leaves extra rows that the next writer truncates and every reader ignores (readers use
``len(ids)`` rows), never an id whose features are not on disk. HDF5 cannot survive a full disk
(after a failed write it may crash the process), so the writer checks the free space before each
batch and stops with one line (:class:`rlcap.files.WriteError`) while the file is still whole.
One writer at a time: it holds the store's lock (:mod:`rlcap.locks`, ``NAME.lock`` beside it). A row re-encoded in place has its
fingerprint cleared first and set last, so a run killed in between leaves it marked unknown
(re-encoded next time), never a new fingerprint over old features or the reverse.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from rlcap.data.features.hdf5_writer import DTYPES, HDF5FeatureWriter, open_h5, plain_attr, read_ids, read_skipped
from rlcap.data.features.store import FeatureStore, LoadedFeatures, check_counts, check_finite
from rlcap.errors import DataError

__all__ = ["DTYPES", "HDF5FeatureStore", "HDF5FeatureWriter"]  # the writer lives in hdf5_writer

_RUN_GAP = 16  # rows: read across gaps this small instead of issuing another read
_RUN_MAX = 256  # rows per read, bounding the temporary buffer


class HDF5FeatureStore(FeatureStore):
    """Read side of the HDF5 layout; the file is reopened in a forked process (DataLoader workers)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: h5py.File | None = None
        self._pid = -1
        file = self._handle()
        self._ids = read_ids(file, self.path)
        self._rows = {id: row for row, id in enumerate(self._ids)}
        if len(self._rows) != len(self._ids):
            raise DataError(f"feature file {self.path} has duplicate ids")
        self._fc_dim = int(file["fc"].shape[1])
        self._att_dim = int(file["att"].shape[2])
        self._attrs = {key: plain_attr(file.attrs[key]) for key in file.attrs}
        self._skipped = read_skipped(file)
        self._counts: tuple[int, np.ndarray] | None = None  # (file's mtime, every row's region count)

    def _handle(self) -> h5py.File:
        if self._file is None or self._pid != os.getpid():
            self._file = open_h5(self.path, "r")
            self._pid = os.getpid()
        return self._file

    def close(self) -> None:
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        self._file = None

    def __contains__(self, id: object) -> bool:
        return id in self._rows


    @property
    def attrs(self) -> dict[str, object]:
        return dict(self._attrs)

    @property
    def skipped(self) -> dict[str, str]:
        return dict(self._skipped)

    @property
    def itemsize(self) -> int:
        return int(self._handle()["fc"].dtype.itemsize)

    @property
    def max_regions(self) -> int:
        return int(self._handle()["att"].shape[1])

    def _row(self, id: str) -> int:
        row = self._rows.get(id)
        if row is None:
            raise self.missing(id)
        return row

    def get(self, id: str) -> tuple[np.ndarray, np.ndarray]:
        row = self._row(id)
        file = self._handle()
        count = int(file["att_count"][row])
        check_counts(self.path, [id], np.array([count]), self.max_regions)
        fc, att = file["fc"][row], file["att"][row, :count]
        check_finite(self.path, [id], fc[None], att[None])
        return fc, att

    @property
    def has_boxes(self) -> bool:
        return "boxes" in self._handle()

    def boxes(self, ids: Sequence[str]) -> list[np.ndarray]:
        """Each image's region boxes (count, 4) float32, x1 y1 x2 y2 in pixels, as converted from a
        bottom-up-attention TSV; :class:`DataError` naming the file when it keeps none."""
        file = self._handle()
        if "boxes" not in file:
            return super().boxes(ids)
        rows = np.array([self._row(id) for id in ids], dtype=np.int64)
        unique, where = np.unique(rows, return_inverse=True)  # h5py reads increasing rows
        boxes = file["boxes"][unique] if len(unique) else np.zeros((0, self.max_regions, 4), np.float32)
        counts = self._all_counts()[rows]
        return [boxes[k, :c].astype(np.float32) for k, c in zip(where.reshape(-1), counts.tolist())]

    def region_counts(self, ids: Sequence[str]) -> np.ndarray:
        rows = np.array([self._row(id) for id in ids], dtype=np.int64)
        return self._all_counts()[rows]

    def _all_counts(self) -> np.ndarray:
        """Every row's region count, read once and again only when the file has changed since."""
        stamp = os.stat(self.path).st_mtime_ns
        if self._counts is None or self._counts[0] != stamp:
            self._counts = (stamp, self._handle()["att_count"][: len(self._ids)].astype(np.int64))
        return self._counts[1]

    def load_all(self, ids: Sequence[str]) -> LoadedFeatures:
        """Bulk read. A store laid out as rlcap writes it (no filters; att chunked one row each) is read
        one raw chunk a row (``read_direct_chunk``: no selection machinery, measured 10x faster than
        h5py's slicing for 50 random COCO-size rows); any other layout by sorted, merged slices. Rows
        come back in ``ids`` order."""
        rows = np.array([self._row(id) for id in ids], dtype=np.int64)
        file = self._handle()
        fc_ds, att_ds = file["fc"], file["att"]
        counts = self._all_counts()[rows]
        check_counts(self.path, ids, counts, int(att_ds.shape[1]))
        n_max = int(counts.max()) if len(rows) else 0
        fc = np.empty((len(rows), self._fc_dim), dtype=fc_ds.dtype)
        att = np.empty((len(rows), n_max, self._att_dim), dtype=att_ds.dtype)
        if _raw_chunks(fc_ds) and _raw_chunks(att_ds) and att_ds.chunks[0] == 1:
            _read_raw(fc_ds, rows, fc)
            _read_raw(att_ds, rows, att)
        else:
            order = np.argsort(rows, kind="stable")
            for start, stop, members in _runs(rows, order):
                fc[members] = fc_ds[start:stop][rows[members] - start]
                att[members] = att_ds[start:stop, :n_max][rows[members] - start]
        check_finite(self.path, ids, fc, att)
        return LoadedFeatures(fc, att, counts)


def _raw_chunks(ds: h5py.Dataset) -> bool:
    """Whether ``ds``'s chunks hold its rows as they are: chunked by rows (whole rows a chunk), no filter."""
    return (ds.chunks is not None and tuple(ds.chunks[1:]) == tuple(ds.shape[1:])
            and ds.id.get_create_plist().get_nfilters() == 0)


def _read_raw(ds: h5py.Dataset, rows: np.ndarray, out: np.ndarray) -> None:
    """``out[k] = ds[rows[k]]`` (its first ``out.shape[1]`` entries along axis 1), one raw chunk read a row.
    A chunk at the end of the dataset is stored whole, so every chunk reshapes to ``ds.chunks``."""
    chunks, dtype, dsid = ds.chunks, ds.dtype, ds.id
    per, width, origin = chunks[0], out.shape[1] if out.ndim > 1 else None, (0,) * (ds.ndim - 1)
    for k, row in enumerate(rows.tolist()):
        start = row - row % per
        _, raw = dsid.read_direct_chunk((start, *origin))
        block = np.frombuffer(raw, dtype=dtype).reshape(chunks)[row - start]
        out[k] = block[:width] if out.ndim > 2 else block


def _runs(rows: np.ndarray, order: np.ndarray):
    """Yield (start, stop, positions) slices covering ``rows`` visited in sorted ``order``."""
    sorted_rows = rows[order]
    i = 0
    while i < len(order):
        j = i + 1
        start = sorted_rows[i]
        while (j < len(order) and sorted_rows[j] - sorted_rows[j - 1] <= _RUN_GAP
               and sorted_rows[j] - start < _RUN_MAX):
            j += 1
        yield int(start), int(sorted_rows[j - 1]) + 1, order[i:j]
        i = j
