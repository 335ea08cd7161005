"""A killed actor-critic run (SIGKILL, in value pretraining or in the joint phase) resumes exactly:
the same losses step for step, and the same weights and optimizer states of both parts at the end."""

import pytest

from rlcap import api
from tests.train.killing import assert_resume_is_exact, assert_same_final_checkpoints
from tests.tiny import tiny_overrides

PRETRAIN_EPOCHS, RL_EPOCHS, STEPS_PER_EPOCH = 2, 3, 3  # 24 training images, 8 a batch


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.tiny import make_tiny_dataset

    folder = tmp_path_factory.mktemp("ac_resume")
    dataset, feats = make_tiny_dataset(folder)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "xe")))
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "embedding", **{
        "algorithm": "embedding", "embedding.epochs": 1, "embedding.batch_size": 8, "embedding.model.word_dim": 8,
        "embedding.model.hidden_dim": 8, "embedding.model.joint_dim": 8})))
    return dataset, feats, folder


@pytest.mark.parametrize("kill_step", [2, 10], ids=["in_value_pretraining", "in_joint_training"])
def test_killed_actor_critic_run_resumes_exactly(runs, tmp_path, kill_step):
    dataset, feats, folder = runs
    overrides = tiny_overrides(dataset, feats, tmp_path / "unused", **{
        "algorithm": "ac", "init_from": folder / "xe" / "best", "rl.epochs": RL_EPOCHS, "rl.batch_size": 8,
        "rl.n_samples": 2, "decode.max_len": 6, "optim.lr": 0.001, "ac.value_pretrain_epochs": PRETRAIN_EPOCHS,
        "reward.weights": "{cider_d: 1.0, embedding: 0.5}",
        "reward.paths": f"{{embedding: {folder / 'embedding' / 'best'}}}", "save_every": 2, "val.max_images": 2})
    total = (PRETRAIN_EPOCHS + RL_EPOCHS) * STEPS_PER_EPOCH
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", kill_step, total)
    assert_same_final_checkpoints(tmp_path / "reference", tmp_path / "killed", ["policy", "value"])
