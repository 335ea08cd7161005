"""GRPO's maths (rl/grpo.py) against hand computations on a fixed batch: the group advantages of each scale, each
grpo.loss with each grpo.ratio, the clipping, the KL term per word, the truncation mask, and the first update's
gradient against REINFORCE's."""

import math

import pytest
import torch

from rlcap.rl.grpo import aggregate, ended_only, group_advantages, grpo_loss
from rlcap.rl.losses import reinforce_loss

EOS = 3

# two captions, three positions: caption 0 has two words (then padding), caption 1 three
LOGPROBS = [[-1.0, -0.5, 0.0], [-2.0, -1.0, -0.2]]
OLD = [[-1.1, -0.5, 0.0], [-1.5, -1.0, -0.4]]  # log-ratios 0.1, 0 | -0.5, 0, 0.2
MASK = [[1, 1, 0], [1, 1, 1]]
ADV = [1.0, -0.5]
EPS, EPS_HIGH, MAX_LEN = 0.2, 0.3, 4


def _loss(ratio: str, loss: str, **kwargs):
    return grpo_loss(torch.tensor(LOGPROBS), torch.tensor(OLD), torch.tensor(ADV), torch.tensor(MASK, dtype=torch.bool),
                     epsilon=EPS, epsilon_high=EPS_HIGH, ratio=ratio, loss=loss, max_len=MAX_LEN, **kwargs)


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 2.0, 3.0, 7.0])
    assert torch.allclose(group_advantages(rewards, 2, "none"), torch.tensor([-0.5, 0.5, -2.0, 2.0]))
    # the groups' (unbiased) stds: sqrt(0.5) and sqrt(8)
    s1, s2 = math.sqrt(0.5) + 1e-4, math.sqrt(8.0) + 1e-4
    assert torch.allclose(group_advantages(rewards, 2, "group"), torch.tensor([-0.5 / s1, 0.5 / s1, -2 / s2, 2 / s2]))
    # the batch's std: mean 3.25, squares 5.0625 + 1.5625 + 0.0625 + 14.0625 = 20.75, / 3
    s = math.sqrt(20.75 / 3) + 1e-4
    assert torch.allclose(group_advantages(rewards, 2, "batch"), torch.tensor([-0.5 / s, 0.5 / s, -2 / s, 2 / s]))
    assert torch.allclose(group_advantages(rewards, 2, "batch", batch_std=torch.tensor(1.0)),
                          torch.tensor([-0.5, 0.5, -2.0, 2.0]) / (1 + 1e-4))
    with pytest.raises(ValueError, match="scale 'rank' is not one of"):
        group_advantages(rewards, 2, "rank")


def test_token_ratio_each_loss_by_hand():
    # ratios e^0.1, 1 | e^-0.5 (clipped up to 0.8: A < 0, so the clipped term is the smaller), 1, e^0.2
    per_word = [-math.exp(0.1), -1.0, 0.5 * 0.8, 0.5, 0.5 * math.exp(0.2)]
    total = sum(per_word)
    assert float(_loss("token", "dapo").loss) == pytest.approx(total / 5, rel=1e-6)
    grpo = (sum(per_word[:2]) / 2 + sum(per_word[2:]) / 3) / 2
    assert float(_loss("token", "grpo").loss) == pytest.approx(grpo, rel=1e-6)
    assert float(_loss("token", "dr_grpo").loss) == pytest.approx(total / (2 * MAX_LEN), rel=1e-6)
    assert float(_loss("token", "dapo").clipped) == pytest.approx(1 / 5)  # the one word held back


def test_sequence_ratio_each_loss_by_hand():
    # GSPO: s_0 = exp((0.1 + 0) / 2), s_1 = exp((-0.5 + 0 + 0.2) / 3), both inside [0.8, 1.3]
    s0, s1 = math.exp(0.05), math.exp(-0.1)
    per_caption = [-1.0 * s0, 0.5 * s1]  # -A s, the same for each of the caption's words
    assert float(_loss("sequence", "dapo").loss) == pytest.approx((2 * per_caption[0] + 3 * per_caption[1]) / 5,
                                                                  rel=1e-6)
    assert float(_loss("sequence", "grpo").loss) == pytest.approx(sum(per_caption) / 2, rel=1e-6)
    assert float(_loss("sequence", "dr_grpo").loss) == pytest.approx(
        (2 * per_caption[0] + 3 * per_caption[1]) / (2 * MAX_LEN), rel=1e-6)
    assert float(_loss("sequence", "dapo").clipped) == 0.0


def test_the_kl_term_is_added_to_each_words_loss_before_the_average():
    ref = torch.tensor([[-1.0, -1.5, 0.0], [-2.0, -1.0, -0.2]])  # r = 0, -1 | 0, 0, 0
    without, with_kl = _loss("token", "grpo"), _loss("token", "grpo", ref_logprobs=ref, beta=0.1)
    k3 = math.exp(-1.0) - (-1.0) - 1.0
    assert float(with_kl.loss) == pytest.approx(float(without.loss) + 0.1 * (k3 / 2) / 2, rel=1e-6)
    assert float(with_kl.kl) == pytest.approx(k3 / 5, rel=1e-6)
    assert without.kl is None


def test_clipping_holds_back_the_gradient_outside_the_interval():
    logprobs = torch.tensor([[0.5, -0.5, 0.1]], requires_grad=True)  # ratios e^0.5 > 1.3, e^-0.5 < 0.8, e^0.1
    out = grpo_loss(logprobs, torch.zeros(1, 3), torch.tensor([1.0]), torch.ones(1, 3, dtype=torch.bool),
                    epsilon=EPS, epsilon_high=EPS_HIGH, ratio="token", loss="dapo", max_len=MAX_LEN)
    out.loss.backward()
    # A > 0: the high ratio is clipped (no gradient); the low one is not (min keeps the unclipped term)
    assert logprobs.grad[0, 0] == 0.0
    assert float(logprobs.grad[0, 1]) == pytest.approx(-math.exp(-0.5) / 3)
    assert float(logprobs.grad[0, 2]) == pytest.approx(-math.exp(0.1) / 3)
    assert float(out.clipped) == pytest.approx(1 / 3)


@pytest.mark.parametrize("ratio", ["token", "sequence"])
def test_the_first_updates_gradient_is_reinforces(ratio):
    """pi = pi_old (the ratio is 1): GRPO's gradient with loss dapo is REINFORCE's with the same advantages,
    for the sequence-level ratio too (each word carries d s_i = s_i / |y_i| sum_t d log pi)."""
    logprobs = torch.tensor(LOGPROBS, requires_grad=True)
    mask, adv = torch.tensor(MASK, dtype=torch.bool), torch.tensor(ADV)
    grpo = grpo_loss(logprobs, logprobs.detach(), adv, mask, epsilon=EPS, epsilon_high=EPS_HIGH, ratio=ratio,
                     loss="dapo", max_len=MAX_LEN).loss
    (g_grpo,) = torch.autograd.grad(grpo, logprobs)
    (g_reinforce,) = torch.autograd.grad(reinforce_loss(logprobs, mask, adv), logprobs)
    assert torch.allclose(g_grpo, g_reinforce)
    # the values differ: the ratio is 1 where REINFORCE has log pi, so GRPO's is -sum_i A_i |y_i| / words
    assert float(grpo.detach()) == pytest.approx(-(1.0 * 2 - 0.5 * 3) / 5)


def test_ended_only_clears_the_captions_cut_before_their_eos():
    tokens = torch.tensor([[5, EOS, 0], [5, 6, 7], [EOS, 0, 0]])
    mask = tokens != 0
    assert ended_only(mask, tokens, EOS).tolist() == [[True, True, False], [False, False, False], [True, False, False]]


def test_aggregate_refuses_an_unknown_loss():
    with pytest.raises(ValueError, match="loss 'sum' is not one of"):
        aggregate(torch.zeros(1, 2), torch.ones(1, 2), "sum", 4)
