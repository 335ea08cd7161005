"""Baselines on small hand-computed tensors."""

import pytest
import torch

from rlcap.rl import (RunningMean, advantages, greedy_baseline, leave_one_out_baseline, no_baseline,
    running_mean_baseline, update_running_mean)


def test_greedy_baseline_repeats_each_image_n_times():
    out = greedy_baseline(torch.tensor([0.5, 2.0]), n=2)
    assert torch.equal(out, torch.tensor([0.5, 0.5, 2.0, 2.0]))


def test_greedy_baseline_n1_is_identity():
    assert torch.equal(greedy_baseline(torch.tensor([1.0, 3.0]), n=1), torch.tensor([1.0, 3.0]))


def test_greedy_baseline_is_detached():
    g = torch.tensor([1.0, 2.0], requires_grad=True)
    assert not greedy_baseline(g, 3).requires_grad


def test_leave_one_out_pairs():
    # image 0: [1, 2] -> [2, 1]; image 1: [3, 4] -> [4, 3]
    out = leave_one_out_baseline(torch.tensor([1.0, 2.0, 3.0, 4.0]), n=2)
    assert torch.equal(out, torch.tensor([2.0, 1.0, 4.0, 3.0]))


def test_leave_one_out_three_samples():
    # [3, 6, 0]: sum 9 -> [(9-3)/2, (9-6)/2, (9-0)/2] = [3, 1.5, 4.5]
    out = leave_one_out_baseline(torch.tensor([3.0, 6.0, 0.0]), n=3)
    assert torch.allclose(out, torch.tensor([3.0, 1.5, 4.5]))


def test_leave_one_out_needs_two_samples():
    with pytest.raises(ValueError, match="n >= 2"):
        leave_one_out_baseline(torch.tensor([1.0, 2.0]), n=1)


def test_leave_one_out_rejects_ragged_groups():
    with pytest.raises(ValueError, match="groups of n=2"):
        leave_one_out_baseline(torch.tensor([1.0, 2.0, 3.0]), n=2)


def test_no_baseline_is_zero():
    assert torch.equal(no_baseline(torch.tensor([1.0, -2.0])), torch.zeros(2))


def test_running_mean_first_update_takes_batch_mean_then_decays():
    state = RunningMean.init()
    assert torch.equal(running_mean_baseline(state, torch.tensor([5.0, 7.0])), torch.zeros(2))
    state = update_running_mean(state, torch.tensor([1.0, 3.0]), decay=0.9)  # mean 2
    assert state.steps == 1 and state.value.item() == pytest.approx(2.0)
    state = update_running_mean(state, torch.tensor([12.0]), decay=0.9)  # 0.9*2 + 0.1*12 = 3.0
    assert state.steps == 2 and state.value.item() == pytest.approx(3.0)
    assert torch.allclose(running_mean_baseline(state, torch.tensor([0.0, 0.0, 0.0])), torch.full((3,), 3.0))


def test_running_mean_update_is_pure():
    state = update_running_mean(RunningMean.init(), torch.tensor([2.0]), decay=0.5)
    new = update_running_mean(state, torch.tensor([4.0]), decay=0.5)  # 0.5*2 + 0.5*4 = 3
    assert state.value.item() == 2.0 and new.value.item() == 3.0


def test_running_mean_rejects_bad_decay():
    with pytest.raises(ValueError, match="decay"):
        update_running_mean(RunningMean.init(), torch.tensor([1.0]), decay=1.0)


def test_advantages_subtracts():
    out = advantages(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([2.0, 1.0, 4.0, 3.0]))
    assert torch.equal(out, torch.tensor([-1.0, 1.0, -1.0, 1.0]))


def test_advantages_refuses_broadcasting():
    with pytest.raises(ValueError, match="differ in shape"):
        advantages(torch.tensor([1.0, 2.0]), torch.tensor([1.0]))
