"""Trackio, local: its own store (Trackio's folder, ``trackio show`` opens its dashboard); the run's name is its
id, and a resumed run continues the Trackio run of that name."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rlcap.track.base import CAPTION_COLUMNS, CaptionRow, Opening, need, quiet


class TrackioTracker:
    name = "trackio"

    def __init__(self, opening: Opening):
        self._trackio = need("trackio", "trackio")
        name = opening.run_id or f"{opening.name}-{time.strftime('%Y%m%d-%H%M%S')}"  # a new run: a new name
        with quiet("trackio"):
            self._run = self._trackio.init(project=opening.project, name=name, resume="allow", embed=False,
                                           auto_log_cpu=False, auto_log_gpu=False)
        self.run_id = name
        self.held: set[tuple[str, int]] = set()
        if opening.run_id:
            from trackio.sqlite_storage import SQLiteStorage

            for row in SQLiteStorage.get_logs(opening.project, name):
                self.held.update((key.partition("/")[0], row["step"]) for key in row if key.count("/") == 1)
    def log_scalars(self, values: dict[str, float], step: int) -> None:
        self._run.log(values, step=step)

    def log_config(self, settings: dict[str, Any]) -> None:
        self._run.config.update(settings)

    def log_captions(self, rows: list[CaptionRow], step: int) -> None:
        data = [[self._trackio.Image(r.picture) if r.picture is not None else None, r.image_id, r.caption,
                 r.scores_text(), r.reference] for r in rows]
        self._run.log({"val/captions": self._trackio.Table(columns=list(CAPTION_COLUMNS), data=data)}, step=step)

    def log_artifacts(self, files: dict[str, Path]) -> None:
        pass  # Trackio's local store keeps metrics and media, not a run's files

    def close(self) -> None:
        with quiet("trackio"):
            self._run.finish()
