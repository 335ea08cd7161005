"""MLflow through its client (no global active run): a server (``http://host:port``) or a database; by default
``sqlite:///OUT/mlflow.db`` with the artifacts in ``OUT/mlartifacts``. A resumed run continues the MLflow run of the
recorded id."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rlcap.track.base import CAPTION_COLUMNS, CaptionRow, Opening, need, quiet

MAX_PARAMS = 100        # MLflow takes at most this many params per call
MAX_PARAM_CHARS = 6000  # and values this long


def tracking_uri(opening: Opening) -> str:
    return opening.mlflow_uri or f"sqlite:///{(opening.out_dir / 'mlflow.db').resolve()}"


def artifacts(opening: Opening) -> str | None:
    """Where a new experiment keeps its artifacts: beside a local database (``mlartifacts/``, not the working
    directory, MLflow's default); a server's own place (None)."""
    uri = tracking_uri(opening)
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()


class MlflowTracker:
    name = "mlflow"

    def __init__(self, opening: Opening):
        tracking = need("mlflow.tracking", "mlflow")
        self._entities = need("mlflow.entities", "mlflow")
        self._client = tracking.MlflowClient(tracking_uri=tracking_uri(opening))
        self.held: set[tuple[str, int]] = set()
        if opening.run_id is not None:
            self.run_id = opening.run_id
            self._client.update_run(self.run_id, status="RUNNING")
            for key in self._client.get_run(self.run_id).data.metrics:
                history = self._client.get_metric_history(self.run_id, key)
                self.held.update((key.partition("/")[0], m.step) for m in history)
        else:
            experiment = self._client.get_experiment_by_name(opening.project)
            if experiment is not None:
                experiment_id = experiment.experiment_id
            else:
                experiment_id = self._client.create_experiment(opening.project, artifact_location=artifacts(opening))
            self.run_id = self._client.create_run(experiment_id, run_name=opening.name).info.run_id

    def log_scalars(self, values: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        metrics = [self._entities.Metric(key, float(value), now, step) for key, value in values.items()]
        self._client.log_batch(self.run_id, metrics=metrics)

    def log_config(self, settings: dict[str, Any]) -> None:
        """The settings as params; a continued run's params stay as first logged (MLflow refuses another value)."""
        kept = self._client.get_run(self.run_id).data.params
        params = [self._entities.Param(key, str(value)[:MAX_PARAM_CHARS]) for key, value in settings.items()
                  if key not in kept]
        for start in range(0, len(params), MAX_PARAMS):
            self._client.log_batch(self.run_id, params=params[start:start + MAX_PARAMS])

    def log_captions(self, rows: list[CaptionRow], step: int) -> None:
        table = {column: [] for column in CAPTION_COLUMNS}
        for r in rows:
            image = f"captions/pictures/{r.image_id}.png"
            if r.picture is not None:
                self._client.log_image(self.run_id, r.picture, artifact_file=image)
            for column, value in zip(CAPTION_COLUMNS, (image if r.picture is not None else "", r.image_id, r.caption,
                                                       r.scores_text(), r.reference)):
                table[column].append(value)
        self._client.log_table(self.run_id, data=table, artifact_file=f"captions/step_{step:07d}.json")

    def log_artifacts(self, files: dict[str, Path]) -> None:
        for name, path in files.items():
            if path.is_dir():
                self._client.log_artifacts(self.run_id, str(path), artifact_path=name)
            else:
                self._client.log_artifact(self.run_id, str(path))

    def close(self) -> None:
        with quiet("mlflow"):  # (a server's run prints its link)
            self._client.set_terminated(self.run_id)


def read_table(path: Path) -> dict[str, list[Any]]:
    """A caption table MLflow stored (``log_table``'s JSON: columns and rows) as column -> values."""
    stored = json.loads(path.read_text(encoding="utf-8"))
    return {column: [row[i] for row in stored["data"]] for i, column in enumerate(stored["columns"])}
