"""The epoch's short last batch under torchrun: 100 training images in batches of 33 leave 1 image for the last
step, so with 2 processes rank 1 holds none. It once divided by zero there, wrote no checkpoint, and crashed at
the same batch on every resume. Now such a rank steps on a stand-in row weighed zero (``batch_share``): it runs
every collective of the step, adds no count and no gradient, and 2 processes train what 1 does (XE's losses and
weights, SCST's weights with beam rollouts), also when stopped and resumed across the short batch. A batch of
fewer images than processes is refused before torchrun starts; the lines that tell a user how to continue or
resume a 2-process run name ``nproc=2``."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file

from rlcap import api
from rlcap.data.feats import Feats
from rlcap.data.loader import Batch
from rlcap.distributed import Ranks, batch_share, global_mean, word_share
from rlcap.methods.grpo import batch_std
from rlcap.run_config import OptimConfig
from rlcap.train.logger import read_log
from rlcap.train.optimizer import Part, optimizer_step, shared_out
from tests.cli.in_process import run_cli
from tests.tiny import make_tiny_dataset, tiny_overrides
from tests.train.killing import EMPTY, REPO, wait_for_step

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "rlcap", "train"]


def test_a_rank_without_rows_of_the_batch_steps_on_a_stand_in():
    assert batch_share(5, Ranks(1, 2)) == (slice(3, 5), Ranks(1, 2))
    assert batch_share(1, Ranks(0, 2)) == (slice(0, 1), Ranks(0, 2))
    assert batch_share(1, Ranks(1, 2)) == (slice(0, 1), Ranks(1, 2, stand_in=True))  # the batch's first image
    assert batch_share(2, Ranks(2, 3)) == (slice(0, 1), Ranks(2, 3, stand_in=True))
    assert batch_share(1, Ranks()) == (slice(0, 1), Ranks())


class _Session:
    """What :func:`optimizer_step` and :func:`shared_out` read of a session: its parts, ranks and device."""

    def __init__(self, part: Part | None, ranks: Ranks):
        self.parts, self.ranks, self.device = {"policy": part}, ranks, torch.device("cpu")


def _batch(ids: list[str]) -> Batch:
    n = len(ids)
    feats = Feats(torch.arange(float(n))[:, None], torch.zeros(n, 2, 1), torch.ones(n, 2, dtype=torch.bool))
    return Batch(torch.arange(n), ids, feats, torch.arange(2 * n)[:, None], [[i] for i in ids])


def test_rank_1_steps_on_the_short_batchs_first_image_then_is_itself_again():
    session = _Session(None, Ranks(1, 2))
    seen = []
    for batch in shared_out(session, [_batch(["a", "b", "c"]), _batch(["d"]), _batch(["e", "f"])]):
        seen.append((batch.ids, batch.tokens.flatten().tolist(), session.ranks.stand_in))
    assert seen == [(["c"], [4, 5], False), (["d"], [0, 1], True), (["f"], [2, 3], False)]
    assert session.ranks == Ranks(1, 2)
    batches = shared_out(session, [_batch(["a", "b", "c"]), _batch(["d"])])
    for batch in batches:
        if session.ranks.stand_in:
            break  # a loop that stops at the short batch (max_steps)
    batches.close()  # (what the loop's end does to it)
    assert session.ranks == Ranks(1, 2)


def _worker(rank: int, init: str, out: str) -> None:
    """Rank 0 holds the short batch's image (3 words, rewards 1, 2, 4); rank 1 a stand-in with other values."""
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    _, ranks = batch_share(1, Ranks(rank, 2))
    mask = torch.tensor([[1, 1, 1, 0]]) if rank == 0 else torch.tensor([[1, 1, 1, 1]])
    rewards = torch.tensor([1.0, 2.0, 4.0]) if rank == 0 else torch.tensor([100.0, -50.0])
    share = word_share(mask, ranks)
    weight = torch.nn.Parameter(torch.zeros(2))
    part = Part(torch.nn.ParameterList([weight]), torch.optim.SGD([weight], lr=1.0), optim=OptimConfig(grad_clip=0))
    x = torch.tensor([1.0, 2.0]) if rank == 0 else torch.tensor([30.0, 40.0])
    # rank 0 weighs its loss by its share; the stand-in's loss left unweighed (as a loop without shares does)
    loss = (weight * x).sum() * (share if rank == 0 else 1.0)
    optimizer_step(_Session(part, ranks), loss)
    torch.save({"share": float(share), "mean": float(global_mean(rewards, ranks)),
                "std": float(batch_std(rewards, ranks)), "weight": weight.detach().tolist()}, f"{out}.{rank}")
    dist.destroy_process_group()


def test_a_stand_in_counts_nothing_and_adds_no_gradient(tmp_path):
    mp.spawn(_worker, args=(f"file://{tmp_path / 'store'}", str(tmp_path / "out")), nprocs=2, join=True)
    zero, one = (torch.load(tmp_path / f"out.{r}") for r in (0, 1))
    assert (zero["share"], one["share"]) == (2.0, 0.0)  # rank 0's 3 words are all the batch's: 3 / 3 x 2 ranks
    assert zero["mean"] == one["mean"] == pytest.approx(7.0 / 3)  # rank 0's rewards alone
    assert zero["std"] == one["std"] == pytest.approx(float(torch.tensor([1.0, 2.0, 4.0]).std()))
    # the averaged gradient is rank 0's x (its loss x 2, / 2 ranks): one SGD step of rate 1 from 0
    assert zero["weight"] == one["weight"] == [-1.0, -2.0]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """100 training images (batches of 33: the last one holds 1) and overrides for UpDown without dropout."""
    folder = tmp_path_factory.mktemp("short")
    dataset, feats = make_tiny_dataset(folder, n_train=100)
    common = [o for o in tiny_overrides(dataset, feats, "unused", arch="updown", **{
        "model.dropout": 0.0, "xe.epochs": 3, "xe.batch_size": 33, "optim.lr": 0.002, "save_every": 1})
        if not o.startswith("out_dir")]
    return folder, common


def _losses(run) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_log(run / "log.jsonl") if r["split"] == "train"}


def _largest_difference(a, b) -> float:
    one, two = (load_file(str(run / "last" / "policy.safetensors")) for run in (a, b))
    return max(float((one[k] - two[k]).abs().max()) for k in one)


@pytest.fixture(scope="module")
def xe_runs(data):
    """XE for 3 epochs of 4 steps, each ending on the short batch: one process, and two started by hand with
    torchrun, which SIGTERM stops after step 2 and the command it then prints continues; that command is SIGKILLed
    past step 5 and run again."""
    folder, common = data
    api.train(api.load_run_config(None, [*common, f"out_dir={folder / 'one'}"]))
    two = folder / "two"
    launcher = subprocess.Popen([*TORCHRUN, str(EMPTY), *common, f"out_dir={two}"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=ENV, cwd=REPO)
    wait_for_step(launcher, two, 2)
    launcher.send_signal(signal.SIGTERM)  # torchrun passes it on to its processes
    _, stderr = launcher.communicate(timeout=120)
    stopped_at = json.loads((two / "last" / "checkpoint.json").read_text())["step"]
    line = next(x for x in stderr.splitlines() if x.startswith("rlcap train: terminated"))
    continued = [sys.executable, "-m", "rlcap", *shlex.split(line.split("Continue with: ", 1)[1])[1:]]
    # the printed command (it starts torchrun itself), SIGKILLed with its processes once past the first short batch
    # (step 4), then resumed by the same command: the kill loses no work the checkpoints hold
    killed = subprocess.Popen(continued, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=REPO,
                              start_new_session=True)
    wait_for_step(killed, two, 5)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    killed_at = json.loads((two / "last" / "checkpoint.json").read_text())["step"]
    again = subprocess.run(continued, capture_output=True, text=True, env=ENV, cwd=REPO, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    return folder, line, (stopped_at, killed_at)


@pytest.mark.slow
def test_two_processes_stopped_and_resumed_across_the_short_batch_train_as_one(xe_runs):
    folder, _, (stopped_at, killed_at) = xe_runs
    assert 2 <= stopped_at < killed_at and 5 <= killed_at < 12  # killed past a short batch (step 4), before the end
    one, two = _losses(folder / "one"), _losses(folder / "two")
    assert sorted(one) == sorted(two) == list(range(1, 13))
    assert all(abs(one[s] - two[s]) < 1e-5 * abs(one[s]) for s in one)  # the short batches' steps 4, 8, 12 too
    assert one[12] < one[1] - 0.05  # it trained
    assert _largest_difference(folder / "one", folder / "two") < 1e-5
    manifest = json.loads((folder / "two" / "last" / "checkpoint.json").read_text())
    assert (manifest["epoch"], manifest["step"], manifest["world_size"]) == (3, 12, 2)


@pytest.mark.slow
def test_sigterm_to_torchrun_started_by_hand_says_to_continue_with_nproc(xe_runs):
    folder, line, (stopped_at, _) = xe_runs
    assert line.startswith(f"rlcap train: terminated; its last checkpoint is step {stopped_at} in "
                           f"{folder / 'two' / 'last'}. Continue with: rlcap train {EMPTY} ")
    assert line.endswith(f"out_dir={folder / 'two'} nproc=2 resume=true")


@pytest.mark.slow
def test_a_one_process_resume_of_a_two_process_run_names_nproc(data, xe_runs, capsys):
    folder, common = data
    code, _, err = run_cli(capsys, "train", str(EMPTY), *common, f"out_dir={folder / 'two'}", "xe.epochs=4",
                           "resume=true")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"rlcap train: error: {folder / 'two'} was trained by 2 processes and is resumed by 1: resume it with as "
        "many, nproc=2 (each takes its share of the same global batches)")


def _rl(data, out, **extra) -> list[str]:
    folder, common = data
    base = [o for o in common if not o.startswith(("model.", "xe."))]
    settings = {"init_from": folder / "one" / "last", "rl.epochs": 1, "rl.batch_size": 33, "rl.n_samples": 2,
                "out_dir": out, **extra}
    return [*base, *(f"{k}={v}" for k, v in settings.items())]


@pytest.mark.slow
def test_scst_steps_the_short_batch_as_one_process_does(data, xe_runs, tmp_path):
    """Beam rollouts and the greedy baseline, without dropout: the 2 processes' samples are one process's, so
    their weights after the epoch (the short batch its last step) are too."""
    overrides = {"algorithm": "scst", "rl.sample_method": "beam"}
    api.train(api.load_run_config(None, _rl(data, tmp_path / "one", **overrides)))
    two = subprocess.run([*TORCHRUN, str(EMPTY), *_rl(data, tmp_path / "two", **overrides)], capture_output=True,
                         text=True, env=ENV, cwd=REPO, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert sorted(_losses(tmp_path / "two")) == [1, 2, 3, 4]
    assert _largest_difference(tmp_path / "one", tmp_path / "two") < 1e-5
    assert _largest_difference(tmp_path / "one", data[0] / "one") > 1e-3  # it trained


@pytest.mark.slow
def test_grpo_passes_the_short_batch_under_two_processes(data, xe_runs, tmp_path):
    """GRPO's batch-wide std (grpo.scale=batch) over both ranks' rewards, rank 1's stand-in's left out."""
    run = subprocess.run([*TORCHRUN, str(EMPTY), *_rl(data, tmp_path / "grpo", algorithm="grpo",
                                                      **{"grpo.scale": "batch"})],
                         capture_output=True, text=True, env=ENV, cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    losses = _losses(tmp_path / "grpo")
    assert sorted(losses) == [1, 2, 3, 4] and all(abs(v) < 10 for v in losses.values())
    manifest = json.loads((tmp_path / "grpo" / "last" / "checkpoint.json").read_text())
    assert (manifest["epoch"], manifest["step"], manifest["world_size"]) == (1, 4, 2)


@pytest.mark.parametrize("key,extra", [("xe.batch_size", []),
                                       ("rl.batch_size", ["algorithm=scst", "init_from=XE/best"])])
def test_a_batch_of_fewer_images_than_processes_is_refused_before_torchrun_starts(capsys, tmp_path, key, extra):
    dataset, feats = make_tiny_dataset(tmp_path)
    overrides = [*tiny_overrides(dataset, feats, tmp_path / "run"), *extra, f"{key}=1", "nproc=2"]
    code, _, err = run_cli(capsys, "train", str(EMPTY), *overrides)
    assert (code, err) == (2, f"rlcap train: error: {key}=1 is fewer images than the 2 processes (nproc=2), which "
                              f"share out each batch's images: give {key} >= 2, or fewer processes\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("world,local,expected", [
    ("2", "2", "Continue with: rlcap train r.yaml xe.epochs=3 nproc=2 resume=true"),
    ("16", "8", "Continue on each of its 2 machines, with the rendezvous options it was started with: torchrun "
                "--nnodes=2 --nproc-per-node=8 -m rlcap train r.yaml xe.epochs=3 resume=true")])
def test_the_continuation_line_of_a_rank_of_torchrun_started_by_hand_names_its_processes(monkeypatch, tmp_path,
                                                                                         world, local, expected):
    """(In-process, as rank 0 of torchrun: the 2-process case runs for real in ``xe_runs``.)"""
    import argparse

    from rlcap.cli.train import _stopped

    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    args = argparse.Namespace(config="r.yaml", overrides=["xe.epochs=3", "resume=true"])
    assert _stopped(args, str(tmp_path), "terminated") == (
        f"rlcap train: terminated; it has no checkpoint yet. {expected}")
