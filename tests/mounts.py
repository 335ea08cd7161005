"""Small tmpfs mounts for the full-disk and read-only tests: real ENOSPC and EROFS from the kernel.

Mounting needs root (or CAP_SYS_ADMIN); :data:`CAN_MOUNT` probes once whether this process may,
and the tests that need a mount are marked ``skipif(not CAN_MOUNT, reason=NO_MOUNT)``."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NO_MOUNT = "needs to mount a small tmpfs (`mount -t tmpfs`), which this user may not do (run as root to include it)"


def _mount(folder: Path, size: str, read_only: bool) -> bool:
    options = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


def _umount(folder: Path) -> None:
    subprocess.run(["umount", str(folder)], check=True, capture_output=True)


def _probe() -> bool:
    with tempfile.TemporaryDirectory() as folder:
        try:
            if not _mount(Path(folder), "64k", read_only=False):
                return False
        except OSError:  # no mount command
            return False
        _umount(Path(folder))
        return True


CAN_MOUNT = _probe()


@contextmanager
def tmpfs(folder: Path, size: str = "1m", read_only: bool = False) -> Iterator[Path]:
    """``folder`` (created) as a tmpfs of ``size`` for the block, unmounted after it."""
    folder.mkdir(parents=True, exist_ok=True)
    assert _mount(folder, size, read_only), f"mounting a tmpfs on {folder} failed"
    try:
        yield folder
    finally:
        _umount(folder)
