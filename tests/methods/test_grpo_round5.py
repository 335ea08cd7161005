"""GRPO's settings beside TRL's (methods/grpo.py): ``grpo.kl_ratio`` reaches the loss and is listed only where a KL
term reads it; a clip range whose upper side is below its lower (the opposite of clip-higher) and GSPO's sequence
ratio under a length-weighted average are each named in one warning line when a run starts, through the CLI."""

from __future__ import annotations

import logging

import pytest
import torch

from rlcap import api
from rlcap.methods.grpo import GrpoConfig
from rlcap.train.logger import read_log
from tests.cli.in_process import run_cli
from tests.methods.test_grpo import _gradients, _settings
from tests.train.killing import EMPTY
from tests.tiny import tiny_overrides

CLIP = "is below grpo.epsilon"
GSPO = "weighs each caption by its length, not 1/G as GSPO"


@pytest.fixture
def xe_checkpoint(tiny_xe):
    return tiny_xe(3)  # trained once per test session


def test_notes_name_an_upper_clip_below_the_lower_and_gspo_under_a_length_weighted_average():
    assert GrpoConfig(epsilon_high=0.1).notes() == [
        "grpo.epsilon_high=0.1 is below grpo.epsilon=0.2: the ratio may rise less than it may fall, the opposite of "
        "DAPO's clip-higher [Yu25] (null: epsilon)"]
    assert GrpoConfig(ratio="sequence").notes() == [
        "grpo.ratio=sequence with grpo.loss=dapo weighs each caption by its length, not 1/G as GSPO [Zheng25] does: "
        "set grpo.loss=grpo for GSPO's objective"]
    assert GSPO in GrpoConfig(ratio="sequence", loss="dr_grpo").notes()[0]
    for fine in (GrpoConfig(), GrpoConfig(epsilon_high=0.28), GrpoConfig(epsilon_high=0.2),
                 GrpoConfig(ratio="sequence", loss="grpo")):
        assert fine.notes() == []


@pytest.mark.parametrize("extra,expected", [
    ({"grpo.iterations": 2, "grpo.epsilon_high": 0.1, "grpo.ratio": "sequence"}, [CLIP, GSPO]),
    ({"grpo.iterations": 2, "grpo.epsilon_high": 0.28, "grpo.ratio": "sequence", "grpo.loss": "grpo"}, []),
], ids=["both_noted", "clip_higher_and_gspo"])
def test_a_run_names_each_setting_in_one_warning_line(xe_checkpoint, tmp_path, capsys, caplog, extra, expected):
    dataset, feats, init = xe_checkpoint
    argv = tiny_overrides(dataset, feats, tmp_path / "grpo", **_settings(init, algorithm="grpo", max_steps=1, **extra))
    with caplog.at_level(logging.WARNING, logger="rlcap.methods.grpo"):
        rc, _, err = run_cli(capsys, "train", str(EMPTY), *argv)
    assert rc == 0, err
    warned = [r.getMessage() for r in caplog.records if r.name == "rlcap.methods.grpo"]
    assert [next(needle for needle in (CLIP, GSPO) if needle in line) for line in warned] == expected
    assert all("\n" not in line for line in warned)


def test_kl_ratio_changes_the_kl_gradient_and_not_the_first_loss(xe_checkpoint, tmp_path, monkeypatch):
    """With the policy moved off its reference (so that k3 is not 0), the same samples: the first update's loss is
    the same with grpo.kl_ratio true and false (the ratio is 1), its gradient is not (docs/RL.md, "The KL term")."""
    import rlcap.methods.grpo as grpo
    from rlcap.methods.reference import add_reference
    from rlcap.methods.sequence import train_reward
    from rlcap.train.session import open_session, resume_or_start

    dataset, feats, init = xe_checkpoint
    losses, grads, seen, real = {}, {}, [], grpo.grpo_loss

    def recorded(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(grpo, "grpo_loss", recorded)
    for kl_ratio in (False, True):
        cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / str(kl_ratio), **_settings(
            init, algorithm="grpo", **{"rl.kl_coef": 0.5, "grpo.kl_ratio": kl_ratio, "rl.rollout_dropout": False})))
        session = open_session(cfg, ("train", "val"))
        add_reference(session)
        resume_or_start(session)
        with torch.no_grad():  # the policy moves; the reference stays the starting weights
            for param in session.model.parameters():
                param.add_(0.05 * torch.randn(param.shape, generator=torch.Generator().manual_seed(param.numel())))
        seen.clear()
        batch = next(session.data.splits["train"].batches(8, 1, seed=0, epoch=0))
        with train_reward(session) as reward:
            grads[kl_ratio] = _gradients(monkeypatch, grpo, session, grpo.grpo_step, batch, reward)
        losses[kl_ratio] = (float(seen[0].loss.detach()), float(seen[0].kl))
    assert losses[True][1] > 1e-4  # a KL term that acts
    assert losses[True] == pytest.approx(losses[False], rel=1e-6)
    assert any(not torch.allclose(grads[True][k], grads[False][k], atol=1e-6) for k in grads[False])


def _listed(capsys, *argv: str) -> list[str]:
    rc, out, err = run_cli(capsys, "train", "--help-config", *argv)
    assert rc == 0, err
    lines = out.splitlines()
    return [line.split()[0] for line in lines[1:lines.index("")]]


def test_help_config_lists_kl_ratio_only_with_a_kl_term(xe_checkpoint, tmp_path, capsys):
    assert "grpo.kl_ratio" not in _listed(capsys, "algorithm=grpo")
    assert "grpo.kl_ratio" in _listed(capsys, "algorithm=grpo", "rl.kl_coef=0.04")
    dataset, feats, init = xe_checkpoint
    out = tmp_path / "grpo"
    argv = tiny_overrides(dataset, feats, out, **_settings(init, algorithm="grpo", max_steps=1,
                                                            **{"rl.kl_coef": 0.04, "grpo.kl_ratio": "true"}))
    rc, _, err = run_cli(capsys, "train", str(EMPTY), *argv)
    assert rc == 0, err
    note = next(r["text"] for r in read_log(out / "log.jsonl") if r["split"] == "note" and "GRPO:" in r["text"])
    assert "KL weight 0.04 (k3 times the ratio)" in note
