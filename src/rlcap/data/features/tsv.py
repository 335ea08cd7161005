"""Bottom-up-attention TSV files as a feature store, read out of core through an index of their lines.

Layout (peteanderson80/bottom-up-attention, ``tools/generate_tsv.py``; its ``trainval_36`` download is
split over several files): one line per image, tab-separated fields
``image_id, image_w, image_h, num_boxes, boxes, features``, ``boxes`` the base64 of float32 (num_boxes, 4)
(x1, y1, x2, y2 in pixels) and ``features`` the base64 of float32 (num_boxes, D) (D = 2048 for the
released features; read from the data). The 10-100 adaptive variant varies num_boxes per line. Fields
after ``features``, which some other tools add, are ignored. A store is one ``.tsv`` file or a folder of
them (an image id in two files is refused).

A COCO download is about 50 GB of base64, so nothing is decoded at open: one pass over the lines
(``mmap`` and ``find``, at the speed of the disk) records where each line and its two base64 fields
lie, reading only the first four fields; a line is decoded when its image is asked for. The field
lengths give each line's D without decoding, so a line whose features do not hold num_boxes x D
values (a cut last line, a damaged one) is found at indexing. The index is cached as
``NAME.tsv.rlcap-index.npz`` beside the file (a folder: :data:`FOLDER_INDEX` inside it), valid while
every TSV's size and modification time are the recorded ones; where that cannot be written (a
read-only mount), in ``~/.cache/rlcap/tsv-index/`` (or ``TsvFeatureStore(path, index_cache=FOLDER)``; no
environment variable moves it) named by a digest of the path; where neither can, it is kept in memory for
this process, with one warning.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import logging
import mmap
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rlcap.data.features.store import FeatureStore, LoadedFeatures, check_counts, check_finite
from rlcap.errors import DataError

log = logging.getLogger(__name__)

INDEX_SUFFIX = ".rlcap-index.npz"
FOLDER_INDEX = "tsv-folder" + INDEX_SUFFIX  # the index of a folder of TSVs, inside it
FIELDS = "image_id, image_w, image_h, num_boxes, boxes, features"
_VERSION = 1  # of the index's layout: an index of another version is built again
_IN_MEMORY: dict[str, "TsvIndex"] = {}  # indexes no place could hold, by source: built once a process
_WARNED: set[str] = set()


class TsvIndex(NamedTuple):
    """Where each image's line lies in the TSV files of one store; arrays (n,) unless said."""

    version: np.ndarray  # () int
    source: np.ndarray  # () str: the absolute path indexed (a file or a folder)
    files: np.ndarray  # (F,) str: the TSV files, relative to the source's folder
    sizes: np.ndarray  # (F,) int64: their sizes when indexed
    mtimes: np.ndarray  # (F,) int64: their st_mtime_ns when indexed
    att_dim: np.ndarray  # () int: D, the same on every line
    ids: np.ndarray  # str
    file_no: np.ndarray  # int64, into files (not "file": np.savez takes that name)
    line: np.ndarray  # int64, 1-based
    offset: np.ndarray  # int64, of the line's first byte
    length: np.ndarray  # int64, of the line without its end (\n or \r\n)
    num_boxes: np.ndarray  # int64
    image_w: np.ndarray  # int64
    image_h: np.ndarray  # int64
    boxes_at: np.ndarray  # int64, offset of the boxes field
    boxes_len: np.ndarray  # int64, its characters
    features_at: np.ndarray  # int64
    features_len: np.ndarray  # int64


# A TSV part: NAME.tsv, or NAME.tsv.0, NAME.tsv.1, ... as the adaptive (10-100 boxes) download numbers its parts
_TSV_PART = re.compile(r".*\.tsv(\.\d+)?", re.IGNORECASE)


def tsv_files(path: Path) -> list[Path]:
    """The TSV files of a store at ``path`` (a file, or a folder's ``*.tsv`` and ``*.tsv.N`` in name order)."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if _TSV_PART.fullmatch(p.name) and p.is_file())


def is_tsv_folder(path: Path) -> bool:
    """A folder holding TSV parts and no ``*.npz`` (an index this module wrote does not count)."""
    names = [p.name.lower() for p in path.iterdir()]
    return (any(_TSV_PART.fullmatch(n) for n in names)
            and not any(n.endswith(".npz") and not n.endswith(INDEX_SUFFIX) for n in names))


def _stamps(paths: Sequence[Path]) -> tuple[np.ndarray, np.ndarray]:
    stats = [p.stat() for p in paths]
    return (np.array([s.st_size for s in stats], dtype=np.int64),
            np.array([s.st_mtime_ns for s in stats], dtype=np.int64))


def _base64_bytes(mm: mmap.mmap, start: int, stop: int) -> int | None:
    """Bytes that the base64 in ``mm[start:stop]`` decodes to, from its length alone (None: not base64)."""
    n = stop - start
    if n % 4:
        return None
    return n // 4 * 3 - ((mm[stop - 1] == 61) + (mm[stop - 2] == 61) if n else 0)  # 61: '='


class _Scan:
    """The lines of a store's files, gathered by :func:`build_index`."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {name: [] for name in TsvIndex._fields[6:]}
        self.seen: dict[str, tuple[Path, int]] = {}
        self.dim: tuple[int, Path, int] | None = None  # D, and the file and line it was read from

    def line(self, mm: mmap.mmap, path: Path, file_no: int, number: int, start: int, stop: int, ended: bool) -> None:
        """Record the line ``mm[start:stop]`` (``ended``: a newline follows it), checking what the
        lengths tell: the fields, num_boxes, the base64 lengths of boxes and features, D."""
        where = f"{path}, line {number}"
        cut = "" if ended else ": the file ends inside this line (no newline after it): it is truncated"
        tabs, t = [], start
        while len(tabs) < 5 and (t := mm.find(b"\t", t, stop)) >= 0:
            tabs.append(t)
            t += 1
        if len(tabs) < 5:
            raise DataError(f"{where}: {len(tabs) + 1} tab-separated fields, expected {FIELDS}"
                            f"{cut or ': the line is truncated'}; download or generate the file again")
        image_id, width, height, count = (mm[a + 1:b].decode("utf-8", "replace")
                                          for a, b in zip([start - 1, *tabs[:3]], tabs[:4]))
        n = _integer(count, "num_boxes", where)
        if n <= 0:
            raise DataError(f"{where}: num_boxes {count!r} is not a positive integer")
        w, h = _integer(width, "image_w", where), _integer(height, "image_h", where)
        after = mm.find(b"\t", tabs[4] + 1, stop)  # a field after features, which is ignored
        feat = (tabs[4] + 1, stop if after < 0 else after)
        box_bytes, feat_bytes = _base64_bytes(mm, tabs[3] + 1, tabs[4]), _base64_bytes(mm, *feat)
        d = feat_bytes // (n * 4) if feat_bytes is not None and feat_bytes % (n * 4) == 0 else 0
        if box_bytes != n * 16:
            bad = f"the boxes field holds {_sized(box_bytes)}, not num_boxes ({n}) x 4 float32 values"
        elif not d or (self.dim is not None and d != self.dim[0]):
            dim = "D" if self.dim is None else str(self.dim[0])
            first = "" if self.dim is None else f" (D = {dim} as on {self.dim[1]}, line {self.dim[2]})"
            bad = f"the features field holds {_sized(feat_bytes)}, not num_boxes ({n}) x {dim} float32 values{first}"
        else:
            bad = ""
        if bad:
            raise DataError(f"{where}: {bad}{cut or ': the line is damaged'}; download or generate the file again")
        if image_id in self.seen:
            other, at = self.seen[image_id]
            raise DataError(f"image id {image_id!r} is in {other} (line {at}) and in {where}: give each image once")
        self.seen[image_id] = (path, number)
        self.dim = self.dim or (d, path, number)
        row = (image_id, file_no, number, start, stop - start, n, w, h, tabs[3] + 1, tabs[4] - tabs[3] - 1,
               feat[0], feat[1] - feat[0])
        for column, value in zip(self.columns.values(), row):
            column.append(value)


def _sized(n: int | None) -> str:
    return "a length that is not base64's" if n is None else f"{n} bytes"


def _integer(text: str, name: str, where: str) -> int:
    try:
        value = float(text)  # 640 or 640.0: some tools write sizes as floats
    except ValueError:
        value = float("nan")
    if not value.is_integer():
        raise DataError(f"{where}: {name} {text!r} is not an integer")
    return int(value)


def _scan_file(scan: _Scan, path: Path, file_no: int) -> None:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            start, number = 0, 0
            while start < size:
                number += 1
                end = mm.find(b"\n", start)
                ended = end >= 0
                end = end if ended else size
                stop = end - 1 if end > start and mm[end - 1] == 13 else end  # 13: '\r'
                if stop > start:  # a blank line (one at the end of a file) holds no image
                    scan.line(mm, path, file_no, number, start, stop, ended)
                start = end + 1


def build_index(path: Path, paths: Sequence[Path]) -> TsvIndex:
    """One pass over every line of ``paths`` (the store at ``path``), reading only the lines' first four
    fields and the lengths of the other two; :class:`DataError` naming the file and line of a bad one."""
    sizes, mtimes = _stamps(paths)
    scan = _Scan()
    for file_no, file in enumerate(paths):
        _scan_file(scan, file, file_no)
    if scan.dim is None:
        raise DataError(f"{path}: no image lines in {', '.join(p.name for p in paths)}: expected bottom-up-attention "
                        f"TSV lines ({FIELDS})")
    if [tuple(a) for a in _stamps(paths)] != [tuple(sizes), tuple(mtimes)]:
        raise DataError(f"{path} changed while it was being indexed: open it again once it is written")
    base = path if path.is_dir() else path.parent
    arrays = {name: np.array(values, dtype=str if name == "ids" else np.int64)
              for name, values in scan.columns.items()}
    return TsvIndex(np.array(_VERSION), np.array(str(path.resolve())),
                    np.array([str(p.relative_to(base)) for p in paths]), sizes, mtimes,
                    np.array(scan.dim[0]), **arrays)


def index_places(path: Path, cache: str | Path | None = None) -> list[Path]:
    """Where the index of the store at ``path`` is looked for and written, in that order: beside it (a
    folder: inside it), then in ``cache`` (None: the user's, ``~/.cache/rlcap/tsv-index``), named by a digest
    of its absolute path."""
    beside = path / FOLDER_INDEX if path.is_dir() else path.with_name(path.name + INDEX_SUFFIX)
    cache = Path.home() / ".cache" / "rlcap" / "tsv-index" if cache is None else Path(cache)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return [beside, cache / f"{digest}{INDEX_SUFFIX}"]


def _read_index(place: Path) -> TsvIndex | None:
    """The index stored at ``place``, or None when there is none or it cannot be read (it is built again)."""
    try:
        with np.load(place, allow_pickle=False) as data:
            if set(data.files) != set(TsvIndex._fields) or int(data["version"]) != _VERSION:
                return None
            return TsvIndex(**{name: data[name] for name in TsvIndex._fields})
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def _write_index(index: TsvIndex, place: Path) -> bool:
    """Write ``index`` at ``place`` (whole or not at all); False when it cannot be written there."""
    tmp = place.with_name(f"{place.name}.{os.getpid()}.tmp")
    try:
        place.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez(f, **index._asdict())
        os.replace(tmp, place)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return False


def _fresh(index: TsvIndex, source: str, paths: Sequence[Path], base: Path) -> bool:
    sizes, mtimes = _stamps(paths)
    return (str(index.source) == source and index.files.tolist() == [str(p.relative_to(base)) for p in paths]
            and np.array_equal(index.sizes, sizes) and np.array_equal(index.mtimes, mtimes))


def load_index(path: Path, paths: Sequence[Path], cache: str | Path | None = None) -> TsvIndex:
    """The index of the store at ``path`` (files ``paths``): a cached one while it is fresh, else built and
    cached beside the store or in ``cache`` (see the module docstring and :func:`index_places`)."""
    source, base = str(path.resolve()), path if path.is_dir() else path.parent
    places = index_places(path, cache)
    memo = _IN_MEMORY.get(source)
    if memo is not None and _fresh(memo, source, paths, base):
        return memo
    for place in places:  # the first fresh one
        cached = _read_index(place)
        if cached is not None and _fresh(cached, source, paths, base):
            return cached
    log.info("indexing the lines of %s (once: the index is kept for the next runs)", path)
    index = build_index(path, paths)
    for place in places:
        if _write_index(index, place):
            return index
    if source not in _WARNED:
        _WARNED.add(source)
        log.warning("cannot write the index of %s at %s nor at %s: it is kept in memory, and built again by the "
                    "next process that opens the store (make one of them writable)",
                    path, *places)
    _IN_MEMORY[source] = index
    return index


class TsvFeatureStore(FeatureStore):
    """Bottom-up-attention TSV features (one ``.tsv`` file or a folder of them), read line by line.

    ``att`` of an image is its regions (num_boxes, D) float32 as stored, and ``fc`` their mean: the
    convention of self-critical.pytorch for bottom-up features, which ship no pooled vector (its data
    loader takes ``att_feat.mean(0)`` when there is no fc). Region counts, the largest count, image sizes
    and the place of each line come from the index, without decoding; each read decodes only the lines
    asked for. Files are reopened in a forked process (DataLoader workers)."""

    def __init__(self, path: str | Path, index_cache: str | Path | None = None):
        self.path = Path(path)
        if not self.path.exists():
            raise DataError(f"feature file not found: {self.path}")
        self._paths = tsv_files(self.path)
        if not self._paths:
            raise DataError(f"no '*.tsv' feature files in {self.path}")
        self._index = load_index(self.path, self._paths, index_cache)  # (None: the user's cache folder)
        self._ids = self._index.ids.tolist()
        self._rows = {id: row for row, id in enumerate(self._ids)}
        self._fc_dim = self._att_dim = int(self._index.att_dim)
        self._fds: dict[int, int] = {}
        self._pid = os.getpid()

    def __contains__(self, id: object) -> bool:
        return id in self._rows

    def missing(self, id: str) -> DataError:
        if self.path.is_file():
            return super().missing(id)
        names = [p.name for p in self._paths]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return DataError(f"feature id '{id}' not found in {self.path} ({shown})")

    @property
    def max_regions(self) -> int:
        return int(self._index.num_boxes.max())

    @property
    def has_boxes(self) -> bool:
        return True

    def _row_numbers(self, ids: Sequence[str]) -> np.ndarray:
        rows = [self._rows.get(id, -1) for id in ids]
        if -1 in rows:
            raise self.missing(ids[rows.index(-1)])
        return np.array(rows, dtype=np.int64)

    def region_counts(self, ids: Sequence[str]) -> np.ndarray:
        return self._index.num_boxes[self._row_numbers(ids)]

    def image_sizes(self, ids: Sequence[str]) -> list[tuple[int, int]]:
        """(image_w, image_h) of each image, in pixels, as the TSV records them."""
        rows = self._row_numbers(ids)
        return list(zip(self._index.image_w[rows].tolist(), self._index.image_h[rows].tolist()))

    def boxes(self, ids: Sequence[str]) -> list[np.ndarray]:
        """Each image's boxes (num_boxes, 4) float32, x1 y1 x2 y2 in pixels as stored. No captioner reads
        them yet; they are kept (and carried into a conversion to HDF5) for models that will."""
        return [self._decode(row, 4) for row in self._row_numbers(ids).tolist()]

    def get(self, id: str) -> tuple[np.ndarray, np.ndarray]:
        att = self._decode(int(self._row_numbers([id])[0]), 0)
        return att.mean(axis=0, dtype=np.float32), att

    def load_all(self, ids: Sequence[str]) -> LoadedFeatures:
        """``ids``' rows in that order, the lines read in file order (for the disk's sake); see
        :meth:`FeatureStore.load_all`."""
        rows = self._row_numbers(ids)
        counts = self._index.num_boxes[rows]
        check_counts(self.path, ids, counts, self.max_regions)
        fc = np.zeros((len(rows), self._att_dim), dtype=np.float32)
        att = np.zeros((len(rows), int(counts.max()) if len(rows) else 0, self._att_dim), dtype=np.float32)
        order = np.lexsort((self._index.offset[rows], self._index.file_no[rows]))
        for k in order.tolist():
            regions = self._decode(int(rows[k]), 0)
            att[k, : len(regions)] = regions
            fc[k] = regions.mean(axis=0, dtype=np.float32)
        check_finite(self.path, ids, fc, att)
        return LoadedFeatures(fc, att, counts.copy())

    def _fd(self, file_no: int) -> int:
        """The open descriptor of file ``file_no``, checked to be the file indexed (its size and mtime)."""
        if self._pid != os.getpid():  # a forked worker: its own descriptors
            self._fds, self._pid = {}, os.getpid()
        path = self._paths[file_no]
        if file_no not in self._fds:
            try:
                self._fds[file_no] = os.open(path, os.O_RDONLY)
            except OSError as exc:
                raise DataError(f"cannot read feature file {path}: {exc.strerror or exc}") from exc
        stat = os.fstat(self._fds[file_no])
        was = int(self._index.sizes[file_no]), int(self._index.mtimes[file_no])
        if (stat.st_size, stat.st_mtime_ns) != was:
            raise DataError(f"{path} changed since it was indexed ({was[0]} -> {stat.st_size} bytes): the lines "
                            "are not where the index says; open the store again to index it anew")
        return self._fds[file_no]

    def _decode(self, row: int, field: int) -> np.ndarray:
        """Line ``row``'s features (``field`` 0: (num_boxes, D)) or boxes (4: (num_boxes, 4)), float32."""
        index = self._index
        file_no, n = int(index.file_no[row]), int(index.num_boxes[row])
        at, size = ((index.features_at, index.features_len) if field == 0 else (index.boxes_at, index.boxes_len))
        where = f"{self._paths[file_no]}, line {int(index.line[row])}"
        name, width = ("features", self._att_dim) if field == 0 else ("boxes", 4)
        text = os.pread(self._fd(file_no), int(size[row]), int(at[row]))
        try:
            raw = base64.b64decode(text, validate=True)
        except binascii.Error as exc:
            raise DataError(f"{where}: the {name} field is not base64 ({exc}): the line is damaged; download or "
                            "generate the file again") from None
        if len(raw) != n * width * 4:
            raise DataError(f"{where}: the {name} field holds {len(raw)} bytes, not num_boxes ({n}) x {width} "
                            "float32 values: the line is damaged; download or generate the file again")
        # '<f4': the files are written on little-endian machines by numpy's tobytes (via base64.b64encode)
        return np.frombuffer(raw, dtype="<f4").reshape(n, width).astype(np.float32)

    def close(self) -> None:
        if self._pid == os.getpid():
            for fd in self._fds.values():
                os.close(fd)
        self._fds = {}
