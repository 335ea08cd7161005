"""WeightedReward: weights, shape checks and non-finite scores (NaN / inf)."""

import logging
import math

import pytest
import torch

from rlcap.errors import RlcapError
from rlcap.rewards import NonFiniteRewardError, RewardBatch, WeightedReward

CAPTIONS = ["a dog", "a cat", ""]
BATCH = RewardBatch(image_ids=["1", "1", "2"], refs=[["a dog"], ["a dog"], ["a cat"]])


def length(captions, batch):
    return torch.tensor([float(len(c.split())) for c in captions])


def constant(value):
    def reward(captions, batch):
        return torch.full((len(captions),), value)
    return reward


def nan_on_second(captions, batch):
    return torch.tensor([1.0, math.nan, 2.0])


def inf_on_first(captions, batch):
    return torch.tensor([math.inf, 1.0, 1.0])


def test_weighted_sum_hand_computed():
    reward = WeightedReward({"len": length, "one": constant(1.0)}, {"len": 2.0, "one": 0.5})
    # 2 * [2, 2, 0] + 0.5 * [1, 1, 1] = [4.5, 4.5, 0.5]
    assert torch.allclose(reward(CAPTIONS, BATCH), torch.tensor([4.5, 4.5, 0.5]))
    parts = reward.components(CAPTIONS, BATCH)
    assert torch.equal(parts["len"], torch.tensor([2.0, 2.0, 0.0]))
    assert torch.equal(parts["one"], torch.ones(3))


def test_nan_raises_naming_reward_and_caption():
    reward = WeightedReward({"len": length, "flaky": nan_on_second}, {"len": 1.0, "flaky": 1.0})
    with pytest.raises(NonFiniteRewardError, match=r"'flaky' returned nan for caption 1 'a cat' \(image 1\)"):
        reward(CAPTIONS, BATCH)


def test_inf_raises_and_is_an_rlcap_error():
    reward = WeightedReward({"boom": inf_on_first}, {"boom": 1.0})
    with pytest.raises(RlcapError, match=r"'boom' returned inf for caption 0 'a dog'"):
        reward(CAPTIONS, BATCH)


def test_nonfinite_zero_replaces_and_warns(caplog):
    reward = WeightedReward({"flaky": nan_on_second, "boom": inf_on_first}, {"flaky": 1.0, "boom": 1.0},
                           nonfinite="zero")
    with caplog.at_level(logging.WARNING, logger="rlcap.rewards.combine"):
        out = reward(CAPTIONS, BATCH)
    # flaky [1, 0, 2] + boom [0, 1, 1]
    assert torch.equal(out, torch.tensor([1.0, 1.0, 3.0]))
    assert [r.getMessage() for r in caplog.records] == [
        "reward 'flaky' returned NaN or inf for 1 of 3 captions of this batch, scored 0 "
        "(the first: nan for caption 1 'a cat' (image 1))",
        "reward 'boom' returned NaN or inf for 1 of 3 captions of this batch, scored 0 "
        "(the first: inf for caption 0 'a dog' (image 1))"]


def test_nonfinite_zero_warns_once_per_batch_with_the_count(caplog):
    def two_bad(captions, batch):
        return torch.tensor([math.nan, 1.0, -math.inf])

    reward = WeightedReward({"flaky": two_bad}, {"flaky": 1.0}, nonfinite="zero")
    with caplog.at_level(logging.WARNING, logger="rlcap.rewards.combine"):
        assert torch.equal(reward(CAPTIONS, BATCH), torch.tensor([0.0, 1.0, 0.0]))
    assert [r.getMessage() for r in caplog.records] == [
        "reward 'flaky' returned NaN or inf for 2 of 3 captions of this batch, scored 0 "
        "(the first: nan for caption 0 'a dog' (image 1))"]


def test_wrong_shape_is_reported():
    reward = WeightedReward({"scalar": lambda c, b: torch.tensor(1.0)}, {"scalar": 1.0})
    with pytest.raises(RlcapError, match=r"'scalar' returned \(\); expected a tensor of shape \(3,\)"):
        reward(CAPTIONS, BATCH)


def test_batch_must_match_captions():
    reward = WeightedReward({"len": length}, {"len": 1.0})
    with pytest.raises(ValueError, match="2 captions but 3 image ids"):
        reward(CAPTIONS[:2], BATCH)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="differ"):
        WeightedReward({"len": length}, {"other": 1.0})
    with pytest.raises(ValueError, match="nonfinite"):
        WeightedReward({"len": length}, {"len": 1.0}, nonfinite="ignore")


def test_score_hands_back_each_rewards_own_scores_and_their_means():
    from rlcap.rewards.combine import part_means, score

    reward = WeightedReward({"len": length, "one": constant(1.0)}, {"len": 2.0, "one": 0.5})
    parts = {}
    assert torch.allclose(score(reward, CAPTIONS, BATCH, parts=parts), torch.tensor([4.5, 4.5, 0.5]))
    assert torch.equal(parts["len"], torch.tensor([2.0, 2.0, 0.0])) and torch.equal(parts["one"], torch.ones(3))
    means = part_means(parts)  # unweighted: len's mean is 4/3, not 8/3
    assert set(means) == {"reward/len", "reward/one"}
    assert means["reward/len"].item() == pytest.approx(4 / 3) and means["reward/one"].item() == 1.0
    single = {}
    score(WeightedReward({"len": length}, {"len": 1.0}), CAPTIONS, BATCH, parts=single)
    assert part_means(single) == {}  # one reward: its mean is the step's "reward"
    plain = {}
    score(length, CAPTIONS, BATCH, parts=plain)  # not a WeightedReward: nothing to split
    assert plain == {}
