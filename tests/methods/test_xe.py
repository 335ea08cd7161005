import math

import pytest
import torch

from rlcap import api
from rlcap.train.checkpoint import is_complete, load_checkpoint
from rlcap.train.logger import read_log
from tests.train.killing import assert_resume_is_exact
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
    trained = load_checkpoint(tmp_path / "run" / "last").weights["policy"]
    changed = [k for k, v in fresh.state_dict().items() if not torch.equal(v, trained[k])]
    assert changed


def test_xe_learns_the_tiny_task(tiny_data, tmp_path):
    dataset, feats = tiny_data
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **{"xe.epochs": 12,
                                                                                         "optim.lr": 0.01}))
    api.train(cfg)
    losses = [r["loss"] for r in read_log(tmp_path / "run" / "log.jsonl") if r["split"] == "train"]
    assert sum(losses[-6:]) / 6 < 0.7 * sum(losses[:6]) / 6


def test_killed_run_resumes_with_identical_losses(tiny_data, tmp_path):
    """SIGKILL a training process after a mid-epoch checkpoint; resuming replays the same losses."""
    dataset, feats = tiny_data
    # Enough steps after the first checkpoints that the kill lands mid-run even when this process is
    # slow to poll (with 3 epochs, 18 steps, the child sometimes finished first on the 2-core machine).
    epochs, steps_per_epoch = 12, 6
    common = [*tiny_overrides(dataset, feats, tmp_path / "unused"), f"xe.epochs={epochs}", "save_every=2",
              "model.dropout=0.3"]
    assert_resume_is_exact(common, tmp_path / "reference", tmp_path / "killed", 4, epochs * steps_per_epoch)
