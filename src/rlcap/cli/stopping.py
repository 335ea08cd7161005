"""SIGTERM (a scheduler's ``kill PID``) stops a long command as Ctrl-C does, so that it can say where it
stopped and how to continue, instead of ending without a word."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

from rlcap.errors import Stopped


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


def signal_outcome(signum: int) -> tuple[str, int]:
    """("terminated", 143) for SIGTERM, ("interrupted", 130) for any other stop: the word and the exit code."""
    return ("terminated", 143) if signum == signal.SIGTERM else ("interrupted", 130)


def how_stopped(exc: KeyboardInterrupt) -> tuple[str, int]:
    """The word and exit code for a command stopped by ``exc``: SIGTERM (:class:`Terminated`, or a run's
    :class:`~rlcap.errors.Stopped` by SIGTERM) or Ctrl-C."""
    if isinstance(exc, Terminated):
        return signal_outcome(signal.SIGTERM)
    return signal_outcome(exc.signum if isinstance(exc, Stopped) else signal.SIGINT)
