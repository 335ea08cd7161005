"""Per-word credit on small hand-computed tensors (expected values written out)."""

import math

import pytest
import torch

from rlcap.rl import (baseline_loss, discounted_returns, mc_q_estimates, reinforce_loss, segment_returns, td_advantages,
    terminal_rewards, value_advantages, value_loss)

NAN = math.nan
# Two captions, T = 3: the first fills the row, the second has 2 valid steps and one padded.
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
VALUES = torch.tensor([[1.0, 1.5, 2.0], [4.0, 6.0, 9.0]])  # 9.0 sits on padding
FINAL = torch.tensor([2.0, 5.0])


# discounted_returns ([Wang18 eq. 24])

def test_discounted_returns_hand_computed():
    rewards = torch.tensor([[1.0, 0.0, 2.0], [3.0, 5.0, 9.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    # row 0: G2 = 2, G1 = 0 + 0.5 * 2 = 1, G0 = 1 + 0.5 * 1 = 1.5; row 1: padding (5, 9) ignored
    expected = torch.tensor([[1.5, 1.0, 2.0], [3.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(discounted_returns(rewards, mask, 0.5), expected)


def test_discounted_returns_hrl_gamma_four_steps():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    g = 0.95
    expected = torch.tensor([
        [1 + g * 2 + g**2 * 3 + g**3 * 4, 2 + g * 3 + g**2 * 4, 3 + g * 4, 4.0],
        [1 + g + g**2, 1 + g, 1.0, 0.0],
    ])
    assert torch.allclose(discounted_returns(rewards, mask, g), expected)


def test_discounted_returns_of_terminal_reward_gamma_1_is_the_reward_everywhere():
    out = discounted_returns(terminal_rewards(FINAL, MASK), MASK, 1.0)
    assert torch.equal(out, torch.tensor([[2.0, 2.0, 2.0], [5.0, 5.0, 0.0]]))


def test_discounted_returns_ignores_nan_at_padding_and_is_detached():
    rewards = torch.tensor([[1.0, NAN]], requires_grad=True)
    out = discounted_returns(rewards, torch.tensor([[1, 0]]), 0.9)
    assert torch.equal(out, torch.tensor([[1.0, 0.0]]))
    assert not out.requires_grad


# terminal_rewards

def test_terminal_rewards_places_reward_at_last_valid_step():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    out = terminal_rewards(torch.tensor([2.0, 5.0, 7.0]), mask)
    # the empty row has no step to credit
    assert torch.equal(out, torch.tensor([[0.0, 0.0, 2.0], [0.0, 5.0, 0.0], [0.0, 0.0, 0.0]]))


# value_advantages ([Shi18 eq. 10])

def test_value_advantages_sequence_reward_hand_computed():
    # A_t = R - v(s_t): [2-1, 2-1.5, 2-2], [5-4, 5-6, padding]
    out = value_advantages(FINAL, VALUES, MASK)
    assert torch.equal(out, torch.tensor([[1.0, 0.5, 0.0], [1.0, -1.0, 0.0]]))


def test_value_advantages_per_step_returns():
    returns = torch.tensor([[1.5, 1.0, 2.0], [3.0, 5.0, 7.0]])
    out = value_advantages(returns, VALUES, MASK)
    assert torch.equal(out, torch.tensor([[0.5, -0.5, 0.0], [-1.0, -1.0, 0.0]]))


def test_value_advantages_carry_no_gradient_into_the_value_net():
    values = VALUES.clone().requires_grad_(True)
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]], requires_grad=True)
    adv = value_advantages(FINAL, values, MASK)
    assert not adv.requires_grad
    reinforce_loss(logprobs, MASK, adv).backward()
    assert values.grad is None
    # d loss / d logprob_it = -A_it * m_it / 5
    assert torch.allclose(logprobs.grad, torch.tensor([[-0.2, -0.1, 0.0], [-0.2, 0.2, 0.0]]))


def test_value_advantages_ignore_nan_values_at_padding():
    values = torch.tensor([[1.0, NAN]])
    out = value_advantages(torch.tensor([3.0]), values, torch.tensor([[1, 0]]))
    assert torch.equal(out, torch.tensor([[2.0, 0.0]]))


# td_advantages

def test_td_advantages_terminal_reward_hand_computed():
    rewards = terminal_rewards(FINAL, MASK)  # [[0, 0, 2], [0, 5, 0]]
    # row 0: 0 + .5*1.5 - 1 = -0.25; 0 + .5*2 - 1.5 = -0.5; 2 + 0 - 2 = 0 (terminal value 0)
    # row 1: 0 + .5*6 - 4 = -1; 5 + 0 - 6 = -1 (v after the last step is 0, not the padded 9); padding 0
    out = td_advantages(rewards, VALUES, MASK, 0.5)
    assert torch.equal(out, torch.tensor([[-0.25, -0.5, 0.0], [-1.0, -1.0, 0.0]]))


def test_td_advantages_immediate_rewards():
    rewards = torch.tensor([[1.0, -1.0, 0.5], [2.0, 0.0, 3.0]])
    # row 0: 1 + 1*1.5 - 1 = 1.5; -1 + 2 - 1.5 = -0.5; 0.5 - 2 = -1.5; row 1: 2 + 6 - 4 = 4; 0 - 6 = -6
    out = td_advantages(rewards, VALUES, MASK, 1.0)
    assert torch.equal(out, torch.tensor([[1.5, -0.5, -1.5], [4.0, -6.0, 0.0]]))


def test_td_advantages_gamma_1_telescope_to_reward_minus_first_value():
    out = td_advantages(terminal_rewards(FINAL, MASK), VALUES, MASK, 1.0)
    assert torch.equal(out.sum(dim=1), FINAL - VALUES[:, 0])  # [2 - 1, 5 - 4]


def test_td_advantages_are_detached():
    values = VALUES.clone().requires_grad_(True)
    assert not td_advantages(torch.zeros(2, 3), values, MASK, 0.95).requires_grad


# value_loss ([Shi18 eq. 9/11])

def test_value_loss_hand_computed_and_gradient():
    values = VALUES.clone().requires_grad_(True)
    targets = FINAL.clone().requires_grad_(True)
    loss = value_loss(values, targets, MASK)
    # ((1-2)^2 + (1.5-2)^2 + 0 + (4-5)^2 + (6-5)^2) / 5 = 3.25 / 5
    assert loss.item() == pytest.approx(0.65)
    loss.backward()
    # d/dv = 2 (v - R) m / 5; nothing into the targets, nothing at padding
    assert torch.allclose(values.grad, torch.tensor([[-0.4, -0.2, 0.0], [-0.4, 0.4, 0.0]]))
    assert targets.grad is None


def test_value_loss_per_step_targets_and_nan_padding():
    values = torch.tensor([[1.0, 2.0], [3.0, NAN]], requires_grad=True)
    targets = torch.tensor([[0.0, 4.0], [1.0, NAN]])
    loss = value_loss(values, targets, torch.tensor([[1, 1], [1, 0]]))
    assert loss.item() == pytest.approx((1 + 4 + 4) / 3)
    loss.backward()
    assert torch.allclose(values.grad, torch.tensor([[2 / 3, -4 / 3], [4 / 3, 0.0]]))


def test_value_loss_empty_mask_is_zero():
    assert value_loss(torch.ones(2, 2), torch.ones(2), torch.zeros(2, 2)).item() == 0.0


# mc_q_estimates ([Liu17], Monte-Carlo rollouts)

def test_mc_q_estimates_hand_computed():
    rollout = torch.tensor([
        [[1.0, 3.0], [0.0, 1.0], [NAN, NAN]],  # last step: ignored, Q = the caption's own reward 2
        [[4.0, 6.0], [8.0, 8.0], [NAN, 9.0]],  # step 1 is the last valid one: Q = 5, not 8; step 2 is padding
    ])
    out = mc_q_estimates(rollout, FINAL, MASK)
    assert torch.equal(out, torch.tensor([[2.0, 0.5, 2.0], [5.0, 5.0, 0.0]]))


def test_mc_q_estimates_three_rollouts_and_a_one_word_caption():
    rollout = torch.tensor([
        [[0.0, 3.0, 6.0], [1.0, 1.0, 4.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
        [[7.0, 7.0, 7.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
    ])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    out = mc_q_estimates(rollout, torch.tensor([1.5, 0.25]), mask)
    assert torch.equal(out, torch.tensor([[3.0, 2.0, 1.5, 0.0], [0.25, 0.0, 0.0, 0.0]]))


def test_mc_q_estimates_shape_errors():
    with pytest.raises(ValueError, match=r"rollout_rewards of shape \(2, 3, K\)"):
        mc_q_estimates(torch.zeros(2, 3), FINAL, MASK)
    with pytest.raises(ValueError, match=r"rollout_rewards of shape \(2, 3, K\)"):
        mc_q_estimates(torch.zeros(2, 3, 0), FINAL, MASK)
    with pytest.raises(ValueError, match=r"final_rewards of shape \(2,\)"):
        mc_q_estimates(torch.zeros(2, 3, 2), torch.zeros(2, 1), MASK)


# baseline_loss ([Liu17], L_phi) and the Q - B advantage

def test_baseline_loss_hand_computed_and_gradient():
    baseline = torch.tensor([[1.0, 1.0, 1.0], [5.0, 4.0, 0.0]], requires_grad=True)
    q = torch.tensor([[2.0, 0.5, 2.0], [5.0, 5.0, 0.0]], requires_grad=True)
    loss = baseline_loss(baseline, q, MASK)
    # ((2-1)^2 + (0.5-1)^2 + (2-1)^2 + 0 + (5-4)^2) / 5 = 3.25 / 5
    assert loss.item() == pytest.approx(0.65)
    loss.backward()
    # d/dB = 2 (B - Q) m / 5
    assert torch.allclose(baseline.grad, torch.tensor([[-0.4, 0.2, -0.4], [0.0, -0.4, 0.0]]))
    assert q.grad is None


def test_q_minus_baseline_advantage():
    q = torch.tensor([[2.0, 0.5, 2.0], [5.0, 5.0, 0.0]])
    baseline = torch.tensor([[1.0, 1.0, 1.0], [5.0, 4.0, 3.0]], requires_grad=True)
    adv = value_advantages(q, baseline, MASK)
    assert torch.equal(adv, torch.tensor([[1.0, -0.5, 1.0], [0.0, 1.0, 0.0]]))
    assert not adv.requires_grad


# segment_returns ([Wang18 eq. 25])

def test_segment_returns_hand_computed():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 9.0, 9.0]])
    segment_end = torch.tensor([[0, 1, 0, 0], [1, 0, 1, 0]], dtype=torch.bool)  # row 1's end at t=2 is padding
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    # row 0: segments {0, 1}, {2, 3} with f = 3, 7: R = 3 + 0.5 * 7 = 6.5, 7
    # row 1: segments {0}, {1} (the last valid step ends a segment) with f = 1, 1: R = 1.5, 1
    out = segment_returns(rewards, segment_end, mask, 0.5)
    assert torch.equal(out, torch.tensor([[6.5, 6.5, 7.0, 7.0], [1.5, 1.0, 0.0, 0.0]]))


def test_segment_returns_one_step_segments_are_word_returns():
    rewards = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    ones = torch.ones(2, 3, dtype=torch.bool)
    assert torch.allclose(segment_returns(rewards, ones, MASK, 0.95), discounted_returns(rewards, MASK, 0.95))


def test_segment_returns_one_segment_is_the_undiscounted_sum():
    rewards = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    out = segment_returns(rewards, torch.zeros(2, 3, dtype=torch.bool), MASK, 0.5)
    assert torch.equal(out, torch.tensor([[6.0, 6.0, 6.0], [9.0, 9.0, 0.0]]))


def test_segment_returns_empty_row():
    out = segment_returns(torch.ones(1, 3), torch.ones(1, 3), torch.zeros(1, 3), 0.5)
    assert torch.equal(out, torch.zeros(1, 3))


# errors shared by every function

@pytest.mark.parametrize("call", [
    lambda m: discounted_returns(torch.zeros(2, 3), m, 0.5),
    lambda m: terminal_rewards(torch.zeros(2), m),
    lambda m: value_advantages(torch.zeros(2), torch.zeros(2, 3), m),
    lambda m: td_advantages(torch.zeros(2, 3), torch.zeros(2, 3), m, 0.5),
    lambda m: value_loss(torch.zeros(2, 3), torch.zeros(2), m),
    lambda m: mc_q_estimates(torch.zeros(2, 3, 1), torch.zeros(2), m),
    lambda m: baseline_loss(torch.zeros(2, 3), torch.zeros(2, 3), m),
    lambda m: segment_returns(torch.zeros(2, 3), torch.zeros(2, 3), m, 0.5),
])
def test_mask_with_a_valid_step_after_padding_is_an_error(call):
    with pytest.raises(ValueError, match=r"row 1 is \[1, 0, 1\]"):
        call(torch.tensor([[1, 1, 0], [1, 0, 1]]))


@pytest.mark.parametrize("gamma", [-0.1, 1.5])
def test_gamma_out_of_range(gamma):
    with pytest.raises(ValueError, match="gamma must be in"):
        discounted_returns(torch.zeros(2, 3), MASK, gamma)
    with pytest.raises(ValueError, match="gamma must be in"):
        td_advantages(torch.zeros(2, 3), torch.zeros(2, 3), MASK, gamma)
    with pytest.raises(ValueError, match="gamma must be in"):
        segment_returns(torch.zeros(2, 3), torch.zeros(2, 3), MASK, gamma)


def test_shape_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"returns of shape \(2,\) .* or \(2, 3\)"):
        value_advantages(torch.zeros(3), VALUES, MASK)
    with pytest.raises(ValueError, match=r"targets of shape \(2,\) .* or \(2, 3\)"):
        value_loss(VALUES, torch.zeros(2, 1), MASK)
    with pytest.raises(ValueError, match="expected values of the mask's shape"):
        td_advantages(torch.zeros(2, 3), torch.zeros(2, 4), MASK, 0.5)
    with pytest.raises(ValueError, match="expected q of the mask's shape"):
        baseline_loss(VALUES, FINAL, MASK)
    with pytest.raises(ValueError, match=r"final of shape \(2,\)"):
        terminal_rewards(torch.zeros(3), MASK)
    with pytest.raises(ValueError, match=r"mask of shape \(B, T\)"):
        discounted_returns(torch.zeros(3), torch.ones(3), 0.5)
