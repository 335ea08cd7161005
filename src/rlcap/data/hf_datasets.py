"""Captions kept as Hugging Face ``datasets`` keep them (``data.format: hf``, found by ``auto``), in the three
layouts ``datasets`` writes and reads:

- a ``save_to_disk`` folder (``dataset_dict.json`` and a folder per split, or one split's ``state.json``):
  its Arrow files are memory-mapped, never copied;
- Parquet: one ``.parquet`` file, or a folder of them (``data/train-00000-of-00001.parquet``, as the Hub keeps
  a dataset), the split of each file the first word of its name or of a folder above it;
- an image folder, the layout ``load_dataset("imagefolder")`` reads: ``metadata.jsonl`` or ``metadata.csv``
  whose ``file_name`` column names each picture (relative to the metadata file), in the folder or in one folder
  per split (``train/``, ``validation/``, ``test/``).

The columns are named by ``data.image_column``, ``data.caption_column`` (a string or a list of strings per image),
``data.id_column`` (empty: the picture's file name without its suffix) and ``data.split_column`` (empty: the
dataset's own splits). A picture stored as bytes (the ``Image`` feature's ``{"bytes", "path"}``, or a binary
column) becomes an :class:`rlcap.data.embedded.EmbeddedImage`, read where it lies; one stored as a path is a file
name, relative to the dataset's folder. Duplicate ids, empty captions, missing pictures and columns of the wrong
type are refused with one line naming the row. pyarrow (which ``datasets`` installs) reads every layout."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from rlcap.data.embedded import EmbeddedImage
from rlcap.data.records import ImageRecord
from rlcap.errors import DataError

INSTALL = "pip install 'rlcap[datasets]'"
METADATA = ("metadata.jsonl", "metadata.csv")
# the split names of datasets (``validation``) and of rlcap's files (``val``), as rlcap names them
SPLIT_NAMES = {"train": "train", "training": "train", "restval": "train", "validation": "val", "valid": "val",
               "val": "val", "dev": "val", "test": "test", "testing": "test"}


class ColumnNeeded(DataError):
    """A column to name, or name again, to read the dataset: ``field`` is the :class:`Columns` field that names it
    (``split``). The message names the training key (``data.split_column``); :meth:`named_by` says it as another
    command names it (``rlcap features --columns split=COL``)."""

    def __init__(self, before: str, field: str, after: str = "", key: str = ""):
        self.before, self.field, self.after = before, field, after
        super().__init__(f"{before}{key or f'data.{field}_column'}{after}")

    def named_by(self, key: str) -> "ColumnNeeded":
        """The same message with the column's key written ``key`` (``--columns split=COL``)."""
        return ColumnNeeded(self.before, self.field, self.after, key)


class Columns(NamedTuple):
    """Which columns hold what (the ``data.*_column`` keys)."""

    image: str = "image"
    caption: str = "caption"
    id: str = ""  # empty: the picture's file name without its suffix
    split: str = ""  # empty: the dataset's own splits


def layout(path: str | Path) -> str | None:
    """``save_to_disk``, ``parquet`` or ``imagefolder`` for a dataset in one of those layouts, else None."""
    path = Path(path)
    if path.is_file():
        return "parquet" if path.suffix == ".parquet" else None
    if not path.is_dir():
        return None
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        return "save_to_disk"
    if any((path / m).is_file() for m in METADATA) or any((d / m).is_file() for d in _split_dirs(path)
                                                            for m in METADATA):
        return "imagefolder"
    return "parquet" if any(path.rglob("*.parquet")) else None


def _split_dirs(path: Path) -> list[Path]:
    return sorted(d for d in path.iterdir() if d.is_dir() and d.name.lower() in SPLIT_NAMES)


def read_hf_dataset(path: str | Path, columns: Columns = Columns()) -> list[ImageRecord]:
    """The records of a dataset in one of the three layouts (captions not yet tokenized)."""
    path = Path(path)
    records: list[ImageRecord] = []
    seen: dict[str, str] = {}
    for row in _rows(path, columns):
        record = _record(row, columns, path)
        if record.id in seen:
            raise ColumnNeeded(f"{row.where}: id {record.id!r} appears twice ({seen[record.id]} and this row); "
                               "every image needs its own id (", "id", " names the column of ids)")
        seen[record.id] = row.where
        records.append(record)
    if not records:
        raise DataError(f"{path}: the dataset holds no rows")
    return records


def named_pictures(path: str | Path, columns: Columns = Columns()) -> list[tuple[str, EmbeddedImage | Path]]:
    """Each row's picture named by its row, as messages name it (``DATASET train row 0``), in the dataset's order:
    what ``rlcap caption DATASET`` captions, a picture stored as bytes (read in place) or as a file name (relative
    to the dataset's folder) alike. Captions, ids and splits are not read."""
    path = Path(path)
    root = path if path.is_dir() else path.parent
    named: list[tuple[str, EmbeddedImage | Path]] = []
    for row in _rows(path, columns):
        if row.picture is None:
            raise DataError(f"{row.where}: no picture in column {columns.image!r}")
        named.append((row.where, row.picture if isinstance(row.picture, EmbeddedImage) else root / row.picture))
    if not named:
        raise DataError(f"{path}: the dataset holds no rows")
    return named


def _rows(path: Path, columns: Columns) -> Iterator[_Row]:
    """The rows of the dataset at ``path``, in the reader of its layout."""
    kind = layout(path)
    if kind is None:
        raise DataError(f"{path}: not a datasets dataset (a save_to_disk folder, .parquet files, or an image folder "
                        "with metadata.jsonl or metadata.csv)")
    readers = {"save_to_disk": _arrow_rows, "parquet": _parquet_rows, "imagefolder": _imagefolder_rows}
    return readers[kind](path, columns)


class _Row(NamedTuple):
    values: dict[str, Any]  # the row's cells but the picture's
    split: str | None       # the dataset's own split of the row (None: it has none)
    picture: Any            # EmbeddedImage, a file name (str) or None: missing
    name: str | None        # the picture's file name as the dataset records it (an id when no column gives one)
    where: str              # "DATASET train row 3"


def _record(row: _Row, columns: Columns, root: Path) -> ImageRecord:
    filename = row.picture if isinstance(row.picture, str) else None
    if row.picture is None:
        raise DataError(f"{row.where}: no picture in column {columns.image!r}")
    if filename is not None and not (root if root.is_dir() else root.parent).joinpath(filename).is_file():
        raise DataError(f"{row.where}: its picture {filename} is not found (relative to the dataset's folder)")
    return ImageRecord(id=_row_id(row, columns, filename), split=_row_split(row, columns),
                       captions=_row_captions(row, columns), filename=filename,
                       image=row.picture if isinstance(row.picture, EmbeddedImage) else None)


def _row_id(row: _Row, columns: Columns, filename: str | None) -> str:
    if columns.id:
        value = _column(row, columns.id, "id")
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            raise DataError(f"{row.where}: column {columns.id!r} is {value!r}; expected an id (a string or an integer)")
        return str(value)
    name = filename or row.name
    if not name:
        raise ColumnNeeded(f"{row.where}: its picture has no file name to take an id from; name the column of ids (",
                           "id", ")")
    return Path(name).stem


def _row_split(row: _Row, columns: Columns) -> str:
    value = _column(row, columns.split, "split") if columns.split else row.split
    if value is None:
        raise ColumnNeeded(f"{row.where}: the dataset has no splits of its own; name the column of splits (", "split",
                           ")")
    if not isinstance(value, str) or value.lower() not in SPLIT_NAMES:
        raise DataError(f"{row.where}: split {value!r} is not one of {', '.join(SPLIT_NAMES)}")
    return SPLIT_NAMES[value.lower()]


def _row_captions(row: _Row, columns: Columns) -> list[str]:
    value = _column(row, columns.caption, "caption")
    captions = [value] if isinstance(value, str) else value
    if not isinstance(captions, list) or not all(isinstance(c, str) for c in captions):
        raise DataError(f"{row.where}: column {columns.caption!r} is {_kind(value)}; expected a caption string or a "
                        "list of caption strings")
    if not captions or any(not c.strip() for c in captions):
        raise DataError(f"{row.where}: an empty caption in column {columns.caption!r}")
    return captions


def _column(row: _Row, name: str, field: str) -> Any:
    if name not in row.values:
        shown = ", ".join(row.values)
        raise ColumnNeeded(f"{row.where}: no column {name!r} (its columns: {shown}); name it with ", field)
    return row.values[name]


def _kind(value: Any) -> str:
    """A cell's value and type, for messages: ``7 (int)``."""
    return f"{repr(value)[:40]} ({type(value).__name__})"


# ---- the three layouts, each yielding _Row


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise DataError(f"reading a datasets dataset needs pyarrow: {INSTALL}") from None
    return pyarrow


def _block_rows(block: Any, columns: Columns, where: str, split: str | None, first: int,
                embedded: Any) -> Iterator[_Row]:
    """The rows of one pyarrow block (a record batch or a row group) whose first row is row ``first`` of its split;
    ``embedded(k, where)``: the EmbeddedImage of the block's row k."""
    names = [n for n in block.column_names if n != columns.image]
    values = {n: block.column(n).to_pylist() for n in names}
    cells = _picture_cells(block, columns, where)
    for k in range(block.num_rows):
        row_where = f"{where} row {first + k}"
        path = cells[k]["path"] if isinstance(cells[k], dict) else None
        yield _Row({n: values[n][k] for n in names}, split, _picture(cells[k], lambda: embedded(k, row_where)),
                   path, row_where)


def _picture_cells(block: Any, columns: Columns, where: str) -> list[Any]:
    """The image column's cells without its bytes (``{"path", "bytes": True/False}``; a binary column: True or
    False), so that a group's pictures are not copied while the rows are read."""
    pa = _pyarrow()
    import pyarrow.compute as pc

    if columns.image not in block.column_names:
        raise ColumnNeeded(f"{where}: no column {columns.image!r} (its columns: {', '.join(block.column_names)}); "
                           "name the column of pictures with ", "image")
    column = block.column(columns.image)
    if pa.types.is_struct(column.type) and column.type.get_field_index("bytes") >= 0:
        present = pc.invert(pc.is_null(pc.struct_field(column, "bytes"))).to_pylist()
        paths = (pc.struct_field(column, "path").to_pylist() if column.type.get_field_index("path") >= 0
                 else [None] * len(present))
        return [{"bytes": b, "path": p} for b, p in zip(present, paths)]
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return pc.invert(pc.is_null(column)).to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.to_pylist()
    raise DataError(f"{where}: column {columns.image!r} is {column.type}; expected pictures (the Image feature's "
                    "bytes and path, bytes, or file names)")


def _picture(cell: Any, embedded: Any) -> Any:
    """An embedded picture (``embedded()``) where the cell holds bytes, its file name where it holds only a path,
    else None."""
    if isinstance(cell, dict):
        return embedded() if cell["bytes"] else cell["path"] or None
    if isinstance(cell, bool):
        return embedded() if cell else None
    return cell or None


def _arrow_rows(path: Path, columns: Columns) -> Iterator[_Row]:
    """A save_to_disk folder: a DatasetDict (``dataset_dict.json``: a folder per split) or one Dataset."""
    pa = _pyarrow()
    if (path / "dataset_dict.json").is_file():
        splits = _json(path / "dataset_dict.json")["splits"]
        parts = [(path / name, name) for name in splits]
    else:
        parts = [(path, None)]
    for folder, split in parts:
        state = _json(folder / "state.json")
        split = split or state.get("_split")
        offset = 0
        for entry in state["_data_files"]:
            file = str(folder / entry["filename"])
            where = f"{path} {split}" if split else f"{path}"
            for group, batch in enumerate(pa.ipc.open_stream(pa.memory_map(file))):
                yield from _block_rows(batch, columns, where, split, offset, lambda k, w, g=group, f=file:
                                       EmbeddedImage(f, g, k, columns.image, w, arrow=True))
                offset += batch.num_rows


def _json(path: Path) -> Any:
    """A save_to_disk folder's JSON file (its splits, a split's files)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read it as save_to_disk writes it ({exc})") from None


def _parquet_rows(path: Path, columns: Columns) -> Iterator[_Row]:
    _pyarrow()
    import pyarrow.parquet as pq

    files = [path] if path.is_file() else sorted(path.rglob("*.parquet"))
    offsets: dict[str | None, int] = {}
    for file in files:
        split = _split_of_file(file, path)
        where = f"{path} {split}" if split else f"{path}"
        parquet = pq.ParquetFile(file)
        for group in range(parquet.num_row_groups):
            block = parquet.read_row_group(group)
            yield from _block_rows(block, columns, where, split, offsets.get(split, 0), lambda k, w, g=group, f=file:
                                   EmbeddedImage(str(f), g, k, columns.image, w))
            offsets[split] = offsets.get(split, 0) + block.num_rows


def _split_of_file(file: Path, root: Path) -> str | None:
    """The split a Parquet file's name, or a folder above it, names (``train-00000-of-00001.parquet``)."""
    parts = [file.stem, *(p.name for p in file.relative_to(root).parents if p.name)] if root.is_dir() else [file.stem]
    for part in parts:
        word = part.lower().replace("_", "-").split("-")[0]
        if word in SPLIT_NAMES:
            return word
    return None


def _imagefolder_rows(path: Path, columns: Columns) -> Iterator[_Row]:
    folders = [(path, None)] + [(d, d.name) for d in _split_dirs(path)]
    for folder, split in folders:
        for name in METADATA:
            if (folder / name).is_file():
                yield from _metadata_rows(folder / name, path, split)


def _metadata_rows(file: Path, root: Path, split: str | None) -> Iterator[_Row]:
    """The rows of a ``metadata.jsonl`` or ``metadata.csv``: ``file_name`` is the picture's, relative to the file."""
    where = f"{file}"
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {file}: {exc}") from None
    if file.suffix == ".csv":
        items: list[Any] = list(csv.DictReader(text.splitlines()))
    else:
        items = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{file}:{lineno}: not valid JSON: {exc.msg}") from None
    for k, item in enumerate(items):
        row_where = f"{where} row {k}"
        if not isinstance(item, dict) or not isinstance(item.get("file_name"), str) or not item["file_name"]:
            raise DataError(f"{row_where}: expected an object with a 'file_name' (the picture, relative to "
                            f"{file.parent})")
        picture = (file.parent / item["file_name"]).relative_to(root).as_posix() if root.is_dir() else item["file_name"]
        values = {n: v for n, v in item.items() if n != "file_name"}
        yield _Row(values, split, picture, picture, row_where)
