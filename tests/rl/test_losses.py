"""Losses on small hand-computed tensors."""

import math

import pytest
import torch

from rlcap.rl import entropy_bonus, masked_mean, reinforce_loss, sequence_logprob, xe_loss


def test_masked_mean_all_and_per_row():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    assert masked_mean(x, mask).item() == pytest.approx(1.5)
    assert torch.allclose(masked_mean(x, mask, dim=1), torch.tensor([1.5, 0.0]))  # empty row -> 0, not NaN


def test_masked_mean_empty_mask_is_zero():
    assert masked_mean(torch.ones(2, 3), torch.zeros(2, 3)).item() == 0.0


def test_masked_mean_float_weights():
    # (1*1 + 3*0.5) / 1.5 = 5/3
    assert masked_mean(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 0.5])).item() == pytest.approx(5 / 3)


def test_reinforce_loss_hand_computed():
    logprobs = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    loss = reinforce_loss(logprobs, mask, adv)
    # -(1*(-1) + 1*(-2) + (-2)*(-3)) / 3 = -(3) / 3 = -1
    assert loss.item() == pytest.approx(-1.0)
    loss.backward()
    # d loss / d logprob_it = -A_i * m_it / 3
    assert torch.allclose(logprobs.grad, torch.tensor([[-1 / 3, -1 / 3], [2 / 3, 0.0]]))


def test_reinforce_loss_does_not_backprop_into_advantages():
    adv = torch.tensor([1.0], requires_grad=True)
    reinforce_loss(torch.tensor([[-1.0]], requires_grad=True), torch.ones(1, 1), adv).backward()
    assert adv.grad is None


def test_reinforce_loss_empty_caption_without_eos_is_finite():
    # second caption is empty and EOS does not count: its row of the mask is all zero
    logprobs = torch.tensor([[-2.0, -1.0], [-5.0, -5.0]])
    mask = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    loss = reinforce_loss(logprobs, mask, torch.tensor([1.0, 3.0]))
    assert loss.item() == pytest.approx(2.0)  # -(1 * -2) / 1
    assert reinforce_loss(logprobs, torch.zeros(2, 2), torch.tensor([1.0, 3.0])).item() == 0.0


def test_reinforce_loss_shape_errors():
    with pytest.raises(ValueError, match="advantages of shape"):
        reinforce_loss(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(3))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        reinforce_loss(torch.zeros(2, 3), torch.ones(2, 2), torch.zeros(2))


def test_reinforce_loss_per_word_hand_computed():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([[1.0, 0.5, -1.0], [2.0, -1.0, 7.0]])  # 7.0 sits on padding: ignored
    loss = reinforce_loss(logprobs, mask, adv)
    # -(1*(-1) + 0.5*(-2) + (-1)*(-3) + 2*(-4) + (-1)*(-5)) / 5 = -(-2) / 5 = 0.4
    assert loss.item() == pytest.approx(0.4)
    loss.backward()
    # d loss / d logprob_it = -A_it * m_it / 5
    assert torch.allclose(logprobs.grad, torch.tensor([[-0.2, -0.1, 0.2], [-0.4, 0.2, 0.0]]))


def test_reinforce_loss_per_word_constant_rows_equal_per_caption():
    logprobs = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    per_caption = torch.tensor([1.0, -2.0])
    per_word = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    assert reinforce_loss(logprobs, mask, per_word).item() == pytest.approx(-1.0)
    assert reinforce_loss(logprobs, mask, per_word).item() == reinforce_loss(logprobs, mask, per_caption).item()
    # the docstring's per-word example: -((-1) + 0.5*(-2) + (-2)*(-3)) / 3
    assert reinforce_loss(logprobs, mask, torch.tensor([[1.0, 0.5], [-2.0, 9.0]])).item() == pytest.approx(-4 / 3)


def test_reinforce_loss_per_word_does_not_backprop_into_advantages():
    adv = torch.tensor([[1.0, 2.0]], requires_grad=True)
    reinforce_loss(torch.tensor([[-1.0, -1.0]], requires_grad=True), torch.ones(1, 2), adv).backward()
    assert adv.grad is None


@pytest.mark.parametrize("shape", [(2, 4), (2, 1), (1, 3), (2, 3, 1), (6,), ()])
def test_reinforce_loss_rejects_other_advantage_shapes(shape):
    with pytest.raises(ValueError, match=r"advantages of shape \(2,\) .* or \(2, 3\)"):
        reinforce_loss(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(shape))


def test_entropy_bonus_is_masked_mean():
    entropy = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert entropy_bonus(entropy, mask).item() == pytest.approx(2.0)  # (1 + 2 + 3) / 3


def test_xe_loss_uniform_logits_is_log_v():
    logits = torch.zeros(2, 3, 4)
    targets = torch.tensor([[1, 2, 0], [3, 0, 0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert xe_loss(logits, targets, mask).item() == pytest.approx(math.log(4))


def test_xe_loss_hand_computed_and_smoothing():
    # one token, V=2, logits [0, ln 3]: softmax = [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    targets = torch.tensor([[1]])
    mask = torch.ones(1, 1)
    assert xe_loss(logits, targets, mask).item() == pytest.approx(-math.log(0.75))
    # eps=0.2 over V=2: target weight 0.9, other 0.1 -> -(0.9 ln .75 + 0.1 ln .25)
    expected = -(0.9 * math.log(0.75) + 0.1 * math.log(0.25))
    assert xe_loss(logits, targets, mask, label_smoothing=0.2).item() == pytest.approx(expected, rel=1e-6)


def test_xe_loss_ignores_padding():
    logits = torch.tensor([[[0.0, math.log(3.0)], [100.0, -100.0]]])
    targets = torch.tensor([[1, 1]])  # second target would cost ~200 but is padding
    assert xe_loss(logits, targets, torch.tensor([[1, 0]])).item() == pytest.approx(-math.log(0.75))


def test_sequence_logprob():
    out = sequence_logprob(torch.tensor([[-1.0, -2.0, -4.0], [-0.5, -0.5, -9.0]]), torch.tensor([[1, 1, 1], [1, 1, 0]]))
    assert torch.allclose(out, torch.tensor([-7.0, -1.0]))
