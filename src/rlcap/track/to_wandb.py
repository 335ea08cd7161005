"""Weights & Biases, offline by default (its ``settings``' mode: the run is written under ``OUT/wandb`` and
``wandb sync`` sends it later); a resumed run continues the W&B run of the recorded id."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rlcap.track.base import CAPTION_COLUMNS, CaptionRow, Opening, need
from rlcap.track.wandb_log import held_steps


class WandbTracker:
    name = "wandb"

    def __init__(self, opening: Opening):
        self._wandb = need("wandb", "wandb")
        settings = self._wandb.Settings(mode=opening.wandb_mode, console="off", silent=True, x_disable_stats=True,
                                        x_disable_meta=True, git_remote="")
        if opening.run_id:
            after_last_segment(opening.out_dir / "wandb", opening.run_id)
        self._run = self._wandb.init(project=opening.project, name=opening.name, id=opening.run_id,
                                     resume="allow" if opening.run_id else None, dir=str(opening.out_dir),
                                     settings=settings, reinit="create_new")
        self.run_id = self._run.id
        self.held = held_steps(opening.out_dir / "wandb", self.run_id) if opening.run_id else set()

    def log_scalars(self, values: dict[str, float], step: int) -> None:
        self._run.log(values, step=step)

    def log_config(self, settings: dict[str, Any]) -> None:
        self._run.config.update(settings, allow_val_change=True)

    def log_captions(self, rows: list[CaptionRow], step: int) -> None:
        table = self._wandb.Table(columns=list(CAPTION_COLUMNS))
        for r in rows:
            picture = self._wandb.Image(r.picture) if r.picture is not None else None
            table.add_data(picture, r.image_id, r.caption, r.scores_text(), r.reference)
        self._run.log({"val/captions": table}, step=step)

    def log_artifacts(self, files: dict[str, Path]) -> None:
        artifact = self._wandb.Artifact(f"{self._run.id}-files", type="run-files")
        for name, path in files.items():
            if path.is_dir():
                artifact.add_dir(str(path), name=name)
            else:
                artifact.add_file(str(path), name=name)
        self._run.log_artifact(artifact)

    def close(self) -> None:
        self._run.finish()


def after_last_segment(wandb_dir: Path, run_id: str) -> None:
    """Wait, if need be, for the second after the one the run's last segment started in: W&B names a segment's folder
    by that second (``offline-run-YYYYmmdd_HHMMSS-<id>``), and a segment started in the same second would write into
    the last one's."""
    for _ in range(20):
        now = {time.strftime("%Y%m%d_%H%M%S", clock(time.time())) for clock in (time.localtime, time.gmtime)}
        if not any(wandb_dir.glob(f"*run-{stamp}-{run_id}") for stamp in now):
            return
        time.sleep(0.1)
