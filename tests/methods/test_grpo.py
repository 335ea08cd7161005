"""GRPO (methods/grpo.py): its first update is SCST's with the group's mean as the baseline on the same samples,
a run trains through the CLI on the tiny shapes data with every setting, and a killed GRPO run, and a killed
run with a KL term, resume exactly after SIGKILL."""

from __future__ import annotations

import math

import pytest
import torch

from rlcap import api
from rlcap.train.checkpoint import load_checkpoint
from rlcap.train.logger import read_log
from tests.cli.in_process import run_cli
from tests.train.killing import EMPTY, assert_resume_is_exact
from tests.tiny import tiny_overrides

N = 3  # samples per image


@pytest.fixture
def xe_checkpoint(tiny_xe):
    return tiny_xe(3)  # trained once per test session


def _settings(init, **extra) -> dict:
    return {"init_from": init, "rl.epochs": 1, "rl.batch_size": 8, "rl.n_samples": N, "decode.max_len": 6,
            "optim.lr": 0.001, **extra}


def _gradients(monkeypatch, module, session, step, batch, reward) -> dict[str, torch.Tensor]:
    """The policy's gradient of the loss ``step`` hands its first optimizer step, the step itself not taken."""
    seen = []

    def capture(session_, loss, part="policy", **_):
        if not seen:
            session_.parts[part].optimizer.zero_grad(set_to_none=True)
            loss.backward()
            seen.append({k: p.grad.clone() for k, p in session_.parts[part].module.named_parameters()
                         if p.grad is not None})

    monkeypatch.setattr(module, "optimizer_step", capture)
    torch.manual_seed(11)  # the same samples for both methods
    step(session, batch, reward)
    return seen[0]


def test_the_first_update_is_scst_with_the_groups_mean_as_baseline(xe_checkpoint, tmp_path, monkeypatch):
    """One update, no scaling, no KL, the sequence-level ratio and DAPO's average: on the same samples, GRPO's
    gradient is SCST's with the leave-one-out baseline times (G - 1) / G (r_i - mean = (G-1)/G (r_i - mean of
    the others)): the documented constant (docs/RL.md, "GRPO and SCST")."""
    import rlcap.methods.grpo as grpo
    import rlcap.methods.scst as scst
    from rlcap.methods.sequence import train_reward
    from rlcap.train.session import start_session

    dataset, feats, init = xe_checkpoint
    runs = {"scst": {"algorithm": "scst", "scst.baseline": "leave_one_out"},
            "grpo": {"algorithm": "grpo", "grpo.scale": "none", "grpo.ratio": "sequence", "grpo.loss": "dapo"}}
    grads = {}
    for name, (module, step) in {"scst": (scst, scst.scst_step), "grpo": (grpo, grpo.grpo_step)}.items():
        session = start_session(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / name, **_settings(
            init, **runs[name]))))
        batch = next(session.data.splits["train"].batches(8, 1, seed=0, epoch=0))
        with train_reward(session) as reward:
            grads[name] = _gradients(monkeypatch, module, session, step, batch, reward)
    assert grads["grpo"].keys() == grads["scst"].keys() and grads["scst"]
    assert any(g.abs().sum() > 0 for g in grads["scst"].values())
    for key, g in grads["scst"].items():
        assert torch.allclose(grads["grpo"][key], (N - 1) / N * g, atol=1e-7, rtol=1e-5), key


def words_reward(captions, batch):
    """A user's reward named by dotted path: the caption's words, up to 4."""
    return torch.tensor([min(len(c.split()), 4) for c in captions], dtype=torch.float32)


@pytest.mark.parametrize("extra", [
    {},
    {"grpo.iterations": 3, "grpo.scale": "batch", "grpo.loss": "grpo", "grpo.ratio": "sequence",
     "grpo.epsilon_high": 0.28, "grpo.mask_truncated": "true",
     "reward.weights": "{tests.methods.test_grpo:words_reward: 1.0, cider_d: 1.0}"},
    {"grpo.iterations": 2, "grpo.scale": "none", "grpo.loss": "dr_grpo", "rl.kl_coef": 0.1,
     "reward.weights": "{cider_d: 1.0, bleu_4: 0.5}"},
    {"grpo.aggregation": "normalize_then_sum", "reward.weights": "{cider_d: 1.0, bleu_4: 0.5}"},
], ids=["trl_defaults", "dapo_gspo", "dr_grpo_kl", "gdpo"])
def test_a_grpo_run_trains_through_the_cli(xe_checkpoint, tmp_path, capsys, extra):
    dataset, feats, init = xe_checkpoint
    out = tmp_path / "grpo"
    argv = tiny_overrides(dataset, feats, out, **_settings(init, algorithm="grpo", **extra))
    rc, _, err = run_cli(capsys, "train", str(EMPTY), *argv)
    assert rc == 0, err
    records = read_log(out / "log.jsonl")
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    for key in ("loss", "reward", "advantage_std", "clipped", "entropy", "length"):
        assert all(math.isfinite(r[key]) for r in train), key
    assert ("kl" in train[0]) == ("rl.kl_coef" in extra)
    if extra.get("reward.weights") == "{cider_d: 1.0, bleu_4: 0.5}":  # each reward's own mean, summed: the reward
        assert all(r["reward"] == pytest.approx(r["reward/cider_d"] + 0.5 * r["reward/bleu_4"], rel=1e-5, abs=1e-6)
                   for r in train)
    if "grpo.aggregation" in extra:  # GDPO's last stage: the advantages normalised over the batch
        assert all(r["advantage_std"] == pytest.approx(1.0, abs=1e-3) for r in train)
        assert "summed, normalised over the batch (GDPO)" in next(r["text"] for r in records if r["split"] == "note")
    if extra.get("grpo.iterations", 1) > 1:  # later updates move the ratio off 1
        assert all(0 <= r["clipped"] <= 1 for r in train)
    else:
        assert all(r["clipped"] == 0 for r in train)
    assert "GRPO: advantages " in next(r["text"] for r in records if r["split"] == "note")
    ckpt = load_checkpoint(out / "last")
    before = load_checkpoint(init).weights["policy"]
    assert any(not torch.equal(before[k], ckpt.weights["policy"][k]) for k in before)
    assert ("reference" in ckpt.weights) == ("rl.kl_coef" in extra)


def test_grpo_refuses_a_group_of_one_and_the_beams_n_best():
    from rlcap.errors import ConfigError

    with pytest.raises(ConfigError, match="rl.n_samples must be at least 2, got 1"):
        api.load_run_config(None, ["algorithm=grpo", "rl.n_samples=1"])
    with pytest.raises(ConfigError, match="rl.sample_method must be 'sample', got 'beam'"):
        api.load_run_config(None, ["algorithm=grpo", "rl.sample_method=beam"])
    with pytest.raises(ConfigError, match=r"grpo.loss: 'sum' is not one of \['grpo', 'dr_grpo', 'dapo'\]"):
        api.load_run_config(None, ["algorithm=grpo", "grpo.loss=sum"])
    with pytest.raises(ConfigError, match=r"grpo.aggregation: 'mean' is not one of \['sum_then_normalize', "):
        api.load_run_config(None, ["algorithm=grpo", "grpo.aggregation=mean"])
    # GDPO normalises by its own two stages: grpo.scale is not read
    cfg = api.load_run_config(None, ["algorithm=grpo", "grpo.aggregation=normalize_then_sum"])
    assert not cfg.grpo.reads("scale") and api.load_run_config(None, ["algorithm=grpo"]).grpo.reads("scale")


RL_EPOCHS, RL_STEPS_PER_EPOCH = 6, 3  # 24 training images, 8 per batch


@pytest.mark.parametrize("algorithm,extra", [
    ("grpo", ["grpo.iterations=2", "grpo.epsilon=0.1", "grpo.scale=batch", "rl.kl_coef=0.05"]),
    ("scst", ["scst.baseline=leave_one_out", "rl.kl_coef=0.05"]),
], ids=["grpo_with_kl", "scst_with_kl"])
def test_killed_run_resumes_with_identical_losses_and_reference(xe_checkpoint, tmp_path, algorithm, extra):
    """The frozen reference is saved in every checkpoint and loaded back: the resumed run's losses (which hold
    beta * KL) are the uninterrupted run's, and its reference is still the starting policy, tensor for tensor."""
    dataset, feats, init = xe_checkpoint
    overrides = [*tiny_overrides(dataset, feats, tmp_path / "unused", **{
        "algorithm": algorithm, "init_from": init, "rl.epochs": RL_EPOCHS, "rl.batch_size": 8, "rl.n_samples": N,
        "decode.max_len": 6, "optim.lr": 0.001, "save_every": 2}), *extra]
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", 4, RL_EPOCHS * RL_STEPS_PER_EPOCH)
    start = load_checkpoint(init).weights["policy"]
    for run in ("reference", "killed"):
        saved = load_checkpoint(tmp_path / run / "last").weights
        assert saved["reference"].keys() == start.keys()
        assert all(torch.equal(saved["reference"][k], start[k]) for k in start)
        assert any(not torch.equal(saved["policy"][k], start[k]) for k in start)
