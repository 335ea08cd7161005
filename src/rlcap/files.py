"""Writing a user's files: the folder checked before long work starts, every file written whole or
not at all, and a full disk or a read-only folder reported in one line naming the path.

* :func:`check_writable` before decoding, encoding or training: the nearest existing folder of
  the path must accept a new file (a probe file is created and removed), so that hours of work
  never end on a folder that cannot take their result.
* :func:`write_bytes`, :func:`write_text`, :func:`write_json`: the data go to a temporary file
  in the same folder (``.NAME.XXXX.tmp``), which is renamed over ``NAME`` (atomic on POSIX); on
  any failure the temporary file is removed, so no ``.tmp`` is ever left behind.
* :class:`WriteError`: an ``OSError`` of a write (no space left, read-only file system,
  permission denied) as one line, ``cannot write PATH: REASON``.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlcap.errors import RlcapError

# errno -> the words of the one-line message (the others: the system's own strerror)
REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}

_UMASK = os.umask(0o022)  # read once (setting it is the only way to read it), then put back
os.umask(_UMASK)


class WriteError(RlcapError):
    """A file or folder that cannot be written: full disk, read-only folder, no permission."""


def write_error(path: str | Path, exc: OSError) -> WriteError:
    """``exc`` (raised while writing ``path``) as one line: ``cannot write PATH: REASON``."""
    reason = REASONS.get(exc.errno or 0) or exc.strerror or str(exc).splitlines()[0]
    return WriteError(f"cannot write {path}: {reason}")


def _existing_folder(path: Path) -> Path:
    """The nearest folder of ``path`` that exists (``path`` itself when it is one)."""
    folder = path
    while not folder.exists():
        if folder.parent == folder:
            break
        folder = folder.parent
    return folder


def check_writable(path: str | Path, folder: bool = False) -> None:
    """Raise :class:`WriteError` when ``path`` (a file, or with ``folder`` a folder) could not be
    written: its nearest existing folder must accept a new file. Nothing is left behind."""
    path = Path(path)
    if not folder and path.is_dir():
        raise WriteError(f"cannot write {path}: it is a folder, not a file")
    existing = _existing_folder((path if folder else path.parent).resolve())
    if not existing.is_dir():
        raise WriteError(f"cannot write {path}: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".rlcap-probe-", suffix=".tmp")
    except OSError as exc:
        raise write_error(path, exc) from None
    os.close(fd)
    os.unlink(probe)


def write_bytes(path: str | Path, data: bytes) -> None:
    """``data`` at ``path`` (its folder created), atomically: a temporary file in the same folder,
    renamed into place; removed on any failure. An ``OSError`` becomes :class:`WriteError`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 -> what open() would have given
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise write_error(path, exc) from None
        raise


def write_text(path: str | Path, text: str) -> None:
    """``text`` (UTF-8) at ``path``, as :func:`write_bytes`."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any, indent: int | None = None) -> None:
    """``obj`` as JSON at ``path`` (its folder created): compact without ``indent``, else indented."""
    text = json.dumps(obj, separators=(",", ":")) if indent is None else json.dumps(obj, indent=indent)
    write_text(path, text)


def append_text(path: str | Path, text: str) -> None:
    """``text`` (UTF-8) added at the end of ``path`` (created when missing), whole or not at all:
    on a failed write the file is cut back to its length before, so a log never ends in half a
    line. An ``OSError`` becomes :class:`WriteError`."""
    path = Path(path)
    try:
        with open(path, "ab") as fh:
            size = fh.tell()
            try:
                fh.write(text.encode("utf-8"))
                fh.flush()
            except OSError:
                fh.truncate(size)
                raise
    except OSError as exc:
        raise write_error(path, exc) from None


@contextmanager
def new_folders(path: str | Path) -> Iterator[Path]:
    """``path`` as a folder (its missing parents too) for the block. When the block fails, the folders it
    made are removed if they are still empty, so that a command refused before it wrote anything leaves
    no folder behind. A folder that cannot be made is :class:`WriteError`."""
    path = Path(path)
    made = [folder for folder in (path, *path.parents) if not folder.exists()]  # deepest first
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        yield path
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()  # only when empty
            except OSError:
                break
        raise
