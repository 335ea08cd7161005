"""A step's statistics kept where they were computed, read on the host once per log line.

A method's step returns its statistics as a dict of 0-d tensors (the loss, the mean reward, ...) and
host numbers (the timings). Reading a device tensor's value stops the host until the device has done
everything queued before it (rlcap.host_sync), so the statistics are read only when a line is logged,
all in one transfer. The check that the loss stayed finite goes with them: :class:`LossWatch` keeps
the first step whose loss was not, on the device, and is read at log lines and before any checkpoint
is written, so a diverged run stops there and never saves the weights it broke.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rlcap.errors import RlcapError
from rlcap.host_sync import on_host, to_host
from rlcap.train.checkpoint import last_checkpoint_line

if TYPE_CHECKING:
    from rlcap.train.session import Session

Stat = float | torch.Tensor  # a statistic: a host number, or a 0-d tensor read at the next log line
Stats = dict[str, "float | int | torch.Tensor"]


@dataclass
class LossWatch:
    """The first step whose loss was NaN or infinite, and that loss; found without a host read per step.

    Host numbers are checked at once; a tensor loss updates two 0-d device tensors (the step, -1 while
    every loss was finite, and its value), read by :meth:`first_bad` with the next log line or save."""

    step: torch.Tensor | None = None   # () long: the first bad step, -1: none
    value: torch.Tensor | None = None  # () float: its loss
    host: tuple[int, float] | None = None

    def update(self, loss: float | torch.Tensor, step: int) -> None:
        if not isinstance(loss, torch.Tensor):
            if self.host is None and not math.isfinite(loss):
                self.host = (step, float(loss))
            return
        loss = loss.detach().float().reshape(())
        if self.step is None:
            self.step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self.value = torch.zeros((), device=loss.device)
        new = (self.step < 0) & ~torch.isfinite(loss)
        self.step = torch.where(new, step, self.step)
        self.value = torch.where(new, loss, self.value)

    def pending(self) -> list[torch.Tensor]:
        """The device values :meth:`first_bad` reads (to join another read's transfer)."""
        return [] if self.step is None else [self.step.float(), self.value]

    def first_bad(self, read: list[float] | None = None) -> tuple[int, float] | None:
        """(step, loss) of the first non-finite loss, or None; ``read``: :meth:`pending`'s values, read already."""
        if self.host is not None:
            return self.host
        if self.step is None:
            return None
        step, value = read if read is not None else read_tensors(self.pending())
        return (int(step), value) if step >= 0 else None


def read_tensors(tensors: list[torch.Tensor]) -> list[float]:
    """The values of 0-d tensors on the host, in one transfer."""
    if not tensors:
        return []
    stacked = torch.stack([t.detach().float().reshape(()) for t in tensors])
    host = to_host(stacked)
    with on_host():
        return host.tolist()


def read_stats(values: Stats, watch: LossWatch) -> tuple[dict[str, float], tuple[int, float] | None]:
    """A step's statistics as host numbers and the watch's first bad loss, read in one transfer."""
    names = [k for k, v in values.items() if isinstance(v, torch.Tensor)]
    pending = watch.pending()
    read = read_tensors([values[k] for k in names] + pending)
    host = {k: (read[names.index(k)] if k in names else v) for k, v in values.items()}
    return host, watch.first_bad(read[len(names):] if pending else None)


def check_finite_loss(session: Session) -> None:
    """Stop with :func:`diverged` if any step's loss so far was NaN or infinite (one read of the watch)."""
    bad = session.watch.first_bad()
    if bad is not None:
        raise diverged(session, *bad)


def diverged(session: Session, step: int, loss: float) -> RlcapError:
    """The one line a run that diverged stops with: the step, the loss, its checkpoint, what to try."""
    optim = session.cfg.optim
    return RlcapError(f"the {session.cfg.algorithm} loss became {loss} at step {step}: the run "
                      f"diverged and stops; {last_checkpoint_line(session.out_dir)}. Try a lower optim.lr (this run: "
                      f"{optim.lr:g}) or optim.grad_clip (this run: {optim.grad_clip:g}, 0: none), then the same "
                      "command with resume=true continues from that checkpoint")
