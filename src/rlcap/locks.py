"""One writer at a time: a lock on a run folder (``rlcap train``) or a feature store (``rlcap features``).

The lock is ``fcntl.flock`` on a lock file (``OUT/.lock`` for a run folder, ``feats.h5.lock``
beside a store) that records the holder's PID, host and start time. The kernel releases a flock
when its process ends, however it ends, so a lock is never held by a process that is gone: the
file a SIGKILL leaves behind is stale, and the next process takes it over with a log line naming
the process that left it. A process that finds the lock held stops at once, with one line naming
the holder's PID and host. Released on any exit of the ``with`` block (return, exception, Ctrl-C,
SIGTERM where the CLI turns it into an exception); the lock file is then removed.

Why flock rather than a PID file alone or the ``filelock`` package: a PID file needs a liveness
check that PID reuse and other hosts defeat, while flock is released by the kernel itself; and
``filelock`` (not a dependency of rlcap) neither records nor reports the holder.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlcap.errors import RlcapError
from rlcap.files import new_folders, write_error

log = logging.getLogger(__name__)

RUN_LOCK = ".lock"  # inside a run folder


class LockedError(RlcapError):
    """Another process holds the lock."""


def _holder(fd: int) -> dict:
    """What the lock file says of its holder ({} when empty or unreadable)."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8")
        return json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return {}


def _describe(holder: dict) -> str:
    if not holder:
        return "another process (it has not recorded its PID yet)"
    return f"PID {holder.get('pid')} on host {holder.get('host')}"


def _open_locked(lock: Path, what: str) -> int:
    """Open ``lock`` and take its flock; raise :class:`LockedError` when another process holds it."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise write_error(lock.parent, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            for _ in range(20):  # a new holder writes its PID just after it takes the lock
                if holder:
                    break
                time.sleep(0.01)
                holder = _holder(fd)
            os.close(fd)
            raise LockedError(f"{what} is in use by {_describe(holder)}: wait for that process to end, "
                              f"or stop it (its lock: {lock})") from None
        try:  # the file we locked may have been removed by a holder releasing it in between: retry
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@contextmanager
def hold(lock: str | Path, what: str) -> Iterator[None]:
    """Hold the lock file ``lock`` (its folder must exist) for the ``with`` block; ``what`` names
    the thing it guards in the refusal (one line with the holder's PID and host)."""
    lock = Path(lock)
    fd = _open_locked(lock, what)
    try:
        stale = _holder(fd)
        if stale:
            log.info("taking over the lock of %s: %s ended without releasing it (killed?)", what, _describe(stale))
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode("utf-8"), 0)
    except OSError as exc:  # a full disk: the lock cannot say who holds it, and nothing else would fit either
        lock.unlink(missing_ok=True)
        os.close(fd)
        raise write_error(lock.parent, exc) from None
    except BaseException:
        os.close(fd)
        raise
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)  # while still held: a waiting process then retries on a new file
        os.close(fd)                  # (releases the flock)


@contextmanager
def hold_run_folder(out_dir: str | Path) -> Iterator[None]:
    """The lock of a run folder (created if missing), held while a training writes into it. A run that
    fails leaving the folders it made empty (refused before it wrote anything) leaves no folder behind."""
    with new_folders(out_dir) as out, hold(out / RUN_LOCK, f"run folder {out}"):
        yield


def store_lock(path: str | Path) -> Path:
    """The lock file of the feature store ``path``: ``path.lock`` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".lock")
