"""Sequence-level exploration ([Chen20], eq. 14-16, sec. 4.3) on hand-computed examples."""

import math

import pytest
import torch

from rlcap.metrics import bleu as metrics_bleu
from rlcap.rl import (bleu34_distance, diversity_advantages, diversity_baseline, pairwise_distances, reinforce_loss,
    sle_advantages, sle_loss)

Y1 = "a b c d e".split()
Y2 = "a b c d f".split()
Y3 = "g h".split()
# BLEU(Y1 | Y2): clipped precisions 4/5, 3/4, 2/3, 1/2; equal lengths, no brevity penalty.
BLEU3 = (4 / 5 * 3 / 4 * 2 / 3) ** (1 / 3)  # 0.4 ** (1/3) = 0.73681
BLEU4 = (4 / 5 * 3 / 4 * 2 / 3 * 1 / 2) ** (1 / 4)  # 0.2 ** (1/4) = 0.66874
DELTA = 1 - (BLEU3 + BLEU4) / 2  # 0.29723


def sentence_bleu(hyp, ref):
    return metrics_bleu.sentence_bleu(metrics_bleu.bleu_stats(hyp, [ref]))


def test_sentence_bleu_hand_computed():
    bleu = sentence_bleu(Y1, Y2)
    assert bleu[0] == pytest.approx(0.8)
    assert bleu[1] == pytest.approx(math.sqrt(0.8 * 0.75))
    assert bleu[2] == pytest.approx(BLEU3)
    assert bleu[3] == pytest.approx(BLEU4)


def test_sentence_bleu_brevity_penalty():
    # hyp "a b" vs ref "a b c d": precisions 1, 1; BP = exp(1 - 4/2) = e^-1
    bleu = sentence_bleu("a b".split(), "a b c d".split())
    assert bleu[:2] == pytest.approx([math.exp(-1), math.exp(-1)])


def test_sentence_bleu_matches_pycocoevalcap_per_caption():
    from pycocoevalcap.bleu import bleu_scorer  # a dev dependency: the reference implementation
    pairs = [(Y1, Y2), (Y3, Y1), (Y1, Y3), ("a man riding a horse".split(), "a man rides the horse".split()),
             ("a a a the".split(), "a the dog".split()), ([], Y1)]
    for hyp, ref in pairs:
        scorer = bleu_scorer.BleuScorer(n=4)
        scorer += (" ".join(hyp), [" ".join(ref)])
        _, per_caption = scorer.compute_score(option="closest", verbose=0)
        assert sentence_bleu(hyp, ref) == pytest.approx([per_caption[k][0] for k in range(4)], abs=1e-12)


def test_distance_identical_and_empty():
    assert bleu34_distance(Y1, list(Y1)) == 0.0
    assert bleu34_distance([], []) == 0.0
    assert bleu34_distance([], Y1) == pytest.approx(1.0)  # empty hypothesis: BLEU 0
    assert bleu34_distance(Y1, Y2) == pytest.approx(DELTA)


def test_pairwise_distances_one_image_three_samples():
    d = pairwise_distances([Y1, Y2, Y3], s=3)
    expected = torch.tensor([[0.0, DELTA, 1.0], [DELTA, 0.0, 1.0], [1.0, 1.0, 0.0]])
    assert d.shape == (1, 3, 3)
    assert torch.allclose(d[0], expected, atol=1e-6)


def test_pairwise_distances_rejects_ragged():
    with pytest.raises(ValueError, match="groups of s=2"):
        pairwise_distances([Y1, Y2, Y3], s=2)


def test_diversity_advantages_hand_computed():
    # d = [[0, 1, 1], [1, 0, 0], [1, 0, 0]]: b_div = 4/9; row sums [2, 1, 1]
    # A_div = 2/3 * (rowsum - 3 * 4/9) = [4/9, -2/9, -2/9]
    d = torch.tensor([[[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    assert diversity_baseline(d).item() == pytest.approx(4 / 9)
    assert torch.allclose(diversity_advantages(d), torch.tensor([4 / 9, -2 / 9, -2 / 9]))


def test_diversity_advantages_symmetrise_asymmetric_distance():
    # d_01 = 1, d_10 = 0 -> symmetric part 0.5 both ways: every sample equally far, advantage 0
    d = torch.tensor([[[0.0, 1.0], [0.0, 0.0]]])
    assert torch.allclose(diversity_advantages(d), torch.zeros(2))


def test_identical_samples_give_zero_diversity_advantage():
    d = pairwise_distances([Y1, list(Y1), list(Y1), Y3, Y3, Y3], s=3)
    assert torch.equal(d, torch.zeros(2, 3, 3))
    adv = diversity_advantages(d)
    assert torch.equal(adv, torch.zeros(6)) and torch.isfinite(adv).all()


def test_sle_one_image_three_samples_by_hand():
    rewards = torch.tensor([1.0, 0.5, 0.0])  # CIDEr-D of the samples
    greedy = torch.tensor([0.5, 0.5, 0.5])  # greedy caption's CIDEr-D, repeated
    d = pairwise_distances([Y1, Y2, Y3], s=3)
    # b_div = (2*DELTA + 4) / 9; row sums [DELTA+1, DELTA+1, 2]
    # A_div = 2/3 (rowsum - 3 b_div) = [2/9 (DELTA-1), 2/9 (DELTA-1), 4/9 (1-DELTA)]
    a_div = [2 / 9 * (DELTA - 1), 2 / 9 * (DELTA - 1), 4 / 9 * (1 - DELTA)]  # [-0.15617, -0.15617, 0.31234]
    expected = [0.75 * p + 0.25 * a for p, a in zip([0.5, 0.0, -0.5], a_div)]  # [0.33596, -0.03904, -0.29691]
    adv = sle_advantages(rewards, greedy, d, alpha=0.75)
    assert torch.allclose(adv, torch.tensor(expected), atol=1e-6)

    logprobs = torch.tensor([[-1.0, -1.0], [-2.0, 0.0], [-0.5, -0.5]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    loss = sle_loss(logprobs, mask, rewards, greedy, d, alpha=0.75)
    # sequence log-probs [-2, -2, -1] over 5 valid tokens
    hand = -(expected[0] * -2 + expected[1] * -2 + expected[2] * -1) / 5  # 0.05938
    assert loss.item() == pytest.approx(hand, abs=1e-6)

    # Same direction as the literal eq. 15/16 (per-sequence sums, mean over s = 3), scaled by 3/5.
    seq_lp = (logprobs * mask).sum(1)
    eq15 = (-(adv * seq_lp)).mean()
    assert loss.item() == pytest.approx(eq15.item() * 3 / 5, abs=1e-6)


def test_sle_alpha_one_is_self_critical():
    rewards, greedy = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0])
    d = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    logprobs, mask = torch.tensor([[-1.0], [-3.0]]), torch.ones(2, 1)
    expected = reinforce_loss(logprobs, mask, rewards - greedy)
    assert sle_loss(logprobs, mask, rewards, greedy, d, alpha=1.0).item() == pytest.approx(expected.item())


def test_sle_empty_sample_is_finite():
    # sample 2 is empty (EOS first) and EOS does not count: all-zero mask row
    d = pairwise_distances([Y1, [], Y2], s=3)
    assert torch.isfinite(d).all()
    logprobs = torch.tensor([[-1.0, -1.0], [-4.0, -4.0], [-2.0, -0.5]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    loss = sle_loss(logprobs, mask, torch.tensor([1.0, 0.0, 0.5]), torch.full((3,), 0.5), d)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logprobs.grad).all()
    assert torch.equal(logprobs.grad[1], torch.zeros(2))
    # every token masked: loss 0, not NaN
    assert sle_loss(logprobs, torch.zeros(3, 2), torch.ones(3), torch.zeros(3), d).item() == 0.0


def test_sle_checks_shapes_and_alpha():
    d = torch.zeros(1, 3, 3)
    with pytest.raises(ValueError, match="alpha"):
        sle_advantages(torch.zeros(3), torch.zeros(3), d, alpha=1.5)
    with pytest.raises(ValueError, match="do not match"):
        sle_advantages(torch.zeros(4), torch.zeros(4), d)
