"""Each tracker behind :class:`rlcap.track.fanout.Trackers`, without training: what it stored, read back with its own
tools (W&B's offline run files, MLflow's client against a local database and against a real ``mlflow server``,
Trackio's storage), the run ids that a resume reuses, each record sent once, and failures at start and mid-run."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcap.errors import RlcapError
from rlcap.track import fanout
from rlcap.track.base import CaptionRow, Opening
from rlcap.track.config import TrackConfig
from rlcap.track.fanout import Trackers, read_record
from tests.track.readback import WandbRun, mlflow_series

SETTINGS = {"optim.lr": 0.0005, "reward.weights": {"cider_d": 1.0}, "versions.rlcap": "0.1"}


def _rows():
    from PIL import Image

    return [CaptionRow("7", Image.new("RGB", (8, 6), "red"), "a red square", {"CIDEr-D": 1.25}, "a red square ."),
            CaptionRow("9", None, "a blue circle", {"CIDEr-D": 0.5}, "a small blue circle")]


def _log_a_run(out: Path, cfg: TrackConfig, resume_step: int | None = None, steps=(1, 2, 3)) -> Trackers:
    trackers = Trackers(out, cfg, resume_step, SETTINGS)
    for step in steps:
        trackers.log_scalars("train", {"loss": 1.0 / step, "lr": 0.1}, step)
    trackers.log_scalars("val", {"CIDEr": 0.75}, steps[-1])
    trackers.log_captions(_rows(), steps[-1])
    return trackers


def test_wandb_offline_run_holds_the_scalars_the_config_and_the_caption_table(tmp_path):
    trackers = _log_a_run(tmp_path, TrackConfig(to=["wandb"], project="p", name="tiny"))
    trackers.close()
    run = WandbRun(tmp_path)
    assert run.ids == {read_record(tmp_path)["ids"]["wandb"]}
    assert run.series("train/loss") == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert run.series("val/CIDEr") == [(3, 0.75)]
    assert run.config["optim.lr"] == 0.0005 and run.config["reward.weights"] == {"cider_d": 1.0}
    assert len(run.tables) == 1  # the table's entry in the run's files; its rows and pictures are its artifact's
    (files,) = [files for name, files in run.artifacts.items() if "valcaptions" in name]
    stored = json.loads(files["val/captions.table.json"].read_text())
    assert stored["columns"] == ["image", "id", "caption", "scores", "reference"]
    assert [row[1:] for row in stored["data"]] == [["7", "a red square", "CIDEr-D 1.2500", "a red square ."],
                                                   ["9", "a blue circle", "CIDEr-D 0.5000", "a small blue circle"]]
    assert stored["data"][0][0]["_type"] == "image-file" and stored["data"][1][0] is None
    assert files[stored["data"][0][0]["path"]].read_bytes()[:4] == b"\x89PNG"


def test_a_resumed_run_continues_the_tracker_runs_and_sends_each_step_once(tmp_path):
    """Killed after step 3 with its checkpoint at step 2: the resumed run opens the same W&B and MLflow runs, and
    what they hold already (step 3, computed again alike) is not sent twice; TensorBoard drops and takes it again."""
    from mlflow.tracking import MlflowClient

    cfg = TrackConfig(to=["tensorboard", "wandb", "mlflow"], name="tiny")
    first = _log_a_run(tmp_path, cfg)
    ids = read_record(tmp_path)["ids"]
    first.close()  # (a kill leaves them open; in one process W&B refuses a second run of one id while one is open)
    _log_a_run(tmp_path, cfg, resume_step=2, steps=(3, 4)).close()
    assert read_record(tmp_path)["ids"] == ids
    assert read_record(tmp_path)["sent"] == {"captions": 4}
    run = WandbRun(tmp_path)
    assert run.ids == {ids["wandb"]} and len(run.files) == 2
    assert [s for s, _ in run.series("train/loss")] == [1, 2, 3, 4]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [s for s, _ in mlflow_series(client, ids["mlflow"], "train/loss")] == [1, 2, 3, 4]
    assert len(client.search_runs([client.get_experiment_by_name("rlcap").experiment_id])) == 1


def test_mlflow_local_database_holds_scalars_params_tables_and_artifacts(tmp_path):
    from mlflow.tracking import MlflowClient

    trackers = _log_a_run(tmp_path, TrackConfig(to=["mlflow"], project="p", name="tiny"))
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "README.md").write_text("model card")
    (tmp_path / "report.html").write_text("<html></html>")
    trackers.log_artifacts({"report.html": tmp_path / "report.html", "hf": tmp_path / "hf"})
    trackers.close()
    _check_mlflow(MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}"), read_record(tmp_path)["ids"]["mlflow"],
                  tmp_path / "download")
    assert (tmp_path / "mlartifacts").is_dir()  # beside the run, not in the working directory


def _check_mlflow(client, run_id: str, download: Path) -> None:
    run = client.get_run(run_id)
    assert run.info.run_name == "tiny" and run.info.status == "FINISHED"
    assert run.data.params["optim.lr"] == "0.0005" and run.data.params["reward.weights"] == "{'cider_d': 1.0}"
    assert mlflow_series(client, run_id, "train/loss") == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert mlflow_series(client, run_id, "val/CIDEr") == [(3, 0.75)]
    files = {a.path for a in client.list_artifacts(run_id)} | {a.path for a in client.list_artifacts(run_id, "captions")}
    assert {"report.html", "hf", "captions/step_0000003.json", "captions/pictures"} <= files
    table = json.loads(Path(client.download_artifacts(run_id, "captions/step_0000003.json", str(download))).read_text())
    assert table["columns"] == ["image", "id", "caption", "scores", "reference"]
    assert table["data"][0] == ["captions/pictures/7.png", "7", "a red square", "CIDEr-D 1.2500", "a red square ."]
    card = Path(client.download_artifacts(run_id, "hf/README.md", str(download)))
    assert card.read_text() == "model card"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    """A real ``mlflow server`` on a free local port, its store and artifacts in ``tmp_path``."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination",
         str(tmp_path / "server-artifacts")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)  # (its own process group: the server and the workers it starts end together)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert server.poll() is None, "mlflow server exited"
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


@pytest.mark.slow  # (the server takes a while to start on a busy machine)
def test_mlflow_server_receives_scalars_params_tables_and_artifacts(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"
    out.mkdir()
    trackers = _log_a_run(out, TrackConfig(to=["mlflow"], name="tiny", mlflow_uri=mlflow_server))
    (out / "hf").mkdir()
    (out / "hf" / "README.md").write_text("model card")
    (out / "report.html").write_text("<html></html>")
    trackers.log_artifacts({"report.html": out / "report.html", "hf": out / "hf"})
    trackers.close()
    assert not (out / "mlflow.db").exists()
    _check_mlflow(MlflowClient(mlflow_server), read_record(out)["ids"]["mlflow"], tmp_path / "download")


TRACKIO_CHILD = """
import sys
from pathlib import Path
from rlcap.track.config import TrackConfig
from tests.track.test_trackers import _log_a_run
out = Path(sys.argv[1])
_log_a_run(out, TrackConfig(to=["trackio"], project="p", name="tiny")).close()
if len(sys.argv) > 2:
    _log_a_run(out, TrackConfig(to=["trackio"], project="p", name="tiny"), resume_step=2, steps=(3, 4)).close()
"""


def test_trackio_stores_the_scalars_locally_and_a_resume_continues_its_run(tmp_path):
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}  # (Trackio's own store, in the test's folder)
    child = subprocess.run([sys.executable, "-c", TRACKIO_CHILD, str(tmp_path), "resume"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    name = read_record(tmp_path)["ids"]["trackio"]
    read = subprocess.run([sys.executable, "-c", "import json, sys\nfrom trackio.sqlite_storage import SQLiteStorage\n"
                           "print(json.dumps(SQLiteStorage.get_logs('p', sys.argv[1]), default=str))", name],
                          env=env, capture_output=True, text=True, timeout=120)
    logs = json.loads(read.stdout.strip().splitlines()[-1])
    losses = [(r["step"], r["train/loss"]) for r in logs if "train/loss" in r]
    assert losses == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3)), (4, 0.25)]
    assert [r["step"] for r in logs if "val/captions" in r] == [3, 4]


class Broken:
    """A tracker whose ``fails`` method raises (``"start"``: its opening)."""

    name = "broken"
    fails = "start"

    def __init__(self, opening: Opening):
        if self.fails == "start":
            raise ConnectionError("no route to host")
        self.run_id, self.calls, self.held = "b1", 0, set()

    def log_scalars(self, values, step):
        self.calls += 1
        if self.fails == "log_scalars" and step == 2:
            raise OSError("disk full")

    def log_config(self, settings):
        pass

    def log_captions(self, rows, step):
        pass

    def log_artifacts(self, files):
        pass

    def close(self):
        pass


def test_a_tracker_failing_at_start_stops_the_run_unless_not_required(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(fanout.TRACKERS, "wandb", Broken)
    with pytest.raises(RlcapError, match=r"^wandb could not start: ConnectionError: no route to host; the run stops "
                                         r"before training \(track.required=false goes on without wandb\)$"):
        Trackers(tmp_path, TrackConfig(to=["wandb"]), None, SETTINGS)
    with caplog.at_level(logging.WARNING):
        trackers = Trackers(tmp_path, TrackConfig(to=["wandb", "tensorboard"], required=False), None, SETTINGS)
    assert list(trackers.open) == ["tensorboard"]
    assert "wandb could not start: ConnectionError: no route to host; the run goes on without it" in caplog.text
    trackers.close()


def test_a_tracker_failing_mid_run_is_one_warning_and_the_others_go_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(Broken, "fails", "log_scalars")
    monkeypatch.setitem(fanout.TRACKERS, "wandb", Broken)
    trackers = Trackers(tmp_path, TrackConfig(to=["wandb", "tensorboard"]), None, SETTINGS)
    broken = trackers.open["wandb"]
    with caplog.at_level(logging.WARNING):
        for step in (1, 2, 3, 4):
            trackers.log_scalars("train", {"loss": 1.0}, step)
    assert broken.calls == 2 and list(trackers.open) == ["tensorboard"]
    assert caplog.text.count("tracker wandb failed (OSError: disk full): the run goes on without it") == 1
    trackers.close()


def test_a_missing_package_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # (import then raises ImportError)
    with pytest.raises(RlcapError, match=r"^track.to names mlflow, which needs the mlflow.tracking package: "
                                         r"pip install 'rlcap\[mlflow\]'; the run stops before training"):
        Trackers(tmp_path, TrackConfig(to=["mlflow"]), None, SETTINGS)


class Recording(Broken):
    """A continued tracker run that holds train steps 1 and 3 (a kill lost step 2 before it was written)."""

    fails = "never"
    sent: list[tuple[str, int]] = []

    def __init__(self, opening: Opening):
        super().__init__(opening)
        self.held = {("train", 1), ("train", 3)} if opening.run_id else set()

    def log_scalars(self, values, step):
        self.sent.append((next(iter(values)), step))


def test_a_resumed_run_sends_what_the_continued_run_lacks_and_nothing_it_holds(tmp_path, monkeypatch):
    monkeypatch.setitem(fanout.TRACKERS, "wandb", Recording)
    monkeypatch.setattr(Recording, "sent", [])
    Trackers(tmp_path, TrackConfig(to=["wandb"]), None, SETTINGS)  # (records its run id)
    trackers = Trackers(tmp_path, TrackConfig(to=["wandb"]), 2, SETTINGS)
    trackers.replay([{"step": 0, "split": "note", "text": "x", "samples_per_image": 5},
                     {"step": 1, "split": "train", "loss": 1.0, "time": 9.0},
                     {"step": 2, "split": "train", "loss": 0.5, "time": 9.5}])
    for step in (3, 4):
        trackers.log_scalars("train", {"loss": 0.1}, step)
    assert Recording.sent == [("train/loss", 2), ("train/loss", 4)]


def test_track_to_names_known_trackers_once_and_the_old_key_says_what_replaced_it():
    from rlcap.errors import ConfigError
    from rlcap.methods import load_run_config

    assert load_run_config(None, []).track.to == ["tensorboard"]  # as before: TensorBoard on
    with pytest.raises(ConfigError, match=r"^track.to: 'neptune' is not one of \['tensorboard', 'wandb', 'mlflow', "
                                          r"'trackio'\]$"):
        load_run_config(None, ["track.to=[wandb,neptune]"])
    with pytest.raises(ConfigError, match=r"^track.to: a tracker is named twice in \['mlflow', 'mlflow'\]$"):
        load_run_config(None, ["track.to=[mlflow,mlflow]"])
    with pytest.raises(ConfigError, match=r"^tensorboard was removed: the trackers a run logs to are track.to "
                                          r"\(tensorboard=false is track.to=\[\]"):
        load_run_config(None, ["tensorboard=false"])
