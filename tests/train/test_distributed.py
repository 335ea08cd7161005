"""Several processes under torchrun (gloo on the CPU): each rank takes its share of the same global
batches and the gradients are averaged, so XE with 2 processes at batch B/2 each ends where one process
at batch B does; rank 0 alone writes; a run is resumed by as many processes as trained it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from rlcap.data.feats import Feats
from rlcap.data.loader import Batch
from rlcap.distributed import Ranks, shard_rows
from tests.train.killing import EMPTY, REPO
from tests.tiny import make_tiny_dataset, tiny_overrides


def _train(overrides: list[str], processes: int) -> subprocess.CompletedProcess:
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"] if processes > 1 else []
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *launcher, "-m", "rlcap", "train", str(EMPTY), *overrides],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """XE for 20 steps at a global batch of 4 images: one process, and two of 2 images each (started by
    ``nproc=2``, which is torchrun)."""
    folder = tmp_path_factory.mktemp("distributed")
    dataset, feats = make_tiny_dataset(folder)
    common = [o for o in tiny_overrides(dataset, feats, "unused", **{"model.dropout": 0.0, "max_steps": 20,
                                                                     "xe.epochs": 10, "model.arch": "updown",
                                                                     "val.batch_size": 2,
                                                                     "track.to": "[mlflow]"})
              if not o.startswith("out_dir")]
    done = {n: _train([*common, f"out_dir={folder / str(n)}", f"nproc={n}"], 1) for n in (1, 2)}
    for n, proc in done.items():
        assert proc.returncode == 0, (n, proc.stderr[-2000:])
        (folder / f"{n}.stderr").write_text(proc.stderr)
    return folder, common


@pytest.mark.slow
def test_two_processes_end_where_one_does(runs):
    folder, _ = runs
    one, two = (load_file(str(folder / str(n) / "last" / "policy.safetensors")) for n in (1, 2))
    assert max(float((one[k] - two[k]).abs().max()) for k in one) < 1e-5
    losses = {n: [json.loads(line)["loss"] for line in (folder / str(n) / "log.jsonl").read_text().splitlines()
                  if json.loads(line)["split"] == "train"] for n in (1, 2)}
    assert len(losses[2]) == 20 and all(abs(a - b) < 1e-5 * abs(a) for a, b in zip(losses[1], losses[2]))
    assert json.loads((folder / "2" / "last" / "checkpoint.json").read_text())["world_size"] == 2
    # validation sharded: each rank decodes every other batch, rank 0 scores them all (val.batch_size 2:
    # 3 batches of the 6 validation images, 2 on rank 0 and 1 on rank 1)
    val = {n: [json.loads(line)["CIDEr"] for line in (folder / str(n) / "log.jsonl").read_text().splitlines()
               if json.loads(line)["split"] == "val"] for n in (1, 2)}
    assert len(val[2]) == len(val[1]) >= 2 and all(abs(a - b) < 1e-6 for a, b in zip(val[1], val[2]))


def test_two_processes_log_to_a_tracker_once(runs):
    """Rank 0 alone opens the trackers: one MLflow run, each of the 20 steps in it once, as with one process."""
    from mlflow.tracking import MlflowClient

    folder, _ = runs
    for n in (1, 2):
        client = MlflowClient(f"sqlite:///{folder / str(n) / 'mlflow.db'}")
        (run,) = client.search_runs([client.get_experiment_by_name("rlcap").experiment_id])
        assert json.loads((folder / str(n) / "trackers.json").read_text())["ids"] == {"mlflow": run.info.run_id}
        assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == list(range(1, 21))


def test_only_rank_0_writes_info_lines(runs):
    """Under torchrun the other ranks log warnings only: each step line once, as with one process."""
    folder, _ = runs
    logs = {n: (folder / f"{n}.stderr").read_text() for n in (1, 2)}
    steps = {n: [line for line in logs[n].splitlines() if "INFO rlcap.train.session: step " in line] for n in (1, 2)}
    assert len(steps[1]) >= 2 and len(steps[2]) == len(steps[1])
    assert "INFO [rank 1]" not in logs[2]


def test_a_run_is_resumed_by_as_many_processes(runs):
    folder, common = runs
    done = _train([*common, f"out_dir={folder / '2'}", "max_steps=24", "resume=true"], 1)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"rlcap train: error: {folder / '2'} was trained by 2 processes and is resumed by 1: resume it with as many, "
        "nproc=2 (each takes its share of the same global batches)")
    # with nproc=2, refused before torchrun starts: once, in one line (each rank printed it, then torchrun's
    # 30-line ChildFailedError)
    two = _train([*common, f"out_dir={folder / '1'}", "max_steps=24", "resume=true", "nproc=2"], 1)
    assert (two.returncode, two.stderr) == (2, f"rlcap train: error: {folder / '1'} was trained by 1 process and is "
                                               "resumed by 2: resume it with as many, nproc=1 (each takes its "
                                               "share of the same global batches)\n")


def test_each_rank_takes_a_contiguous_share():
    assert [shard_rows(5, Ranks(r, 2)) for r in (0, 1)] == [slice(0, 3), slice(3, 5)]
    assert shard_rows(4, Ranks()) == slice(0, 4)
    feats = Feats(torch.arange(3.0)[:, None], torch.zeros(3, 2, 1), torch.ones(3, 2, dtype=torch.bool))
    batch = Batch(torch.tensor([7, 8, 9]), ["a", "b", "c"], feats, torch.arange(6)[:, None], [["x"], ["y"], ["z"]])
    second = batch.shard(shard_rows(3, Ranks(1, 2)))
    assert second.ids == ["c"] and second.index.tolist() == [9] and second.tokens.flatten().tolist() == [4, 5]
    assert second.feats.fc.flatten().tolist() == [2.0] and second.refs == [["z"]]
    assert batch.shard(slice(0, 3)) is batch


@pytest.mark.slow
def test_scst_runs_under_two_processes(runs, tmp_path):
    """SCST's rollouts, greedy baselines and rewards, each rank on its share of the batch (a run resumed
    under torchrun: the test below, and test_two_processes.py's sequence-level loops)."""
    folder, common = runs
    base = [o for o in common if not o.startswith(("model.", "max_steps", "xe."))]
    scst = [*base, "algorithm=scst", f"init_from={folder / '1' / 'last'}", "rl.epochs=1", "rl.batch_size=8",
            "rl.n_samples=2", f"out_dir={tmp_path / 'scst'}"]
    first = _train(scst, 2)
    assert first.returncode == 0, first.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in (tmp_path / "scst" / "log.jsonl").read_text().splitlines()
             if json.loads(line)["split"] == "train"]
    assert steps == list(range(1, 4))  # 24 images, 8 a global batch: each step logged once
    assert json.loads((tmp_path / "scst" / "last" / "checkpoint.json").read_text())["world_size"] == 2


def _rank_pid(launcher: subprocess.Popen, rank: int) -> int | None:
    """The pid of torchrun's worker of ``rank`` (read from its environment), once it has started."""
    children = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    for pid in children:
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    return None


@pytest.mark.slow
def test_sigkill_of_rank_1_then_the_same_command_resumes_exactly(runs, tmp_path):
    """torchrun ends every rank when one dies; the same command continues from the last checkpoint, each
    rank with its own random generators, and logs what the uninterrupted run (``runs``' two processes) logs."""
    import signal
    import time

    from tests.train.killing import wait_for_step

    folder, common = runs
    common = [*common, "save_every=1"]  # (checkpoints only: the same steps and losses)
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "rlcap",
            "train", str(EMPTY), *common, f"out_dir={killed}"]
    launcher = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    wait_for_step(launcher, killed, 5)
    rank_1 = _rank_pid(launcher, 1)
    assert rank_1 is not None
    os.kill(rank_1, signal.SIGKILL)
    assert launcher.wait(timeout=120) != 0  # torchrun ended the other rank and failed
    time.sleep(0.5)
    stopped_at = json.loads((killed / "last" / "checkpoint.json").read_text())["step"]
    assert 5 <= stopped_at < 20
    again = _train([*common, f"out_dir={killed}"], 2)  # the same command
    assert again.returncode == 0, again.stderr[-2000:]
    _assert_continues_exactly(folder / "2", killed, stopped_at)


def _assert_continues_exactly(reference, continued, stopped_at: int) -> None:
    """The continued run logs every step of the uninterrupted ``reference`` (20), with its losses after the stop."""

    def losses(run):
        return {json.loads(x)["step"]: json.loads(x)["loss"] for x in (run / "log.jsonl").read_text().splitlines()
                if json.loads(x)["split"] == "train"}

    ref, got = losses(reference), losses(continued)
    assert max(ref) == 20 and sorted(got) == sorted(ref)
    assert [got[s] for s in ref if s > stopped_at] == [ref[s] for s in ref if s > stopped_at]


def test_nproc_starts_torchrun(runs, tmp_path):
    """`rlcap train ... nproc=2` is `torchrun --standalone --nproc-per-node 2 -m rlcap train ...` (the
    two-process run of ``runs``, whose results the tests above check); a bad count is one line."""
    folder, common = runs
    assert "starting 2 processes: torchrun --standalone --nproc-per-node 2 -m rlcap train " in (
        folder / "2.stderr").read_text()
    assert "starting" not in (folder / "1.stderr").read_text()  # nproc=1: this process
    bad = _train([*common, f"out_dir={tmp_path / 'bad'}", "nproc=two"], 1)
    assert bad.returncode == 2 and "nproc: expected a whole number of processes >= 1, got 'two'" in bad.stderr


def _processes_of(out_dir) -> list[str]:
    """Command lines of the processes that name ``out_dir`` (a run's rlcap, torchrun and ranks)."""
    found = subprocess.run(["pgrep", "-af", f"out_dir={out_dir}"], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "pgrep" not in line]


@pytest.mark.slow
def test_sigterm_to_rlcap_train_nproc_2_stops_every_process_and_the_same_command_resumes_exactly(runs, tmp_path):
    """A scheduler's `kill PID` of `rlcap train ... nproc=2` once stopped the rlcap process alone: its ranks
    trained on to the end, holding the run's lock. Now every rank stops after the same step, torchrun ends
    quietly, one line says where the run stopped, and the command it prints continues it as the
    uninterrupted run (``runs``' two processes) went on."""
    import signal
    import time

    from tests.train.killing import wait_for_step

    folder, common = runs
    common = [*common, "save_every=1"]  # (checkpoints only: the same steps and losses)
    out = tmp_path / "stopped"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    rlcap = subprocess.Popen([sys.executable, "-m", "rlcap", "train", str(EMPTY), *common, f"out_dir={out}", "nproc=2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    wait_for_step(rlcap, out, 5)
    rlcap.send_signal(signal.SIGTERM)
    stdout, stderr = rlcap.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while _processes_of(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_of(out) == []
    assert rlcap.returncode == 143 and "done:" not in stdout
    last = stderr.strip().splitlines()[-1]
    stopped_at = json.loads((out / "last" / "checkpoint.json").read_text())["step"]
    assert last.startswith(f"rlcap train: terminated; its last checkpoint is step {stopped_at} in {out / 'last'}. "
                           "Continue with: rlcap train ")
    assert last.endswith(" nproc=2 resume=true") and "Traceback" not in stderr and "ChildFailedError" not in stderr
    assert not (out / ".lock").exists() and 5 <= stopped_at < 20
    again = _train(shlex.split(last.split("Continue with: rlcap train ", 1)[1])[1:], 1)  # the command it printed
    assert again.returncode == 0, again.stderr[-2000:]
    _assert_continues_exactly(folder / "2", out, stopped_at)
    assert again.stdout.count("done:") == 1  # rank 0's summary alone


def test_under_torchrun_the_errors_of_other_ranks_say_which_rank(monkeypatch, capsys):
    """Rank 1's error line is marked, as its log lines are (TRAINING.md). (In-process, as torchrun's rank 1: under
    torchrun both ranks raising one error race, and the one torchrun ends first prints nothing.)"""
    from rlcap.cli import main

    monkeypatch.setenv("RANK", "1")
    assert main(["train", "configs/shapes_xe.yaml", "nosuchkey=1"]) == 2
    assert capsys.readouterr().err.startswith("rlcap train: [rank 1] error: unknown config key nosuchkey")
