"""SIGTERM (a scheduler's ``kill PID``) stops a long command as Ctrl-C does, so that it can say where it
stopped and how to continue, instead of ending without a word."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is so that it stops as on Ctrl-C."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """For the block, SIGTERM raises :class:`Terminated` (a KeyboardInterrupt)."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def how_stopped(exc: KeyboardInterrupt) -> tuple[str, int]:
    """("terminated", 143) for SIGTERM, ("interrupted", 130) for Ctrl-C: the word and the exit code."""
    return ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
