"""A picture stored inside a dataset file (the bytes of an image column of a Hugging Face ``datasets`` dataset),
read where it lies, never unpacked to an image file.

An :class:`EmbeddedImage` names one cell: the Arrow or Parquet file, the row (its row group for Parquet) and the
column. Its bytes are read when asked (:meth:`EmbeddedImage.read`), a few row groups kept in memory at a time, so
a dataset of any size is read in one pass; what reads pictures (``rlcap features`` with every encoder, the
fingerprints of its store, ``rlcap eval --clip``, the report's gallery) takes one wherever it takes a file."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcap.errors import DataError

_CACHED_GROUPS = 8  # row groups (Parquet) or tables (Arrow) kept open at a time


@dataclass(frozen=True)
class EmbeddedImage:
    """The picture in ``column`` of row ``row`` of block ``group`` of ``file``: a row group of a Parquet file, or a
    record batch of an Arrow file ``save_to_disk`` wrote (``arrow``); ``where``: the row as messages name it
    (``DATASET train row 3``)."""

    file: str
    group: int
    row: int
    column: str
    where: str
    arrow: bool = False

    def read(self) -> bytes:
        """The picture's encoded bytes (PNG, JPEG, ...), or the file a path-only cell names, read."""
        cell = _cell(self.file, self.group, self.column, self.row, self.arrow)
        if isinstance(cell, dict) and cell.get("bytes"):
            return bytes(cell["bytes"])
        if isinstance(cell, (bytes, bytearray)) and cell:
            return bytes(cell)
        raise DataError(f"{self.where}: column {self.column!r} holds no picture bytes")

    def stat(self) -> tuple[int, int]:
        """(size, modification time) as the feature store's fingerprints record a file's: the picture's bytes and
        the time its dataset file was written."""
        return len(self.read()), os.stat(self.file).st_mtime_ns

    def __str__(self) -> str:
        return self.where


@functools.lru_cache(maxsize=_CACHED_GROUPS)
def _block(file: str, group: int, column: str, arrow: bool) -> Any:
    """One column of a Parquet row group (read and decompressed), or of a record batch of an Arrow file (memory
    mapped, not copied): a pyarrow array."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if not arrow:
            return pq.ParquetFile(file).read_row_group(group, columns=[column]).column(0)
        reader = pa.ipc.open_stream(pa.memory_map(file))
        for k, batch in enumerate(reader):
            if k == group:
                return batch.column(column)
        raise KeyError(f"record batch {group}")
    except (OSError, pa.ArrowException, KeyError) as exc:
        raise DataError(f"{file}: cannot read column {column!r} ({exc})") from None


def _cell(file: str, group: int, column: str, row: int, arrow: bool) -> Any:
    return _block(file, group, column, arrow)[row].as_py()


def read_picture_bytes(source: EmbeddedImage | str | Path) -> bytes:
    """The encoded bytes of a picture: an embedded one's, or a file's."""
    if isinstance(source, EmbeddedImage):
        return source.read()
    return Path(source).read_bytes()
