"""Features of a whole dataset in one HDF5 file.

Layout (every dataset resizable along axis 0, one row per image):

* ``ids`` (n,) variable-length UTF-8 strings;
* ``fc`` (n, D) pooled vectors;
* ``att`` (n, Nmax, D) region or grid vectors, zero past ``att_count``;
* ``att_count`` (n,) int32, the number of real regions of each row;
* ``file_size``, ``file_mtime_ns`` (n,) int64 and ``file_digest`` (n,) UTF-8: the fingerprint of the
  image file each row was encoded from (:mod:`rlcap.data.features.fingerprint`; -1, -1, "" when
  unknown, e.g. in files written before rlcap recorded it), so that re-running ``rlcap features``
  re-encodes exactly the images that changed;
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
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

import h5py
import numpy as np

from rlcap.data.features.fingerprint import UNKNOWN, ImageFingerprint
from rlcap.data.features.store import FeatureStore, LoadedFeatures, check_counts, check_finite
from rlcap.errors import ConfigError, DataError
from rlcap.files import WriteError, write_error
from rlcap.locks import hold, store_lock

DTYPES = {"float16": np.float16, "float32": np.float32}
_RUN_GAP = 16  # rows: read across gaps this small instead of issuing another read
_RUN_MAX = 256  # rows per read, bounding the temporary buffer
_FINGERPRINT = ("file_size", "file_mtime_ns", "file_digest")
_RESERVE = 256 * 1024  # bytes kept free beyond a batch's rows: new chunks of the 1-d datasets, HDF5's metadata


def _open(path: Path, mode: str) -> h5py.File:
    try:
        return h5py.File(path, mode)
    except OSError as exc:
        raise DataError(f"cannot open feature file {path}: {exc}") from exc


def _attr(value: object) -> object:
    """HDF5 attribute as a plain Python value (h5py returns numpy scalars)."""
    return value.item() if isinstance(value, np.generic) else value


def _read_ids(file: h5py.File, path: Path) -> list[str]:
    missing = [name for name in ("ids", "fc", "att", "att_count") if name not in file]
    if missing:
        raise DataError(f"feature file {path} lacks datasets {missing} (expected ids, fc, att, att_count)")
    return list(file["ids"].asstr()[()])


class HDF5FeatureStore(FeatureStore):
    """Read side of the HDF5 layout; the file is reopened in a forked process (DataLoader workers)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file: h5py.File | None = None
        self._pid = -1
        file = self._handle()
        self._ids = _read_ids(file, self.path)
        self._rows = {id: row for row, id in enumerate(self._ids)}
        if len(self._rows) != len(self._ids):
            raise DataError(f"feature file {self.path} has duplicate ids")
        self._fc_dim = int(file["fc"].shape[1])
        self._att_dim = int(file["att"].shape[2])
        self._attrs = {key: _attr(file.attrs[key]) for key in file.attrs}
        self._counts: tuple[int, np.ndarray] | None = None  # (file's mtime, every row's region count)

    def _handle(self) -> h5py.File:
        if self._file is None or self._pid != os.getpid():
            self._file = _open(self.path, "r")
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


class HDF5FeatureWriter:
    """Appends features in batches to a new or existing HDF5 file (see the module docstring).

    An existing file is resumed: its shapes and dtype must match, and every attribute given in
    ``attrs`` must equal the stored one (features of different extractions never mix); ``noted`` are
    recorded in a new file but not compared (the caller reads them back, :attr:`recorded`). Rows of
    ids already in the file are rewritten only when :meth:`write` is asked to (``replace``).
    """

    def __init__(self, path: str | Path, fc_dim: int, att_dim: int, max_regions: int,
                 dtype: str = "float16", attrs: Mapping[str, str | int | float] | None = None,
                 noted: Mapping[str, str | int | float] | None = None):
        if dtype not in DTYPES:
            raise ConfigError(f"feature dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        self.path = Path(path)
        self.dtype = np.dtype(DTYPES[dtype])
        self.max_regions = max_regions
        # bytes of one row: fc, att (padded to max_regions), att_count, fingerprint and id (about)
        self._row_bytes = (fc_dim + max_regions * att_dim) * self.dtype.itemsize + 4 + 16 + 2 * 64
        self._fc_chunk = 64 * fc_dim * self.dtype.itemsize
        attrs = dict(attrs or {})
        self._lock = ExitStack()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(self.path, exc) from None
        self._lock.enter_context(hold(store_lock(self.path), f"feature store {self.path}"))
        try:
            self._check_space(0)
            if self.path.exists():
                self._file = _open(self.path, "r+")
                self._resume(fc_dim, att_dim, attrs)
            else:
                self._file = _open(self.path, "w")
                self._create(fc_dim, att_dim, {**(noted or {}), **attrs})
        except BaseException:
            if hasattr(self, "_file"):
                self._file.close()
            self._lock.close()
            raise
        self._rows = {id: row for row, id in enumerate(self._file["ids"].asstr()[()])}
        f = self._file
        n = len(self._rows)
        self._fingerprints = [ImageFingerprint(int(s), int(m), d) for s, m, d in zip(
            f["file_size"][:n], f["file_mtime_ns"][:n], f["file_digest"].asstr()[:n])]

    def _create(self, fc_dim: int, att_dim: int, attrs: dict) -> None:
        f = self._file
        f.create_dataset("ids", (0,), maxshape=(None,), dtype=h5py.string_dtype("utf-8"), chunks=(1024,))
        f.create_dataset("fc", (0, fc_dim), maxshape=(None, fc_dim), dtype=self.dtype, chunks=(64, fc_dim))
        f.create_dataset("att", (0, self.max_regions, att_dim), maxshape=(None, self.max_regions, att_dim),
                         dtype=self.dtype, chunks=(1, self.max_regions, att_dim))
        f.create_dataset("att_count", (0,), maxshape=(None,), dtype=np.int32, chunks=(1024,))
        _create_fingerprints(f, 0)
        f.attrs.update(attrs)
        f.flush()

    def _resume(self, fc_dim: int, att_dim: int, attrs: dict) -> None:
        f = self._file
        n = len(_read_ids(f, self.path))
        # how the features were made first: a different image_size also changes the grid's shape
        for key, value in attrs.items():
            if key in f.attrs and _attr(f.attrs[key]) != value:
                raise DataError(f"{self.path} holds features made with {key}={_attr(f.attrs[key])!r}, not {value!r}: "
                                "give the same setting to continue it, or write them to another file (or delete "
                                "this one to start over)")
        expected = {"fc": (fc_dim,), "att": (self.max_regions, att_dim)}
        for name, shape in expected.items():
            if f[name].shape[1:] != shape or f[name].dtype != self.dtype:
                raise DataError(f"{self.path}: existing '{name}' is {f[name].shape[1:]} {f[name].dtype}, "
                                f"cannot append {shape} {self.dtype}")
        for name in ("fc", "att", "att_count"):  # drop rows of a batch whose ids never landed
            if f[name].shape[0] > n:
                f[name].resize(n, axis=0)
        if _FINGERPRINT[0] not in f:  # written before fingerprints were recorded: all unknown
            _create_fingerprints(f, n)
        for name in _FINGERPRINT:
            f[name].resize(n, axis=0)

    def __contains__(self, id: object) -> bool:
        return id in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def recorded(self) -> dict[str, object]:
        """The file's attributes: how its rows were made (the first writer's ``attrs`` and ``noted``)."""
        return {key: _attr(value) for key, value in self._file.attrs.items()}

    def fingerprint(self, id: str) -> ImageFingerprint:
        """The recorded fingerprint of the image ``id`` was encoded from (``UNKNOWN`` if none)."""
        return self._fingerprints[self._rows[id]]

    def set_fingerprints(self, ids: Sequence[str], fingerprints: Sequence[ImageFingerprint]) -> None:
        """Record new fingerprints for ids already in the file (an unchanged image that was touched)."""
        f = self._file
        for id, fp in zip(ids, fingerprints, strict=True):
            row = self._rows[id]
            f["file_size"][row], f["file_mtime_ns"][row], f["file_digest"][row] = fp
            self._fingerprints[row] = fp
        f.flush()

    def write(self, ids: Sequence[str], fc: np.ndarray, att: np.ndarray, att_count: np.ndarray | None = None,
              fingerprints: Sequence[ImageFingerprint] | None = None, replace: bool = False) -> None:
        """Write a batch: fc (b, D), att (b, N, D) with N <= max_regions, att_count (b,) or all N, and the
        fingerprints of the image files (unknown when None). New ids are appended; ids already in
        the file are an error unless ``replace``, which rewrites their rows in place."""
        b = len(ids)
        if fc.shape[0] != b or att.shape[0] != b or att.shape[1] > self.max_regions:
            raise ValueError(f"batch of {b} ids with fc {fc.shape}, att {att.shape} "
                             f"(max_regions {self.max_regions})")
        fps = list(fingerprints) if fingerprints is not None else [UNKNOWN] * b
        repeated = [id for id in ids if id in self._rows]
        if (repeated and not replace) or len(set(ids)) != b or len(fps) != b:
            twice = repeated or [i for i in dict.fromkeys(ids) if ids.count(i) > 1]
            raise DataError(f"{self.path}: {len(twice)} ids written twice, e.g. {twice[:5]}")
        counts = np.full(b, att.shape[1]) if att_count is None else np.asarray(att_count)
        if (counts < att.shape[1]).any():  # readers rely on zeros past each count
            att = np.where(np.arange(att.shape[1])[None, :, None] < counts[:, None, None], att, 0)
        fc, att = fc.astype(self.dtype, copy=False), att.astype(self.dtype, copy=False)
        old = [i for i, id in enumerate(ids) if id in self._rows]
        new = [i for i, id in enumerate(ids) if id not in self._rows]
        self._check_space(b)
        try:
            if old:
                self._rewrite([ids[i] for i in old], fc[old], att[old], counts[old], [fps[i] for i in old])
            if new:
                self._append([ids[i] for i in new], fc[new], att[new], counts[new], [fps[i] for i in new])
        except OSError as exc:  # (HDF5's own errors carry the errno of the failed write)
            raise write_error(self.path, exc) from None

    def _append(self, ids: list[str], fc: np.ndarray, att: np.ndarray, counts: np.ndarray,
                fps: list[ImageFingerprint]) -> None:
        f = self._file
        n, b = f["ids"].shape[0], len(ids)
        for name in ("fc", "att", "att_count", *_FINGERPRINT):
            f[name].resize(n + b, axis=0)
        f["fc"][n:] = fc
        f["att"][n:, : att.shape[1]] = att
        f["att_count"][n:] = counts
        for name, values in zip(_FINGERPRINT, zip(*fps)):
            f[name][n:] = list(values)
        f.flush()  # the rows on disk before the ids that commit them
        f["ids"].resize(n + b, axis=0)  # ids last: they commit the rows
        f["ids"][n:] = list(ids)
        f.flush()
        self._rows.update((id, n + k) for k, id in enumerate(ids))
        self._fingerprints.extend(fps)

    def _rewrite(self, ids: list[str], fc: np.ndarray, att: np.ndarray, counts: np.ndarray,
                 fps: list[ImageFingerprint]) -> None:
        """Rows of existing ids in place: fingerprints cleared, features written, fingerprints set."""
        self.set_fingerprints(ids, [UNKNOWN] * len(ids))
        f = self._file
        for k, id in enumerate(ids):
            row = self._rows[id]
            f["fc"][row] = fc[k]
            padded = np.zeros((self.max_regions, att.shape[2]), dtype=self.dtype)
            padded[: att.shape[1]] = att[k]
            f["att"][row] = padded
            f["att_count"][row] = counts[k]
        f.flush()
        self.set_fingerprints(ids, fps)

    def _check_space(self, rows: int) -> None:
        """Refuse (one line) a batch of ``rows`` rows that the disk may not hold: HDF5 does not
        survive a write that fails for lack of space, so the writer stops before one."""
        try:
            stat = os.statvfs(self.path.parent)
        except OSError:  # no statistics (some network file systems): write and see
            return
        free = stat.f_bavail * stat.f_frsize
        needed = rows * self._row_bytes + (self._fc_chunk if rows else 0) + _RESERVE
        if free < needed:
            raise WriteError(f"cannot write {self.path}: no space left on device ({free / 2**20:.1f} MB free, "
                             f"{rows} more rows need about {needed / 2**20:.1f} MB)")

    def close(self) -> None:
        try:
            if self._file.id.valid:
                self._file.close()
        finally:
            self._lock.close()

    def __enter__(self) -> "HDF5FeatureWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _create_fingerprints(f: h5py.File, n: int) -> None:
    """The three fingerprint datasets with ``n`` unknown rows."""
    for name in _FINGERPRINT[:2]:
        f.create_dataset(name, (n,), maxshape=(None,), dtype=np.int64, chunks=(1024,), fillvalue=-1)
    f.create_dataset("file_digest", (n,), maxshape=(None,), dtype=h5py.string_dtype("utf-8"), chunks=(1024,))
    if n:
        f["file_digest"][:] = [""] * n
