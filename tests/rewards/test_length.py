"""Length terms (rewards/length.py): the overlong penalty ([Yang26]'s form) and length-conditional masking
([Ye26]), by hand."""

from __future__ import annotations

import pytest
import torch

from rlcap.errors import ConfigError
from rlcap.rewards import RewardBatch, RewardConfig, build_reward
from rlcap.rewards.length import length_mask, overlong_penalty

REFS = ["a red circle", "a big red circle here"]  # 3 and 5 words: mean 4
CAPTIONS = ["a red circle on the left", "A red circle."]  # 6 words; 3 (the period is no word)
BATCH = RewardBatch(["1", "1"], [REFS, REFS])


def two(captions: list[str], batch: RewardBatch) -> torch.Tensor:
    """A reward of 2 for every caption (named by dotted path below)."""
    return torch.full((len(captions),), 2.0)


def test_the_pure_functions_by_hand():
    lengths, targets = torch.tensor([6.0, 3.0, 10.0]), torch.tensor([4.0, 4.0, 5.0])
    assert overlong_penalty(lengths, targets).tolist() == [-0.5, 0.0, -1.0]  # -(6-4)/4, under it, -(10-5)/5
    assert length_mask(lengths, targets, 1.25).tolist() == [0.0, 1.0, 0.0]  # 6 > 5, 3 <= 5, 10 > 6.25
    # CapRL++'s R_l less its constant: 0 up to T, -1 at E x T and past it (E = 1.5: -1 from 6 words for T = 4)
    floored = overlong_penalty(torch.tensor([3.0, 5.0, 6.0, 9.0]), torch.tensor([4.0] * 4), end=1.5)
    assert floored.tolist() == [0.0, -0.5, -1.0, -1.0]  # under it, -(5-4)/2, at 1.5 x 4, past it
    # E = 2: the unfloored slope up to twice the target, then the floor
    assert overlong_penalty(lengths, targets, end=2.0).tolist() == [-0.5, 0.0, -1.0]
    assert overlong_penalty(torch.tensor([20.0]), torch.tensor([5.0]), end=2.0).item() == -1.0  # unfloored: -3


def test_the_length_reward_against_the_references_or_a_fixed_target():
    with build_reward(RewardConfig(weights={"length": 1.0}), {}) as reward:
        assert reward(CAPTIONS, BATCH).tolist() == [-0.5, 0.0]  # target: the references' mean, 4 words
    with build_reward(RewardConfig(weights={"length": 1.0}, length_target=5), {}) as reward:
        assert reward(CAPTIONS, BATCH).tolist() == pytest.approx([-0.2, 0.0])  # -(6-5)/5
    with build_reward(RewardConfig(weights={"length": 1.0}, length_end=1.25), {}) as reward:
        assert reward(CAPTIONS, BATCH).tolist() == [-1.0, 0.0]  # 6 words past 1.25 x 4: the floor
    with build_reward(RewardConfig(weights={"length": 1.0}, length_target=5, length_end=1.5), {}) as reward:
        assert reward(CAPTIONS, BATCH).tolist() == pytest.approx([-0.4, 0.0])  # -(6-5)/(0.5 x 5)


def test_a_masked_reward_scores_0_past_the_ratio_and_the_sum_by_hand():
    name = "tests.rewards.test_length:two"
    cfg = RewardConfig(weights={"length": 1.0, name: 0.5}, length_mask={name: 1.25})
    with build_reward(cfg, {}) as reward:
        parts = reward.components(CAPTIONS, BATCH)
        assert parts[name].tolist() == [0.0, 2.0]  # 6 words > 1.25 * 4: masked; 3 words: kept
        assert reward(CAPTIONS, BATCH).tolist() == [-0.5, 1.0]  # 1.0 * [-0.5, 0] + 0.5 * [0, 2]


def test_length_settings_are_checked():
    with pytest.raises(ConfigError, match="reward.length_mask.cider: 'cider' is not a weighted reward"):
        RewardConfig(weights={"cider_d": 1.0}, length_mask={"cider": 1.5})
    with pytest.raises(ConfigError, match="expected a ratio > 0"):
        RewardConfig(weights={"cider_d": 1.0}, length_mask={"cider_d": 0.0})
    with pytest.raises(ConfigError, match="length_target"):
        RewardConfig(weights={"length": 1.0}, length_target=-1)
    for end in (1.0, 0.5, -2.0, float("nan")):
        with pytest.raises(ConfigError, match="reward.length_end: expected 0 .no floor. or a ratio > 1"):
            RewardConfig(weights={"length": 1.0}, length_end=end)
    assert RewardConfig(weights={"length": 1.0}).reads("length_end") is True
    assert RewardConfig(weights={"cider_d": 1.0}).reads("length_target") is False  # only the length reward's
    assert RewardConfig(weights={"length": 1.0}).reads("length_target") is True
