"""One training per run folder and one writer per feature store (rlcap.locks): a second process is
refused in one line naming the holder's PID and host, before it writes anything; a lock left by a
killed process is taken over with a log line; the lock is released however a training ends, so
that the trainings of one process (bench, demo, tests) follow each other."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcap import api
from rlcap.cli import main
from rlcap.errors import DataError
from rlcap.locks import RUN_LOCK, LockedError, hold
from tests.encoders.conftest import write_images
from tests.tiny import tiny_overrides
from tests.train.killing import EMPTY, REPO

HOLDER = """
import sys, time
from rlcap.locks import hold
with hold(sys.argv[1], "test"):
    print("holding", flush=True)
    time.sleep(600)
"""


def _holder(lock: Path) -> subprocess.Popen:
    """A process that takes ``lock`` and sleeps (started once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdout.readline() == b"holding\n"
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()
    proc.stdout.close()


def _refusal(what: str, lock: Path, pid: int) -> str:
    return (f"{what} is in use by PID {pid} on host {socket.gethostname()}: wait for that process to end, "
            f"or stop it (its lock: {lock})")


def test_second_training_into_a_run_folder_is_refused_before_writing(tiny_data, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    holder = _holder(out / RUN_LOCK)
    try:
        assert main(["train", str(EMPTY), *tiny_overrides(*tiny_data, out)]) == 2
    finally:
        _stop(holder)
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "rlcap train: error: " + _refusal(f"run folder {out}", out / RUN_LOCK, holder.pid)
    assert sorted(p.name for p in out.iterdir()) == [RUN_LOCK]  # nothing of the run written


def test_lock_of_a_killed_training_is_taken_over(tiny_data, tmp_path, caplog):
    out = tmp_path / "run"
    out.mkdir()
    holder = _holder(out / RUN_LOCK)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    holder.stdout.close()
    assert (out / RUN_LOCK).is_file()  # what a SIGKILL leaves behind
    with caplog.at_level(logging.INFO, logger="rlcap.locks"):
        result = api.train(api.load_run_config(None, tiny_overrides(*tiny_data, out, **{"xe.epochs": 1})))
    assert result.steps > 0
    assert (f"taking over the lock of run folder {out}: PID {holder.pid} on host {socket.gethostname()} "
            "ended without releasing it (killed?)") in caplog.messages
    assert not (out / RUN_LOCK).exists()


def test_trainings_of_one_process_follow_each_other(tiny_data, tmp_path):
    """What bench and demo do: trainings one after another, into other or the same folders, also
    after one that failed."""
    dataset, feats = tiny_data
    with pytest.raises(DataError):
        api.train(api.load_run_config(None, tiny_overrides(dataset, tmp_path / "missing.h5", tmp_path / "a")))
    for out in ("a", "b", "a"):
        api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / out, **{"xe.epochs": 1})))
        assert not (tmp_path / out / RUN_LOCK).exists()


def test_lock_is_released_on_an_exception_and_on_ctrl_c(tmp_path):
    lock = tmp_path / "x.lock"
    for exc in (ValueError, KeyboardInterrupt):
        with pytest.raises(exc):
            with hold(lock, "x"):
                raise exc()
        assert not lock.exists()
    with hold(lock, "x"):
        with pytest.raises(LockedError) as err:  # (a second holder in the same process is refused too)
            with hold(lock, "x"):
                pass
        assert str(err.value) == _refusal("x", lock, os.getpid())


def test_sigterm_releases_the_run_folder(tiny_data, tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "tests.train.slow_save", "1", "train", str(EMPTY), *tiny_overrides(*tiny_data, out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)  # (saves pause 1 s)
    deadline = time.time() + 120
    while not (out / "log.jsonl").exists() and time.time() < deadline:  # under way, holding the lock
        time.sleep(0.05)
    assert (out / RUN_LOCK).is_file()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err.decode()
    assert not (out / RUN_LOCK).exists()


def test_second_features_run_into_a_store_is_refused(tmp_path, capsys):
    write_images(tmp_path / "im", 2)
    store = tmp_path / "feats.h5"
    lock = tmp_path / "feats.h5.lock"
    holder = _holder(lock)
    try:
        assert main(["features", str(tmp_path / "im"), "--out", str(store), "--image-size", "64"]) == 2
    finally:
        _stop(holder)
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "rlcap features: error: " + _refusal(f"feature store {store}", lock, holder.pid)
    assert not store.exists()
