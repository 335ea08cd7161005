"""GDPO's advantages (rl/grpo.py: decoupled_sum, batch_normalised; [Liu26]) by hand: each reward normalised in its
group before the weighted sum keeps apart the reward combinations the group advantage of the sum makes equal, and
the two stages equal TRL's ``multi_objective_aggregation="normalize_then_sum"`` as its GRPOTrainer writes it."""

import math

import pytest
import torch

from rlcap.rl.grpo import batch_normalised, decoupled_sum, group_advantages

A = 1 / (math.sqrt(0.5) + 1e-4)  # a group of two with rewards 0 and 1: advantages -0.5 A and 0.5 A


def test_distinct_reward_combinations_keep_distinct_advantages():
    # image 1: (0, 0) against (1, 1); image 2: (0, 0) against (1, 0)
    parts = {"a": torch.tensor([0.0, 1.0, 0.0, 1.0]), "b": torch.tensor([0.0, 1.0, 0.0, 0.0])}
    summed = parts["a"] + parts["b"]
    # the group advantage of the sum: both images about +-0.7070 (sums 0, 2 and 0, 1), the second reward's part of
    # image 1 lost
    two = 1 / (math.sqrt(2.0) + 1e-4)
    got = group_advantages(summed, 2, "group")
    assert torch.allclose(got, torch.tensor([-two, two, -0.5 * A, 0.5 * A]))
    assert torch.allclose(got[:2], got[2:], atol=1e-4)
    # GDPO: image 1 earns twice what image 2 does; b is constant in image 2, so its part there is 0
    assert torch.allclose(decoupled_sum(parts, {"a": 1.0, "b": 1.0}, 2), torch.tensor([-1.0, 1.0, -0.5, 0.5]) * A)
    # with weights
    assert torch.allclose(decoupled_sum(parts, {"a": 1.0, "b": 3.0}, 2), torch.tensor([-2.0, 2.0, -0.5, 0.5]) * A)


def test_batch_normalised_by_hand():
    values = torch.tensor([-1.0, 1.0, -0.5, 0.5])
    # mean 0, unbiased std sqrt((1 + 1 + 0.25 + 0.25) / 3)
    std = math.sqrt(2.5 / 3)
    got = batch_normalised(values, values.mean(), values.std())
    assert torch.allclose(got, values / (std + 1e-4))
    assert torch.allclose(batch_normalised(values, torch.tensor(1.0), torch.tensor(2.0)), (values - 1) / (2 + 1e-4))


def _trls(per_func: torch.Tensor, weights: torch.Tensor, g: int) -> torch.Tensor:
    """TRL 1.16's GRPOTrainer._generate_and_score_completions, normalize_then_sum, written out again (every reward
    scored, one process): (N, K) rewards -> (N,) advantages."""
    grouped = per_func.view(-1, g, per_func.size(1))
    mean_k = grouped.mean(dim=1, keepdim=True)
    std_k = grouped.std(dim=1, keepdim=True)
    rewards = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, per_func.size(1))
    rewards = (rewards * weights.unsqueeze(0)).sum(dim=1)
    return (rewards - rewards.mean()) / (rewards.std() + 1e-4)


@pytest.mark.parametrize("g", [2, 5])
def test_the_two_stages_equal_trls(g):
    torch.manual_seed(0)
    per_func = torch.rand(4 * g, 3)
    weights = {"cider_d": 1.0, "qa_utility": 6.5, "bleu_4": 0.5}
    parts = {name: per_func[:, k] for k, name in enumerate(weights)}
    summed = decoupled_sum(parts, weights, g)
    got = batch_normalised(summed, summed.mean(), summed.std())
    assert torch.allclose(got, _trls(per_func, torch.tensor(list(weights.values())), g), atol=1e-6)
    assert got.std().item() == pytest.approx(1.0, abs=1e-3)  # the range does not grow with the rewards


def test_decoupled_sum_refuses_a_reward_without_weight():
    with pytest.raises(ValueError, match=r"no weight for \['b'\]"):
        decoupled_sum({"a": torch.zeros(2), "b": torch.zeros(2)}, {"a": 1.0}, 2)
    with pytest.raises(ValueError, match="no rewards given"):
        decoupled_sum({}, {}, 2)
