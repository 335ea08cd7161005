"""The host part of online image tokens in worker processes (rlcap.encoders.host_workers): the same output as on
this thread, a picture it cannot read refused by name in the training process, and no worker left behind when
the training process is killed. (Every family's tokens through the workers against the store's:
tests/encoders/test_online_features.py, whose loader reads use ``data.workers``' default of 1.)"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rlcap.encoders.vlm_host import padded_batch
from rlcap.encoders.host_workers import HostSide, HostWorkers
from rlcap.errors import DataError

REPO = Path(__file__).resolve().parents[2]


def _pictures(folder: Path) -> list[Path]:
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for k, (h, w) in enumerate(((24, 40), (40, 16))):
        paths.append(folder / f"p{k}.png")
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(paths[-1])
    return paths


def test_a_worker_gives_what_this_thread_gives_and_names_a_picture_it_cannot_read(tmp_path):
    pictures = _pictures(tmp_path)
    side = functools.partial(HostSide, padded_batch)  # (picklable: what the worker builds its host part with)
    workers = HostWorkers(side, 1)
    here = side()(pictures)
    there = workers(pictures)
    assert there.shape == (2, 40, 40, 4) and np.array_equal(there, here)
    assert (there[1, :, 16:] == 0).all() and (there[1, :, :16, 3] == 255).all()  # (the padding, as here)
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="broken.png"):
        workers([pictures[0], tmp_path / "broken.png"])
    assert np.array_equal(workers(pictures[:1]), here[:1, :24, :40])  # (the worker goes on after it)


def _state(pid: int) -> str | None:
    """A process's state letter (Z: a zombie), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_worker_leaves_when_the_training_process_is_killed(tmp_path):
    picture = _pictures(tmp_path)[0]
    script = ("import functools, sys, time\n"
              "from rlcap.encoders.vlm_host import padded_batch\n"
              "from rlcap.encoders.host_workers import HostSide, HostWorkers\n"
              "workers = HostWorkers(functools.partial(HostSide, padded_batch), 1)\n"
              "print(workers([sys.argv[1]]).shape, flush=True)\n"
              "print(*[p.pid for p in workers._pool._processes.values()], flush=True)\n"
              "time.sleep(120)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.Popen([sys.executable, "-c", script, str(picture)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert run.stdout.readline().strip() == "(1, 24, 40, 4)"
        (worker,) = map(int, run.stdout.readline().split())
        assert _state(worker) not in (None, "Z")
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _state(worker) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _state(worker) in (None, "Z"), "the worker outlived the process that started it"
    finally:
        run.kill()


def test_data_workers_is_checked_and_read_only_without_a_store():
    from rlcap.data.loader import DataConfig
    from rlcap.errors import ConfigError

    with pytest.raises(ConfigError, match="data.workers must be >= 0"):
        DataConfig(workers=-1).validate()
    assert DataConfig(features="").reads("workers") and not DataConfig(features="tokens.h5").reads("workers")
