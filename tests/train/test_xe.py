import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rlcap import api
from rlcap.train.checkpoint import is_complete, load_checkpoint
from rlcap.train.logger import read_log
from tests.tiny import tiny_overrides


@pytest.mark.parametrize("arch", ["fc", "updown", "transformer"])
def test_xe_smoke_changes_parameters_and_keeps_finite_losses(tiny_data, tmp_path, arch):
    dataset, feats = tiny_data
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", arch=arch))
    torch.manual_seed(cfg.seed)
    result = api.train(cfg)
    assert result.steps == 2 * math.ceil(24 / 4)
    losses = [r["loss"] for r in read_log(tmp_path / "run" / "log.jsonl") if r["split"] == "train"]
    assert losses and all(math.isfinite(x) for x in losses)
    assert is_complete(tmp_path / "run" / "best") and is_complete(tmp_path / "run" / "last")
    # the trained weights differ from a fresh initialisation with the same seed
    from rlcap.models import build_model
    torch.manual_seed(cfg.seed)
    fresh = build_model(cfg.model, len(load_checkpoint(tmp_path / "run" / "last").vocab), 8, 8)
    trained = load_checkpoint(tmp_path / "run" / "last").weights
    changed = [k for k, v in fresh.state_dict().items() if not torch.equal(v, trained[k])]
    assert changed


def test_xe_learns_the_tiny_task(tiny_data, tmp_path):
    dataset, feats = tiny_data
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **{"xe.epochs": 12,
                                                                                         "optim.lr": 0.01}))
    api.train(cfg)
    losses = [r["loss"] for r in read_log(tmp_path / "run" / "log.jsonl") if r["split"] == "train"]
    assert sum(losses[-6:]) / 6 < 0.7 * sum(losses[:6]) / 6


def _train_losses(folder: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_log(folder / "log.jsonl") if r["split"] == "train"}


def test_killed_run_resumes_with_identical_losses(tiny_data, tmp_path):
    """SIGKILL a training process after a mid-epoch checkpoint; resuming replays the same losses."""
    dataset, feats = tiny_data
    # Enough steps after the first checkpoints that the kill lands mid-run even when this process is
    # slow to poll (with 3 epochs, 18 steps, the child sometimes finished first on the 2-core machine).
    epochs, steps_per_epoch = 12, 6
    common = [f"xe.epochs={epochs}", "save_every=2", "model.dropout=0.3"]
    reference = tmp_path / "reference"
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, reference) + common))

    killed = tmp_path / "killed"
    argv = [sys.executable, "-m", "rlcap.cli", "train", str(Path(__file__).parent / "empty.yaml"),
            *tiny_overrides(dataset, feats, killed), *common]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=Path(__file__).resolve().parents[2])
    deadline = time.time() + 120
    while time.time() < deadline:
        manifest = killed / "last" / "checkpoint.json"
        if manifest.exists() and json.loads(manifest.read_text())["step"] >= 4:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stopped_at = load_checkpoint(killed / "last").manifest["step"]
    assert 4 <= stopped_at < epochs * steps_per_epoch, "the process should be killed mid-run"

    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, killed) + common + ["resume=true"]))
    ref, got = _train_losses(reference), _train_losses(killed)
    assert max(ref) == epochs * steps_per_epoch
    assert sorted(got) == sorted(ref)
    after = [s for s in ref if s > stopped_at]
    assert after, "some steps must run after the resume"
    assert [got[s] for s in after] == [ref[s] for s in after]
