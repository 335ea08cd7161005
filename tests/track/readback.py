"""What the trackers stored, read back: a W&B offline run's ``.wandb`` files (the LevelDB-style log of protobuf
records ``wandb sync`` sends; this wandb ships no reader of them, rlcap's is used), MLflow through ``MlflowClient``, Trackio's database
through its storage class (in a child process whose ``TRACKIO_DIR`` is the test's folder)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

def wandb_records(path: Path) -> list[Any]:
    """The protobuf records of one ``run-<id>.wandb`` file, read by rlcap's reader of W&B's log
    (:func:`rlcap.track.wandb_log.records`, what a resumed run reads too: the scalars the tests compare with what
    the run logged check it)."""
    from rlcap.track.wandb_log import records

    assert path.read_bytes()[:4] == b":W&B"
    return records(path)


def _finished(path: Path, timeout: float = 30.0) -> list[Any]:
    """The records of a segment, once W&B's service has written its last (``exit``): ``finish`` may return before."""
    deadline = time.time() + timeout
    while True:
        records = wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.time() > deadline:
            return records
        time.sleep(0.1)


class WandbRun:
    """Every offline segment of one W&B run (a resumed run writes one more) under ``OUT/wandb``."""

    def __init__(self, out_dir: Path):
        self.files = sorted((out_dir / "wandb").glob("offline-run-*/run-*.wandb"))
        self.ids = {f.stem.removeprefix("run-") for f in self.files}
        self.history: list[dict[str, Any]] = []
        self.config: dict[str, Any] = {}
        self.artifacts: dict[str, dict[str, Path]] = {}
        for f in self.files:
            for r in _finished(f):
                kind = r.WhichOneof("record_type")
                if kind == "history":
                    self.history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                         for item in r.history.item})
                elif kind == "artifact":  # (a table's pictures and rows: staged by W&B until `wandb sync` sends them)
                    self.artifacts[r.artifact.name] = {c.path: Path(c.local_path) for c in r.artifact.manifest.contents}
                elif kind == "config":
                    self.config.update({u.key: json.loads(u.value_json) for u in r.config.update})
        self.tables = sorted((out_dir / "wandb").glob("offline-run-*/files/media/table/val/captions_*.table.json"))

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) of ``key`` in the order logged."""
        return [(h["_step"], h[key]) for h in self.history if key in h]


def mlflow_series(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
