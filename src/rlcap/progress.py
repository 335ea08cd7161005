"""Progress of long work: a bar on a terminal, periodic log lines everywhere else.

A progress bar redraws itself with carriage returns, which a log file redirected from stderr
keeps as one huge line. So bars are drawn only when stderr is a terminal; otherwise
:class:`LogProgress` writes a line through ``logging`` every 10% of the work and at least every
30 seconds, which a redirected log shows as plain lines.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class Progress(Protocol):
    def update(self, n: int = 1) -> None: ...


def stderr_is_terminal() -> bool:
    """Whether progress bars can be drawn (stderr is a terminal, not a file or a pipe)."""
    return sys.stderr is not None and sys.stderr.isatty()


class LogProgress:
    """``update(n)`` counts work done; a log line at every ``fraction`` of ``total`` and at least
    every ``seconds`` while work goes on, and one at the end (:meth:`close`)."""

    def __init__(self, total: int, desc: str, unit: str = "it", fraction: float = 0.1, seconds: float = 30.0):
        self.total, self.desc, self.unit = total, desc, unit
        self.n = 0
        self._step = max(1, round(total * fraction))
        self._next = self._step
        self._seconds = seconds
        self._start = self._last = time.monotonic()
        self._logged_at = -1

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if self.n >= self._next or now - self._last >= self._seconds:
            self._log(now)
            while self._next <= self.n:
                self._next += self._step

    def _log(self, now: float) -> None:
        elapsed = now - self._start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        log.info("%s: %d/%d %s%s, %.1f %s/s", self.desc, self.n, self.total, self.unit, share, rate, self.unit)
        self._last, self._logged_at = now, self.n

    def close(self) -> None:
        if self._logged_at != self.n and self.n:
            self._log(time.monotonic())


@contextmanager
def progress(total: int, desc: str, unit: str = "it", leave: bool = True) -> Iterator[Progress]:
    """A tqdm bar when stderr is a terminal, else a :class:`LogProgress`; call ``.update(n)``."""
    if stderr_is_terminal():
        from tqdm.auto import tqdm

        with tqdm(total=total, desc=desc, unit=unit, leave=leave) as bar:
            yield bar
        return
    counter = LogProgress(total, desc, unit)
    try:
        yield counter
    finally:
        counter.close()


def track(items: Iterable[T], total: int, desc: str, unit: str = "it", leave: bool = True) -> Iterator[T]:
    """``items`` one by one, counted by :func:`progress`."""
    with progress(total, desc, unit, leave) as bar:
        for item in items:
            yield item
            bar.update(1)
