"""A short CPU smoke run per RL method: parameters change, losses stay finite, faults are handled."""

import json
import logging
import math
from pathlib import Path

import pytest
import torch

from rlcap import api
from rlcap.rewards import NonFiniteRewardError
from rlcap.train.checkpoint import load_checkpoint
from rlcap.train.logger import read_log
from tests.tiny import tiny_overrides


@pytest.fixture
def xe_checkpoint(tiny_xe):
    return tiny_xe(3)  # trained once per test session


def _rl(dataset, feats, init, out, algorithm, **extra):
    items = {"algorithm": algorithm, "init_from": init, "rl.epochs": 1, "rl.batch_size": 8, "rl.n_samples": 3,
             "decode.max_len": 6, "optim.lr": 0.001}
    items.update(extra)
    return api.load_run_config(None, tiny_overrides(dataset, feats, out, **items))


METHODS = {
    "scst": ("scst", {}),
    "sll_me": ("sll_me", {}),
    "sll_me_greedy": ("sll_me", {"sll_me.baseline": "greedy"}),
    "sll_sle": ("sll_sle", {}),
    "sll_sle_leave_one_out": ("sll_sle", {"sll_sle.baseline": "leave_one_out"}),
    "scst_leave_one_out": ("scst", {"scst.baseline": "leave_one_out"}),
    "scst_running_mean": ("scst", {"scst.baseline": "running_mean"}),
    "scst_no_baseline": ("scst", {"scst.baseline": "none"}),
    "scst_beam": ("scst", {"rl.sample_method": "beam"}),
    "scst_bleu_mix": ("scst", {"reward.weights": "{cider_d: 1.0, bleu_4: 0.5}"}),
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_rl_method_smoke(xe_checkpoint, tmp_path, method):
    dataset, feats, init = xe_checkpoint
    algorithm, extra = METHODS[method]
    result = api.train(_rl(dataset, feats, init, tmp_path / method, algorithm, **extra))
    assert result.steps == math.ceil(24 / 8)
    records = read_log(tmp_path / method / "log.jsonl")
    train = [r for r in records if r["split"] == "train"]
    assert train and all(math.isfinite(r["loss"]) and math.isfinite(r["reward"]) for r in train)
    for key in ("reward", "baseline", "advantage", "entropy", "length", "sample_s", "reward_s", "backward_s"):
        assert key in train[0]
    if method == "scst_bleu_mix":  # a summed reward logs each reward's own mean: the step's reward is their sum
        for r in train:
            assert r["reward"] == pytest.approx(r["reward/cider_d"] + 0.5 * r["reward/bleu_4"], rel=1e-5, abs=1e-6)
    else:
        assert not [k for k in train[0] if k.startswith("reward/")]
    note = next(r["text"] for r in records if r["split"] == "note")
    assert "EOS counts as a token in the reward" in note and "samples per image: 3" in note
    before, after = load_checkpoint(init).weights["policy"], load_checkpoint(tmp_path / method / "last").weights["policy"]
    assert any(not torch.equal(before[k], after[k]) for k in before)


def nan_reward(captions, batch):
    return torch.full((len(captions),), float("nan"))


def test_nan_reward_raises_naming_the_reward(xe_checkpoint, tmp_path):
    dataset, feats, init = xe_checkpoint
    cfg = _rl(dataset, feats, init, tmp_path / "nan", "scst",
              **{"reward.weights": "{tests.methods.test_rl_loops:nan_reward: 1.0}"})
    with pytest.raises(NonFiniteRewardError, match="nan_reward"):
        api.train(cfg)


def test_nan_reward_can_be_zeroed(xe_checkpoint, tmp_path):
    dataset, feats, init = xe_checkpoint
    cfg = _rl(dataset, feats, init, tmp_path / "nan0", "scst",
              **{"reward.weights": "{tests.methods.test_rl_loops:nan_reward: 1.0, cider_d: 1.0}",
                 "reward.nonfinite": "zero"})
    result = api.train(cfg)
    assert result.steps == 3


def test_empty_samples_score_zero_and_keep_the_loss_finite(xe_checkpoint, tmp_path):
    """A policy that ends every caption at once (EOS first): rewards 0, finite loss, no crash."""
    from rlcap.data.vocab import EOS
    from rlcap.methods.scst import scst_step
    from rlcap.methods.sequence import train_reward
    from rlcap.train.session import start_session

    dataset, feats, init = xe_checkpoint
    session = start_session(_rl(dataset, feats, init, tmp_path / "eos", "scst", **{"model.dropout": 0.0}))
    with torch.no_grad():
        session.model.logit.bias[EOS] = 1e4  # every distribution puts all its mass on EOS
    train = session.data.splits["train"]
    batch = next(train.batches(4, 1, seed=0, epoch=0))
    with train_reward(session) as reward:
        stats = scst_step(session, batch, reward)
    assert stats["reward"] == 0.0 and stats["baseline"] == 0.0 and stats["length"] == 0.0
    assert math.isfinite(stats["loss"])


def test_rl_run_resumes_without_restating_the_model(xe_checkpoint, tmp_path):
    """An RL config names only init_from; resuming takes the architecture from the run's checkpoint
    and replays the same losses as an uninterrupted run."""
    dataset, feats, init = xe_checkpoint

    def config(out, epochs, *extra):
        items = tiny_overrides(dataset, feats, out, **{"algorithm": "scst", "init_from": init, "rl.epochs": epochs,
                                                      "rl.batch_size": 8, "rl.n_samples": 3, "decode.max_len": 6,
                                                      "optim.lr": 0.001})
        return api.load_run_config(None, [i for i in items if not i.startswith("model.")] + list(extra))

    api.train(config(tmp_path / "reference", 2))
    api.train(config(tmp_path / "resumed", 1))
    api.train(config(tmp_path / "resumed", 2), resume=True)
    losses = {}
    for name in ("reference", "resumed"):
        losses[name] = {r["step"]: r["loss"] for r in read_log(tmp_path / name / "log.jsonl") if r["split"] == "train"}
    assert max(losses["resumed"]) == 2 * math.ceil(24 / 8), "the resumed run must train its second epoch"
    assert losses["resumed"] == losses["reference"]


def test_model_keys_beside_init_from_are_reported_unused(xe_checkpoint, tmp_path, caplog, capsys):
    """A run with init_from builds the checkpoint's architecture: a model key set to something else is named
    in a warning (not silently dropped), and `--help-config` leaves the model keys out of such a run's keys."""
    from rlcap.cli import main

    dataset, feats, init = xe_checkpoint
    items = tiny_overrides(dataset, feats, tmp_path / "run", **{"algorithm": "scst", "init_from": init, "rl.epochs": 1,
                                                               "rl.batch_size": 8, "rl.n_samples": 2, "max_steps": 1})
    trained = json.loads((Path(init).parent / "config.json").read_text())["model"]
    cfg = api.load_run_config(None, [i for i in items if not i.startswith("model.")]
                              + [f"model.hidden_dim={trained['hidden_dim'] + 8}"])
    with caplog.at_level(logging.WARNING):
        api.train(cfg)
    assert f"model.hidden_dim={trained['hidden_dim'] + 8} are not used" in caplog.text
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"] == trained

    assert main(["train", "--help-config", "algorithm=scst", f"init_from={init}"]) == 0
    shown = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line[:1].isalpha()]
    assert "optim.lr" in shown and not any(key.startswith("model.") for key in shown)


@pytest.mark.parametrize("dropout", [True, False])
def test_rollout_dropout_sets_the_mode_captions_are_sampled_in(xe_checkpoint, tmp_path, monkeypatch, dropout):
    import rlcap.methods.scst as scst

    dataset, feats, init = xe_checkpoint
    modes, real = [], scst.rollout

    def spy(model, *args, **kwargs):
        modes.append(model.training)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(scst, "rollout", spy)
    api.train(_rl(dataset, feats, init, tmp_path / "run", "scst", **{"rl.rollout_dropout": dropout}))
    assert len(modes) == math.ceil(24 / 8) and all(m is dropout for m in modes)


def test_an_algorithm_section_refuses_keys_of_another():
    from rlcap.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown config key sll_sle.entropy_weight; valid keys in sll_sle: alpha, "
                                          "baseline"):
        api.load_run_config(None, ["algorithm=sll_sle", "sll_sle.entropy_weight=0.01"])
    with pytest.raises(ConfigError, match="unknown config key rl.baseline"):
        api.load_run_config(None, ["algorithm=scst", "rl.baseline=greedy"])


def test_sll_sle_baselines(xe_checkpoint, tmp_path):
    """greedy: the greedy caption's reward (not the samples' mean); leave_one_out: centred per image, so the
    logged mean baseline equals the mean reward."""
    from rlcap.errors import ConfigError

    dataset, feats, init = xe_checkpoint
    for baseline, named in (("greedy", "baseline: greedy (self-critical)"), ("leave_one_out", "baseline: leave-one-out")):
        out = tmp_path / baseline
        api.train(_rl(dataset, feats, init, out, "sll_sle", **{"sll_sle.baseline": baseline}))
        records = read_log(out / "log.jsonl")
        assert named in next(r["text"] for r in records if r["split"] == "note")
        train = [r for r in records if r["split"] == "train"]
        centred = [math.isclose(r["baseline"], r["reward"], abs_tol=1e-5) for r in train]
        assert all(centred) if baseline == "leave_one_out" else not all(centred)
    with pytest.raises(ConfigError, match="sll_sle.baseline: 'running_mean' is not one of"):
        api.load_run_config(None, ["algorithm=sll_sle", "sll_sle.baseline=running_mean"])


class _Closeable:
    """A reward holding a resource (as METEOR holds a Java process)."""

    def __init__(self):
        self.closed = 0

    def __call__(self, captions, batch):
        return torch.zeros(len(captions))

    def close(self):
        self.closed += 1


CLOSEABLE = _Closeable()


@pytest.mark.parametrize("algorithm", ["scst", "sll_me", "sll_sle"])
def test_the_reward_is_closed_when_the_run_ends(xe_checkpoint, tmp_path, algorithm):
    dataset, feats, init = xe_checkpoint
    before = CLOSEABLE.closed
    api.train(_rl(dataset, feats, init, tmp_path / "run", algorithm,
                  **{"reward.weights": "{tests.methods.test_rl_loops:CLOSEABLE: 1.0, cider_d: 1.0}"}))
    assert CLOSEABLE.closed == before + 1
