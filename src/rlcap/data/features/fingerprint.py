"""What an image file was when its features were extracted, so that a changed dataset is noticed.

A fingerprint is the file's size and modification time (one ``stat``, cheap) and a BLAKE2b-128
digest of its bytes. An image counts as unchanged when its size and modification time are the
recorded ones (the test make, rsync and git's index use), without reading it; when either
differs the digest decides, so a copied or touched but identical file is not encoded again,
while a regenerated one (``rlcap data shapes --seed 1`` rewrites every PNG) is.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import NamedTuple

from rlcap.data.embedded import EmbeddedImage
from rlcap.errors import DataError

_CHUNK = 1 << 20  # bytes read at a time while hashing


class ImageFingerprint(NamedTuple):
    size: int  # bytes; -1 when unknown
    mtime_ns: int  # modification time, ns since the epoch; -1 when unknown
    digest: str  # hex BLAKE2b-128 of the file's bytes; "" when unknown

    @property
    def known(self) -> bool:
        return bool(self.digest)


# Rows written without a fingerprint (by an older rlcap, or by a writer given none).
UNKNOWN = ImageFingerprint(-1, -1, "")


def file_stat(path: str | Path | EmbeddedImage) -> tuple[int, int] | None:
    """(size, mtime_ns) of ``path``, or None when it is not a readable file (a picture stored in a dataset file:
    its bytes' size and its dataset file's time)."""
    try:
        if isinstance(path, EmbeddedImage):
            return path.stat()
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def content_digest(path: str | Path | EmbeddedImage) -> str:
    """Hex BLAKE2b-128 of the bytes of ``path``; :class:`DataError` naming it if unreadable."""
    digest = hashlib.blake2b(digest_size=16)
    if isinstance(path, EmbeddedImage):
        digest.update(path.read())
        return digest.hexdigest()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise DataError(f"cannot read image {path}: {exc.strerror or exc}") from exc
    return digest.hexdigest()


def fingerprint(path: str | Path | EmbeddedImage) -> ImageFingerprint:
    """Fingerprint of ``path`` now: stat first, so a write racing the hash shows as a change later."""
    stat = file_stat(path)
    if stat is None:
        raise DataError(f"image not found: {path}")
    return ImageFingerprint(stat[0], stat[1], content_digest(path))


def is_unchanged(stored: ImageFingerprint, path: str | Path | EmbeddedImage) -> tuple[bool, ImageFingerprint]:
    """Whether ``path`` still holds the image ``stored`` describes, and its fingerprint now.

    Reads the file only when its size or modification time differ from the stored ones. An unknown
    stored fingerprint never matches. Call only for files that exist (see :func:`file_stat`).
    """
    stat = file_stat(path)
    if stat is None:
        raise DataError(f"image not found: {path}")
    if stored.known and (stored.size, stored.mtime_ns) == stat:
        return True, stored
    now = ImageFingerprint(stat[0], stat[1], content_digest(path))
    return stored.known and now.digest == stored.digest, now
