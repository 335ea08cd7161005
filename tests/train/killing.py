"""Kill a training process with SIGKILL once its checkpoint passes a step, then resume it in-process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from rlcap import api
from rlcap.train.checkpoint import load_checkpoint
from rlcap.train.logger import read_log

REPO = Path(__file__).resolve().parents[2]
EMPTY = Path(__file__).parent / "empty.yaml"


def train_losses(folder: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_log(folder / "log.jsonl") if r["split"] == "train"}


def kill_after(overrides: list[str], out: Path, step: int, timeout: float = 180.0) -> int:
    """Run ``rlcap train`` in a child process, SIGKILL it once ``out/last`` holds step >= ``step``;
    return the step of the checkpoint left behind."""
    argv = [sys.executable, "-m", "rlcap.cli", "train", str(EMPTY), *overrides]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    wait_for_step(proc, out, step, timeout)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return load_checkpoint(out / "last").manifest["step"]


def wait_for_step(proc: subprocess.Popen, out: Path, step: int, timeout: float = 180.0) -> int:
    """Wait until ``out/last`` holds step >= ``step`` (or the process ends, or ``timeout``); the step it holds."""
    deadline = time.time() + timeout
    manifest = out / "last" / "checkpoint.json"
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads(manifest.read_text())["step"] >= step:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return json.loads(manifest.read_text())["step"]


def assert_resume_is_exact(overrides: list[str], reference: Path, killed: Path, kill_step: int,
                           total_steps: int, resume: bool = True) -> None:
    """Train ``reference`` uninterrupted, kill ``killed`` past ``kill_step``, resume it (by default
    with ``resume=true``; ``resume=False`` re-runs the same command), and compare losses."""
    api.train(api.load_run_config(None, [*overrides, f"out_dir={reference}"]))
    stopped_at = kill_after([*overrides, f"out_dir={killed}"], killed, kill_step)
    assert kill_step <= stopped_at < total_steps, "the process should be killed mid-run"
    api.train(api.load_run_config(None, [*overrides, f"out_dir={killed}"]), resume=resume)
    ref, got = train_losses(reference), train_losses(killed)
    assert max(ref) == total_steps
    assert sorted(got) == sorted(ref)
    after = [s for s in ref if s > stopped_at]
    assert after, "some steps must run after the resume"
    assert [got[s] for s in after] == [ref[s] for s in after]


class FaultReport(NamedTuple):
    kills: int            # SIGKILLs that landed while the run was going
    in_save: int          # of those, kills that left a save unfinished (a temporary or .old folder)
    resumes_exact: bool   # the finished run's losses equal the uninterrupted run's, step for step
    checkpoints_lost: int  # kills after which no complete checkpoint could be loaded (after the first save)
    orphans: int          # leftover temporary files or folders after the next start


def run_with_faults(overrides: list[str], reference: Path, killed: Path, kills: int, seed: int,
                    window: tuple[float, float], slow_save: float = 0.3) -> FaultReport:
    """Kill ``rlcap train`` with SIGKILL at ``kills`` random moments (uniform in ``window`` seconds
    after each start), each time resuming it; then run it to the end and compare with ``reference``."""
    import random

    from rlcap.train.checkpoint import is_complete, recover

    rng = random.Random(seed)
    api.train(api.load_run_config(None, [*overrides, f"out_dir={reference}"]))
    argv = [sys.executable, "-m", "tests.train.slow_save", str(slow_save), "train", str(EMPTY), *overrides,
            f"out_dir={killed}", "resume=true"]  # (its saves pause, so that kills land inside them)
    landed = in_save = lost = orphans = 0
    saved_once = False
    while landed < kills:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
        if not _wait_for_training(proc, killed / "log.jsonl") or proc.poll() is not None:
            raise AssertionError("the run finished before all kills landed: give it more steps")
        time.sleep(rng.uniform(*window))  # the random moment, counted from the run's first logged step
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        landed += 1
        in_save += any(".tmp-" in p.name or p.name.endswith(".old") for p in killed.iterdir())
        saved_once = saved_once or is_complete(killed / "last") or is_complete(killed / "last.old")
        recover(killed)  # what the next start does first
        orphans += sum(".tmp-" in p.name or p.name.endswith(".old") for p in killed.iterdir())
        if saved_once:
            try:
                load_checkpoint(killed / "last")
            except Exception:  # any failure to load counts as a lost checkpoint
                lost += 1
    api.train(api.load_run_config(None, [*overrides, f"out_dir={killed}"]), resume=True)
    ref, got = train_losses(reference), train_losses(killed)
    exact = sorted(got) == sorted(ref) and all(got[s] == ref[s] for s in ref)
    return FaultReport(landed, in_save, exact, lost, orphans)


def _wait_for_training(proc: subprocess.Popen, log: Path, timeout: float = 180.0) -> bool:
    """Wait until the child has logged a training step since it started (start-up under load is slow)."""
    start_size = log.stat().st_size if log.exists() else -1
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and log.stat().st_size != start_size and '"split": "train"' in log.read_text():
            return True
        time.sleep(0.05)
    return proc.poll() is None


def assert_same_final_checkpoints(reference, killed, parts: list[str]) -> None:
    """The killed-and-resumed run ends with the reference run's weights (every part), optimizer states
    and loop state, tensor for tensor."""
    from rlcap.train.checkpoint import load_checkpoint

    ref, got = load_checkpoint(reference / "last"), load_checkpoint(killed / "last")
    assert sorted(got.weights) == sorted(parts)
    _same(got.weights, ref.weights)
    _same(got.trainer["optimizers"], ref.trainer["optimizers"])
    _same(got.trainer["state"], ref.trainer["state"])


def _same(a, b) -> None:
    import torch

    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b
