"""A run watched in W&B (offline) and MLflow at once, as a user runs it: a training killed with SIGKILL and resumed
continues the same tracker runs, each step there once; each validation sends the caption table of the fixed
validation pictures; ``track.artifacts`` sends the report and the model card's folder."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from rlcap import api
from rlcap.train.logger import read_log
from tests.track.readback import WandbRun, mlflow_series
from tests.train.killing import kill_after
from tests.tiny import make_tiny_dataset, tiny_overrides

pytestmark = pytest.mark.slow  # trains a tiny run in a child process, killed, then resumed


def test_a_killed_run_resumes_its_tracker_runs_with_each_step_once_and_a_caption_table_per_epoch(tmp_path,
                                                                                             monkeypatch):
    from mlflow.tracking import MlflowClient

    dataset, feats = make_tiny_dataset(tmp_path)
    for i in range(24, 30):  # the validation images' pictures (the tiny dataset names them, 24.png ...)
        Image.new("RGB", (16, 16), ("red", "blue", "green")[i % 3]).save(tmp_path / f"{i}.png")
    out = tmp_path / "run"
    overrides = tiny_overrides(dataset, feats, out, **{"xe.epochs": 3, "track.to": "[wandb,mlflow]",
                                                       "track.captions": 2, "save_every": 4,
                                                       "track.artifacts": "true"})
    # the child starts a W&B service of its own, as a command run from a shell does (a test before this one may
    # have started one in this process, which W&B names to its children: the killed run would stay open in it)
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    killed_at = kill_after(overrides, out, 4)
    assert killed_at < 18  # (3 epochs of 6 steps)
    ids = json.loads((out / "trackers.json").read_text())["ids"]
    api.train(api.load_run_config(None, overrides), resume=True)
    assert json.loads((out / "trackers.json").read_text())["ids"] == ids
    steps = [r["step"] for r in read_log(out / "log.jsonl") if r["split"] == "train"]
    assert steps == list(range(1, 19))

    run = WandbRun(out)
    # one W&B run, written in three segments: the killed run's, the resumed run's, track.artifacts'
    assert run.ids == {ids["wandb"]} and len(run.files) == 3
    assert sorted(s for s, _ in run.series("train/loss")) == steps
    assert [s for s, _ in run.series("val/CIDEr")] == [6, 12, 18]
    assert run.config["algorithm"] == "xe" and "versions.torch" in run.config and "machine.cpus" in run.config

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    assert [s for s, _ in mlflow_series(client, ids["mlflow"], "train/loss")] == steps
    losses = {r["step"]: r["loss"] for r in read_log(out / "log.jsonl") if r["split"] == "train"}
    assert dict(mlflow_series(client, ids["mlflow"], "train/loss")) == pytest.approx(losses)
    assert len(client.search_runs([client.get_experiment_by_name("rlcap").experiment_id])) == 1
    tables = sorted(a.path for a in client.list_artifacts(ids["mlflow"], "captions") if a.path.endswith(".json"))
    assert tables == ["captions/step_0000006.json", "captions/step_0000012.json", "captions/step_0000018.json"]
    table = json.loads(open(client.download_artifacts(ids["mlflow"], tables[-1], str(tmp_path / "dl"))).read())
    assert [row[:2] for row in table["data"]] == [["captions/pictures/24.png", "24"], ["captions/pictures/25.png", "25"]]
    assert [row[4] for row in table["data"]] == ["A red triangle.", "A blue circle."]  # each picture's first reference
    assert all(row[2] and row[3].startswith("CIDEr-D ") for row in table["data"])  # its greedy caption, scored
    pictures = {a.path for a in client.list_artifacts(ids["mlflow"], "captions/pictures")}
    assert pictures == {"captions/pictures/24.png", "captions/pictures/25.png"}
    # track.artifacts: the report, written at the end, in both trackers that keep files
    assert "report.html" in {a.path for a in client.list_artifacts(ids["mlflow"])}
    assert (out / "report.html").is_file()
    run = WandbRun(out)
    assert "report.html" in run.artifacts[f"{ids['wandb']}-files"]
