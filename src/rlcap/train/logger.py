"""Run logs: one JSON object per line in ``log.jsonl`` (written through :mod:`rlcap.files`: a full
disk is one line, never half a record), mirrored to the run's trackers (rlcap.track: TensorBoard, W&B, MLflow,
Trackio).

A step's statistics stay where they were computed and are read on the host once per log line. A method's
step returns its statistics as a dict of 0-d tensors (the loss, the mean reward, ...) and host numbers
(the timings). Reading a device tensor's value stops the host until the device has done everything
queued before it (rlcap.host_sync), so the statistics are read only when a line is logged, all in one
transfer. The check that the loss stayed finite goes with them: :class:`LossWatch` keeps the first step
whose loss was not, on the device, and is read at log lines and before any checkpoint is written, so a
diverged run stops there and never saves the weights it broke.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from rlcap.errors import RlcapError
from rlcap.files import append_text, write_text
from rlcap.host_sync import on_host, to_host
from rlcap.run_config import RunConfig
from rlcap.track.base import CaptionRow
from rlcap.track.config import TrackConfig
from rlcap.track.fanout import Trackers, is_number
from rlcap.track.settings import run_settings
from rlcap.train.checkpoint import is_complete, last_checkpoint_line

log = logging.getLogger(__name__)

# a note's ``learns_from`` for a method whose reward is its own (not reward.weights: [Chaffin24]'s retrieval reward
# and discriminator, HRL's plain-CIDEr prefixes)
OWN_REWARD = "its own"


class RunLogger:
    """Appends ``{"step", "split", ...}`` records; on resume, drops records past the checkpoint. Every number of a
    record goes to the run's trackers too (``track``: rlcap.track), as ``split/key`` at the same step."""

    def __init__(self, out_dir: str | Path, track: TrackConfig, resume_step: int | None = None,
                 settings: dict[str, Any] | None = None):
        self.path = Path(out_dir) / "log.jsonl"
        if resume_step is None:
            write_text(self.path, "")
        else:
            self._truncate_after(resume_step)
        old = read_log(self.path) if self.path.exists() else []
        self._notes = {r.get("text") for r in old if r.get("split") == "note"}
        self.track = track
        # (a tracker that cannot start stops the run here, before its first step, unless track.required is false)
        self.trackers = Trackers(out_dir, track, resume_step, run_settings(settings or {}))
        self.trackers.replay(old)  # (a resumed run's: what a continued tracker run lacks of the log so far)

    def _truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        write_text(self.path, "".join(line + "\n" for line in kept))

    def note(self, text: str, samples_per_image: int | None = None,
             learns_from: dict[str, float] | str | None = None) -> None:
        """A free-text line for the record (e.g. the conventions that change the numbers); a resumed
        run does not repeat a note its log already holds. ``samples_per_image``: the captions the run samples per
        image, recorded with the note that states its sampling (the report's "samples per image");
        ``learns_from``: the reward the run learns from, recorded with it (its ``reward.weights``, or
        :data:`OWN_REWARD` for a method whose reward is its own: the report's "reward")."""
        log.info("%s", text)
        if text in self._notes:
            return
        self._notes.add(text)
        drawn = {} if samples_per_image is None else {"samples_per_image": samples_per_image}
        learned = {} if learns_from is None else {"learns_from": learns_from}
        self.write(0, "note", {"text": text, **drawn, **learned})

    def write(self, step: int, split: str, values: dict[str, Any]) -> None:
        """One record; ``time`` (Unix seconds) is added for the training cost the benchmarks report."""
        record = {"step": step, "split": split, **values, "time": round(time.time(), 3)}
        append_text(self.path, json.dumps(record) + "\n")
        numbers = {k: v for k, v in values.items() if is_number(v)}
        if numbers and split != "note" and self.trackers.open:
            self.trackers.log_scalars(split, numbers, step)

    def captions(self, step: int, rows: Callable[[], list[CaptionRow]]) -> None:
        """The validation's caption table (``rows()``, built only when ``track.captions`` asks and a tracker is open)."""
        if self.track.captions and self.trackers.open:
            self.trackers.log_captions(rows(), step)

    def close(self) -> None:
        self.trackers.close()


def read_log(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


class SilentLogger:
    """The logger of a process that does not write the run's log (a rank other than 0 under torchrun)."""

    def note(self, text: str, samples_per_image: int | None = None,
             learns_from: dict[str, float] | str | None = None) -> None:
        log.debug("%s", text)

    def write(self, step: int, split: str, values: dict[str, Any]) -> None:
        pass

    def captions(self, step: int, rows: Callable[[], list[CaptionRow]]) -> None:
        pass

    def close(self) -> None:
        pass


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


def check_finite_loss(watch: LossWatch, cfg: RunConfig, out_dir: Path) -> None:
    """Stop with :func:`diverged` if any step's loss so far was NaN or infinite (one read of the watch)."""
    bad = watch.first_bad()
    if bad is not None:
        raise diverged(cfg, out_dir, *bad)


def diverged(cfg: RunConfig, out_dir: Path, step: int, loss: float) -> RlcapError:
    """The one line a run that diverged stops with: the step, the loss, its checkpoint (resume=true continues from
    it) or that it has none (the command run again starts afresh, with other settings too), what to try."""
    optim = cfg.optim
    tries = (f"Try a lower optim.lr (this run: {optim.lr:g}) or optim.grad_clip (this run: {optim.grad_clip:g}, "
             "0: none)")
    if is_complete(Path(out_dir) / "last"):
        then = (f"{last_checkpoint_line(out_dir)}. {tries}, then the same command with resume=true continues from "
                "that checkpoint")
    else:
        then = f"it saved no checkpoint. {tries}: the command run again starts afresh in {out_dir}"
    return RlcapError(f"the {cfg.algorithm} loss became {loss} at step {step}: the run diverged and stops; {then}")
