"""The ``track`` section of the run config: which trackers a run logs to and what it sends them."""

from __future__ import annotations

from dataclasses import dataclass

from rlcap.config import help_field
from rlcap.errors import ConfigError

TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio")
WANDB_MODES = ("offline", "online")


@dataclass
class TrackConfig:
    to: list[str] = help_field(
        ["tensorboard"], "the trackers the run logs to besides log.jsonl, any of " + ", ".join(TRACKERS)
        + " ([]: log.jsonl only); each but TensorBoard is an extra (pip install 'rlcap[wandb]'); docs/TRAINING.md, "
        "\"Trackers\"")
    required: bool = help_field(
        True, "a tracker that cannot start stops the run before its first step (false: the run goes on without "
              "it, with one warning); a tracker failing later is always one warning, and the run goes on")
    captions: int = help_field(
        8, "at each validation, a table of this many fixed validation pictures (the first of the split) with "
           "their greedy captions, per-caption scores and a reference, for the trackers that keep tables (0: none)")
    artifacts: bool = help_field(
        False, "at the end of the run, write OUT/report.html and send it and best/hf/ (if any) to the trackers that "
               "keep files (W&B artifacts, MLflow artifacts): they can be large")
    project: str = help_field("rlcap", "the W&B project, MLflow experiment and Trackio project the run goes to")
    name: str = help_field("", "the run's name in the trackers (empty: the run folder's name)")
    wandb_mode: str = help_field("offline", "W&B's mode: offline (written under OUT/wandb, `wandb sync` sends it "
                                            "later) or online")
    mlflow_uri: str = help_field(
        "", "MLflow's tracking URI: a server (http://host:port) or a database (sqlite:///path.db); empty: "
            "sqlite:///OUT/mlflow.db, its artifacts in OUT/mlartifacts")

    def validate(self) -> None:
        unknown = [name for name in self.to if name not in TRACKERS]
        if unknown:
            raise ConfigError(f"track.to: {unknown[0]!r} is not one of {list(TRACKERS)}")
        if len(set(self.to)) != len(self.to):
            raise ConfigError(f"track.to: a tracker is named twice in {self.to}")
        if self.captions < 0:
            raise ConfigError(f"track.captions: expected at least 0, got {self.captions}")
        if self.wandb_mode not in WANDB_MODES:
            raise ConfigError(f"track.wandb_mode: {self.wandb_mode!r} is not one of {list(WANDB_MODES)}")
