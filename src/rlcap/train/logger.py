"""Run logs: one JSON object per line in ``log.jsonl`` (written through :mod:`rlcap.files`: a full
disk is one line, never half a record), mirrored to TensorBoard."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from rlcap.files import append_text, write_text

log = logging.getLogger(__name__)


class RunLogger:
    """Appends ``{"step", "split", ...}`` records; on resume, drops records past the checkpoint."""

    def __init__(self, out_dir: str | Path, tensorboard: bool, resume_step: int | None = None):
        self.path = Path(out_dir) / "log.jsonl"
        tb_dir = Path(out_dir) / "tensorboard"
        if resume_step is None:
            write_text(self.path, "")
            if tb_dir.is_dir():  # a fresh run's curves must not mix with an old run's
                import shutil

                shutil.rmtree(tb_dir)
        else:
            self._truncate_after(resume_step)
        old = read_log(self.path) if self.path.exists() else []
        self._notes = {r.get("text") for r in old if r.get("split") == "note"}
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # On resume, TensorBoard drops the old event files' records after the checkpoint's step.
            purge = None if resume_step is None else resume_step + 1
            self._tb = SummaryWriter(str(tb_dir), purge_step=purge)

    def _truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        write_text(self.path, "".join(line + "\n" for line in kept))

    def note(self, text: str) -> None:
        """A free-text line for the record (e.g. the conventions that change the numbers); a resumed
        run does not repeat a note its log already holds."""
        log.info("%s", text)
        if text in self._notes:
            return
        self._notes.add(text)
        self.write(0, "note", {"text": text})

    def write(self, step: int, split: str, values: dict[str, Any]) -> None:
        """One record; ``time`` (Unix seconds) is added for the training cost the benchmarks report."""
        record = {"step": step, "split": split, **values, "time": round(time.time(), 3)}
        append_text(self.path, json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(f"{split}/{key}", value, step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_log(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


class SilentLogger:
    """The logger of a process that does not write the run's log (a rank other than 0 under torchrun)."""

    def note(self, text: str) -> None:
        log.debug("%s", text)

    def write(self, step: int, split: str, values: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass
