"""Exact resume after SIGKILL for every loop state: SCST with each baseline (the running mean's
statistics are loop state in the checkpoint) and SLL-SLE; checkpoints of format 1 still load."""

import json

import pytest
import torch
from safetensors.torch import save_file

from rlcap.errors import RlcapError
from rlcap.eval.open_run import open_run
from rlcap.train.checkpoint import load_checkpoint
from tests.train.killing import assert_resume_is_exact
from tests.tiny import tiny_overrides


@pytest.fixture(scope="module")
def xe_run(tmp_path_factory):
    from tests.tiny import tiny_xe_run

    return tiny_xe_run(tmp_path_factory.mktemp("xe"), epochs=2)


RL_EPOCHS, RL_STEPS_PER_EPOCH = 6, 3  # 24 training images, 8 per batch


@pytest.mark.parametrize("algorithm,extra", [
    ("scst", ["scst.baseline=greedy"]),
    ("scst", ["scst.baseline=leave_one_out"]),
    ("scst", ["scst.baseline=running_mean"]),
    ("sll_sle", []),
], ids=["scst_greedy", "scst_leave_one_out", "scst_running_mean", "sll_sle"])
def test_killed_rl_run_resumes_with_identical_losses(xe_run, tmp_path, algorithm, extra):
    dataset, feats, init = xe_run
    overrides = [*tiny_overrides(dataset, feats, tmp_path / "unused", **{
        "algorithm": algorithm, "init_from": init, "rl.epochs": RL_EPOCHS, "rl.batch_size": 8, "rl.n_samples": 3,
        "decode.max_len": 6, "optim.lr": 0.001, "save_every": 2}), *extra]
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", 4,
                           RL_EPOCHS * RL_STEPS_PER_EPOCH)


def test_a_format_1_checkpoint_loads_as_the_policy(xe_run, tmp_path):
    """rlcap 0.1 wrote model.safetensors and a manifest without a format; it loads as the part 'policy'."""
    _, _, best = xe_run
    old = tmp_path / "old"
    old.mkdir()
    ckpt = load_checkpoint(best, with_trainer=False)
    save_file(ckpt.weights["policy"], str(old / "model.safetensors"))
    for name in ("config.json", "vocab.json"):
        (old / name).write_bytes((best / name).read_bytes())
    (old / "checkpoint.json").write_text(json.dumps({"epoch": 1, "step": 6, "algorithm": "xe", "metrics": {}}))
    model = open_run(old, device="cpu").policy
    expected = open_run(best, device="cpu").policy
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), expected.state_dict().values()))
    with pytest.raises(RlcapError, match="holds no value network"):
        open_run(old, device="cpu", value=True)


def test_a_newer_format_fails_with_one_line(xe_run, tmp_path):
    _, _, best = xe_run
    manifest = json.loads((best / "checkpoint.json").read_text())
    newer = tmp_path / "newer"
    newer.mkdir()
    for f in best.iterdir():
        (newer / f.name).write_bytes(f.read_bytes())
    (newer / "checkpoint.json").write_text(json.dumps({**manifest, "format": 99}))
    with pytest.raises(RlcapError, match="format 99 is newer than this rlcap reads"):
        open_run(newer, device="cpu")
