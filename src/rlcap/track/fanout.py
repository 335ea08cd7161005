"""The trackers a run logs to, opened together (:class:`Trackers`): their run ids recorded in ``OUT/trackers.json``
and given back when the run resumes, each record sent once, a tracker's failure one warning.

A tracker that cannot start stops the run before its first step (``track.required``), so that nothing trains
unwatched by surprise; with ``track.required: false`` the run goes on without it. One that fails later (its
network, its disk) is named in one warning and left out for the rest of the run: the run, its log and its
checkpoints go on.

A resumed run continues each tracker's run and trusts what that run holds, not what was sent: W&B and Trackio write
from a process of their own, and a kill loses what they had not written yet. Each continued tracker says which
(split, step) it holds (:attr:`Tracker.held`); the log's records up to the checkpoint that it lacks are sent again
(:meth:`Trackers.replay`), and a record it holds already is not sent twice (past the checkpoint, the resumed run
computes the same values again: a resume is exact). TensorBoard drops a resumed run's records past the checkpoint
and takes them again. The caption tables are not in the log: ``trackers.json`` records the last step of one sent."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

from rlcap.errors import RlcapError
from rlcap.files import write_json
from rlcap.track.base import CaptionRow, Opening, Tracker
from rlcap.track.config import TrackConfig
from rlcap.track.to_mlflow import MlflowTracker
from rlcap.track.to_tensorboard import TensorBoardTracker
from rlcap.track.to_trackio import TrackioTracker
from rlcap.track.to_wandb import WandbTracker

log = logging.getLogger(__name__)

RECORD = "trackers.json"  # in the run folder: {"ids": {tracker: run id}, "sent": {"captions": last step sent}}
TRACKERS: dict[str, Callable[[Opening], Tracker]] = {
    "tensorboard": TensorBoardTracker, "wandb": WandbTracker, "mlflow": MlflowTracker, "trackio": TrackioTracker}
REWRITES = ("tensorboard",)  # trackers that drop a resumed run's records past its checkpoint and take them again
KEEP_FILES = ("wandb", "mlflow")  # the trackers that keep a run's files (track.artifacts)
CAPTIONS = "captions"        # the caption tables' key in "sent"


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_record(out_dir: Path) -> dict[str, Any]:
    path = out_dir / RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"ids": {}, "sent": {}}


class Trackers:
    """The run's open trackers (rank 0's). ``resume_step``: the checkpoint's step a resumed run continues from
    (None: a fresh run, whose trackers start new runs); ``settings``: what :meth:`Tracker.log_config` sends at each
    opening (W&B and Trackio keep the latest value of a key, MLflow its first: its params never change)."""

    def __init__(self, out_dir: str | Path, cfg: TrackConfig, resume_step: int | None, settings: dict[str, Any]):
        self.out_dir, self.cfg = Path(out_dir), cfg
        record = read_record(self.out_dir) if resume_step is not None else {"ids": {}, "sent": {}}
        self.ids: dict[str, str] = dict(record["ids"])  # (a tracker left out this time keeps its run for the next)
        self.sent: dict[str, int] = dict(record["sent"])
        self.open: dict[str, Tracker] = {}
        self.continued: set[str] = set()  # the trackers whose recorded run this run continues
        for name in cfg.to:
            recorded = record["ids"].get(name)
            opening = Opening(self.out_dir, cfg.project, cfg.name or self.out_dir.resolve().name, recorded,
                              cfg.wandb_mode, cfg.mlflow_uri, resume_step)
            tracker = self._start(name, opening)
            if tracker is None:
                continue
            self.open[name], self.ids[name] = tracker, tracker.run_id
            if recorded is not None:
                self.continued.add(name)
            # (again for a continued run: a kill may have lost it; each tracker keeps one value per key)
            self._call(name, lambda t: t.log_config(settings))
        self._save()

    def _start(self, name: str, opening: Opening) -> Tracker | None:
        try:
            return TRACKERS[name](opening)
        except Exception as exc:  # (whatever the tracker's package raises: its network, its files, its settings)
            why = str(exc) if isinstance(exc, RlcapError) else f"{name} could not start: {type(exc).__name__}: {exc}"
            if self.cfg.required:
                raise RlcapError(f"{why}; the run stops before training (track.required=false goes on without "
                                 f"{name})") from exc
            log.warning("%s; the run goes on without it (track.required=false)", why)
            return None

    def _call(self, name: str, call: Callable[[Tracker], None]) -> None:
        """``call(tracker)``; a failure is one warning and the tracker is left out from then on."""
        try:
            call(self.open[name])
        except Exception as exc:  # (a tracker's failure never stops the run)
            log.warning("tracker %s failed (%s: %s): the run goes on without it", name, type(exc).__name__, exc)
            self.open.pop(name)

    def _save(self) -> None:
        write_json(self.out_dir / RECORD, {"ids": self.ids, "sent": self.sent}, indent=1)

    def log_scalars(self, split: str, values: dict[str, float], step: int) -> None:
        """``values`` as ``split/key`` at ``step``, to every tracker that does not hold them already."""
        named = {f"{split}/{key}": value for key, value in values.items()}
        for name in list(self.open):
            if (split, step) not in self.open[name].held:
                self._call(name, lambda t: t.log_scalars(named, step))

    def replay(self, records: list[dict[str, Any]]) -> None:
        """The numbers of a resumed run's log records (up to its checkpoint) to the continued trackers that lack them."""
        for record in records:
            numbers = {k: v for k, v in record.items() if k not in ("step", "split", "time") and is_number(v)}
            if numbers and record["split"] != "note":
                for name in [n for n in self.open if n not in REWRITES and n in self.continued]:
                    if (record["split"], record["step"]) not in self.open[name].held:
                        named = {f"{record['split']}/{k}": v for k, v in numbers.items()}
                        self._call(name, lambda t: t.log_scalars(named, record["step"]))

    def log_captions(self, rows: list[CaptionRow], step: int) -> None:
        held = step <= self.sent.get(CAPTIONS, -1)
        for name in list(self.open):
            if not held or name in REWRITES:
                self._call(name, lambda t: t.log_captions(rows, step))
        if not held:
            self.sent[CAPTIONS] = step
            self._save()

    def log_artifacts(self, files: dict[str, Path]) -> None:
        for name in list(self.open):
            self._call(name, lambda t: t.log_artifacts(files))

    def close(self) -> None:
        for name in list(self.open):
            self._call(name, lambda t: t.close())
        self.open.clear()
