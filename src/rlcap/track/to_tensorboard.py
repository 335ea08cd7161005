"""TensorBoard: event files in ``OUT/tensorboard``; a resumed run drops the old records past its checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from rlcap.track.base import CaptionRow, Opening, need


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, opening: Opening):
        tensorboard = need("torch.utils.tensorboard", "tensorboard")
        folder = opening.out_dir / "tensorboard"
        if opening.resume_step is None and folder.is_dir():  # a fresh run's curves must not mix with an old run's
            shutil.rmtree(folder)
        # On resume, TensorBoard drops the old event files' records after the checkpoint's step.
        purge = None if opening.resume_step is None else opening.resume_step + 1
        self._writer = tensorboard.SummaryWriter(str(folder), purge_step=purge)
        self.run_id = str(folder)
        self.held: set[tuple[str, int]] = set()  # (it drops what a resumed run writes again: it holds none of that)

    def log_scalars(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self._writer.add_scalar(key, value, step)

    def log_config(self, settings: dict[str, Any]) -> None:
        self._writer.add_text("settings", "```\n" + json.dumps(settings, indent=1, default=str) + "\n```", 0)

    def log_captions(self, rows: list[CaptionRow], step: int) -> None:
        import numpy as np

        lines = ["| id | caption | scores | reference |", "|---|---|---|---|"]
        lines += [f"| {r.image_id} | {r.caption} | {r.scores_text()} | {r.reference} |" for r in rows]
        self._writer.add_text("captions", "\n".join(lines), step)
        for row in rows:
            if row.picture is not None:
                self._writer.add_image(f"captions/{row.image_id}", np.asarray(row.picture.convert("RGB")), step,
                                       dataformats="HWC")

    def log_artifacts(self, files: dict[str, Path]) -> None:
        pass  # TensorBoard keeps no files

    def close(self) -> None:
        self._writer.close()
