"""Writing the HDF5 layout of :mod:`rlcap.data.features.hdf5` (read there, documented there): rows
appended in batches, committed by their ids, resumed by the next writer.

The helpers every reader of the layout shares (opening a file, its attributes, its ids) live here
too, so that the reader imports the writer's module and never the reverse.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

import h5py
import numpy as np

from rlcap.data.features.fingerprint import UNKNOWN, ImageFingerprint
from rlcap.errors import ConfigError, DataError
from rlcap.files import WriteError, write_error
from rlcap.locks import hold, store_lock

DTYPES = {"float16": np.float16, "float32": np.float32}
_FINGERPRINT = ("file_size", "file_mtime_ns", "file_digest")
_SKIPPED = ("skipped", "skipped_reason")  # ids left out as unreadable (--skip-bad), and why
_RESERVE = 256 * 1024  # bytes kept free beyond a batch's rows: new chunks of the 1-d datasets, HDF5's metadata
_BOX_CHUNK = 64  # rows a chunk of the optional ``boxes`` dataset (576 bytes a row for 36 regions)


def open_h5(path: Path, mode: str) -> h5py.File:
    try:
        return h5py.File(path, mode)
    except OSError as exc:
        raise DataError(f"cannot open feature file {path}: {exc}") from exc


def plain_attr(value: object) -> object:
    """HDF5 attribute as a plain Python value (h5py returns numpy scalars)."""
    return value.item() if isinstance(value, np.generic) else value


def read_ids(file: h5py.File, path: Path) -> list[str]:
    missing = [name for name in ("ids", "fc", "att", "att_count") if name not in file]
    if missing:
        raise DataError(f"feature file {path} lacks datasets {missing} (expected ids, fc, att, att_count)")
    return list(file["ids"].asstr()[()])


def read_skipped(file: h5py.File) -> dict[str, str]:
    """The ids ``rlcap features --skip-bad`` left out of the file as unreadable, and why (none: {})."""
    if _SKIPPED[0] not in file:
        return {}
    return dict(zip(file[_SKIPPED[0]].asstr()[()], file[_SKIPPED[1]].asstr()[()]))


class HDF5FeatureWriter:
    """Appends features in batches to a new or existing HDF5 file (see the module docstring).

    An existing file is resumed: its shapes and dtype must match, and every attribute given in
    ``attrs`` must equal the stored one (features of different extractions never mix); ``noted`` are
    recorded in a new file but not compared (the caller reads them back, :attr:`recorded`). Rows of
    ids already in the file are rewritten only when :meth:`write` is asked to (``replace``).

    ``boxes``: also keep each region's box (x1, y1, x2, y2) in an optional ``boxes`` dataset (n,
    max_regions, 4) float32, zero past ``att_count`` (bottom-up-attention TSVs carry them). A file that
    has the dataset takes rows only with their boxes, so that no row lacks them.
    """

    def __init__(self, path: str | Path, fc_dim: int, att_dim: int, max_regions: int,
                 dtype: str = "float16", attrs: Mapping[str, str | int | float] | None = None,
                 noted: Mapping[str, str | int | float] | None = None, boxes: bool = False):
        if dtype not in DTYPES:
            raise ConfigError(f"feature dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        self.path = Path(path)
        self.dtype = np.dtype(DTYPES[dtype])
        self.max_regions = max_regions
        # bytes of one row: fc, att (padded to max_regions), att_count, fingerprint and id (about)
        self._row_bytes = ((fc_dim + max_regions * att_dim) * self.dtype.itemsize + 4 + 16 + 2 * 64
                           + (max_regions * 4 * 4 if boxes else 0))
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
                self._file = open_h5(self.path, "r+")
                self._resume(fc_dim, att_dim, attrs, boxes)
            else:
                self._file = open_h5(self.path, "w")
                self._create(fc_dim, att_dim, {**(noted or {}), **attrs}, boxes)
        except BaseException:
            if hasattr(self, "_file"):
                self._file.close()
            self._lock.close()
            raise
        self._rows = {id: row for row, id in enumerate(self._file["ids"].asstr()[()])}
        f = self._file
        self.has_boxes = "boxes" in f  # whether rows are written with their boxes (the file decides)
        n = len(self._rows)
        self._fingerprints = [ImageFingerprint(int(s), int(m), d) for s, m, d in zip(
            f["file_size"][:n], f["file_mtime_ns"][:n], f["file_digest"].asstr()[:n])]
        self._skipped = read_skipped(f)

    def _create(self, fc_dim: int, att_dim: int, attrs: dict, boxes: bool) -> None:
        f = self._file
        f.create_dataset("ids", (0,), maxshape=(None,), dtype=h5py.string_dtype("utf-8"), chunks=(1024,))
        f.create_dataset("fc", (0, fc_dim), maxshape=(None, fc_dim), dtype=self.dtype, chunks=(64, fc_dim))
        f.create_dataset("att", (0, self.max_regions, att_dim), maxshape=(None, self.max_regions, att_dim),
                         dtype=self.dtype, chunks=(1, self.max_regions, att_dim))
        f.create_dataset("att_count", (0,), maxshape=(None,), dtype=np.int32, chunks=(1024,))
        _create_fingerprints(f, 0)
        if boxes:
            self._create_boxes()
        f.attrs.update(attrs)
        f.flush()

    def _create_boxes(self) -> None:
        self._file.create_dataset("boxes", (0, self.max_regions, 4), maxshape=(None, self.max_regions, 4),
                                  dtype=np.float32, chunks=(_BOX_CHUNK, self.max_regions, 4))

    def _resume(self, fc_dim: int, att_dim: int, attrs: dict, boxes: bool) -> None:
        f = self._file
        n = len(read_ids(f, self.path))
        # how the features were made first: a different image_size also changes the grid's shape
        for key, value in attrs.items():
            if key in f.attrs and plain_attr(f.attrs[key]) != value:
                raise DataError(f"{self.path} holds features made with {key}={plain_attr(f.attrs[key])!r}, "
                                f"not {value!r}: give the same setting to continue it, or write them to another "
                                "file (or delete this one to start over)")
        expected = {"fc": (fc_dim,), "att": (self.max_regions, att_dim)}
        for name, shape in expected.items():
            if f[name].shape[1:] != shape or f[name].dtype != self.dtype:
                raise DataError(f"{self.path}: existing '{name}' is {f[name].shape[1:]} {f[name].dtype}, "
                                f"cannot append {shape} {self.dtype}")
        if boxes and "boxes" not in f:
            if n:
                raise DataError(f"{self.path} holds {n} rows without region boxes: rows with boxes cannot be added; "
                                "write them to another file (or delete this one to start over)")
            self._create_boxes()
        for name in ("fc", "att", "att_count", "boxes"):  # drop rows of a batch whose ids never landed
            if name in f and f[name].shape[0] > n:
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
        return {key: plain_attr(value) for key, value in self._file.attrs.items()}

    def fingerprint(self, id: str) -> ImageFingerprint:
        """The recorded fingerprint of the image ``id`` was encoded from (``UNKNOWN`` if none)."""
        return self._fingerprints[self._rows[id]]

    @property
    def skipped(self) -> dict[str, str]:
        """The ids left out of the file as unreadable (:meth:`record_skipped`) and not written since, and why."""
        return dict(self._skipped)

    def record_skipped(self, failed: Sequence[tuple[str, str]]) -> None:
        """Record ``failed`` (id, reason), images left out as unreadable (``rlcap features --skip-bad``), so that
        a reader can tell an image skipped from one never encoded (a run leaves the skipped out, saying so);
        an id written later leaves the record. An id the file holds keeps its row (an image that changed, then
        could not be read), and is not recorded."""
        self._skipped.update((id, why) for id, why in failed if id not in self._rows)
        self._store_skipped()

    def _store_skipped(self) -> None:
        f = self._file
        for name in _SKIPPED:
            if name in f:
                del f[name]
        if self._skipped:  # (a few ids, rewritten whole)
            f.create_dataset(_SKIPPED[0], data=list(self._skipped), dtype=h5py.string_dtype("utf-8"))
            f.create_dataset(_SKIPPED[1], data=list(self._skipped.values()), dtype=h5py.string_dtype("utf-8"))
        f.flush()

    def set_fingerprints(self, ids: Sequence[str], fingerprints: Sequence[ImageFingerprint]) -> None:
        """Record new fingerprints for ids already in the file (an unchanged image that was touched)."""
        f = self._file
        for id, fp in zip(ids, fingerprints, strict=True):
            row = self._rows[id]
            f["file_size"][row], f["file_mtime_ns"][row], f["file_digest"][row] = fp
            self._fingerprints[row] = fp
        f.flush()

    def write(self, ids: Sequence[str], fc: np.ndarray, att: np.ndarray, att_count: np.ndarray | None = None,
              fingerprints: Sequence[ImageFingerprint] | None = None, replace: bool = False,
              boxes: np.ndarray | None = None) -> None:
        """Write a batch: fc (b, D), att (b, N, D) with N <= max_regions, att_count (b,) or all N, the
        fingerprints of the image files (unknown when None) and, in a file that keeps them
        (:attr:`has_boxes`), boxes (b, N, 4). New ids are appended; ids already in the file are an error
        unless ``replace``, which rewrites their rows in place."""
        b = len(ids)
        if fc.shape[0] != b or att.shape[0] != b or att.shape[1] > self.max_regions:
            raise ValueError(f"batch of {b} ids with fc {fc.shape}, att {att.shape} "
                             f"(max_regions {self.max_regions})")
        if (boxes is None) == self.has_boxes or (boxes is not None and boxes.shape != (*att.shape[:2], 4)):
            raise ValueError(f"{self.path} {'keeps' if self.has_boxes else 'has no'} region boxes; got "
                             f"{None if boxes is None else boxes.shape} with att {att.shape}")
        fps = list(fingerprints) if fingerprints is not None else [UNKNOWN] * b
        repeated = [id for id in ids if id in self._rows]
        if (repeated and not replace) or len(set(ids)) != b or len(fps) != b:
            twice = repeated or [i for i in dict.fromkeys(ids) if ids.count(i) > 1]
            raise DataError(f"{self.path}: {len(twice)} ids written twice, e.g. {twice[:5]}")
        counts = np.full(b, att.shape[1]) if att_count is None else np.asarray(att_count)
        real = np.arange(att.shape[1])[None, :, None] < counts[:, None, None]  # (b, N, 1)
        if (counts < att.shape[1]).any():  # readers rely on zeros past each count
            att = np.where(real, att, 0)
        fc, att = fc.astype(self.dtype, copy=False), att.astype(self.dtype, copy=False)
        # (b, max_regions, 4): whole rows, so that no box of an earlier, truncated row survives in a chunk
        full = np.zeros((b, self.max_regions if self.has_boxes else 0, 4), dtype=np.float32)
        if boxes is not None:
            full[:, : att.shape[1]] = np.where(real, boxes, 0)
        old = [i for i, id in enumerate(ids) if id in self._rows]
        new = [i for i, id in enumerate(ids) if id not in self._rows]
        self._check_space(b)
        try:
            if old:
                self._rewrite([ids[i] for i in old], fc[old], att[old], counts[old], [fps[i] for i in old],
                              full[old])
            if new:
                self._append([ids[i] for i in new], fc[new], att[new], counts[new], [fps[i] for i in new],
                             full[new])
        except OSError as exc:  # (HDF5's own errors carry the errno of the failed write)
            raise write_error(self.path, exc) from None
        if self._skipped.keys() & set(ids):  # readable now (a picture fixed): no longer skipped
            self._skipped = {id: why for id, why in self._skipped.items() if id not in ids}
            self._store_skipped()

    def _append(self, ids: list[str], fc: np.ndarray, att: np.ndarray, counts: np.ndarray,
                fps: list[ImageFingerprint], boxes: np.ndarray) -> None:
        f = self._file
        n, b = f["ids"].shape[0], len(ids)
        for name in ("fc", "att", "att_count", *_FINGERPRINT, *(("boxes",) if self.has_boxes else ())):
            f[name].resize(n + b, axis=0)
        if self.has_boxes:
            f["boxes"][n:] = boxes
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
                 fps: list[ImageFingerprint], boxes: np.ndarray) -> None:
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
            if self.has_boxes:
                f["boxes"][row] = boxes[k]
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
