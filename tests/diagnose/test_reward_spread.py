"""The within-image spread of a combined reward's parts, by hand."""

import math

import pytest
import torch

from rlcap.diagnose.reward_spread import even_weights, within_image_spread

# 2 images x 3 samples x 2 rewards (A, B):
#   image 0: A = 1, 2, 3 (mean 2, deviations -1, 0, 1); B = 1, 1, 4 (mean 2, deviations -1, -1, 2)
#   image 1: A = 0, 2, 4 (mean 2, deviations -2, 0, 2); B = 3, 3, 3 (mean 3, deviations 0, 0, 0)
# pooled over N (K - 1) = 4: Var A = (2 + 8) / 4 = 2.5, Var B = (6 + 0) / 4 = 1.5,
# Cov(A, B) = ((1 + 0 + 2) + 0) / 4 = 0.75
REWARDS = torch.tensor([[[1.0, 1.0], [2.0, 1.0], [3.0, 4.0]],
                        [[0.0, 3.0], [2.0, 3.0], [4.0, 3.0]]])  # (N=2, K=3, M=2)


def test_spread_and_shares_by_hand():
    got = within_image_spread(REWARDS, torch.tensor([0.5, 0.5]))
    assert got.mean.tolist() == pytest.approx([2.0, 2.5])  # 12 / 6 and 15 / 6
    assert got.within_std.tolist() == pytest.approx([math.sqrt(2.5), math.sqrt(1.5)])
    corr = 0.75 / math.sqrt(2.5 * 1.5)  # 0.3873
    assert got.within_corr.flatten().tolist() == pytest.approx([1.0, corr, corr, 1.0])
    # Var(R) = 0.25 (2.5 + 1.5 + 2 * 0.75) = 1.375; C w = (1.625, 1.125);
    # share A = 0.5 * 1.625 / 1.375 = 13/22, share B = 0.5 * 1.125 / 1.375 = 9/22
    assert got.share.tolist() == pytest.approx([13 / 22, 9 / 22])
    assert float(got.share.sum()) == pytest.approx(1.0)
    # own shares leave the covariance out: 0.25 * 2.5 / 1.375 = 5/11, 0.25 * 1.5 / 1.375 = 3/11; the rest,
    # 2 * 0.25 * 0.75 / 1.375 = 3/11, is the covariance's
    assert got.own_share.tolist() == pytest.approx([5 / 11, 3 / 11])
    assert float(got.combined_mean) == pytest.approx(2.25)
    assert float(got.combined_std) == pytest.approx(math.sqrt(1.375))


def test_shares_follow_the_weights():
    # w = (1, 2): C w = (2.5 + 1.5, 0.75 + 3) = (4, 3.75), Var(R) = 4 + 7.5 = 11.5
    got = within_image_spread(REWARDS, torch.tensor([1.0, 2.0]))
    assert got.share.tolist() == pytest.approx([4 / 11.5, 7.5 / 11.5])
    assert got.own_share.tolist() == pytest.approx([2.5 / 11.5, 6 / 11.5])  # 1 * 2.5 and 4 * 1.5
    # a reward of weight 0 has no share, whatever its spread
    assert within_image_spread(REWARDS, torch.tensor([1.0, 0.0])).share.tolist() == pytest.approx([1.0, 0.0])


def test_shares_match_the_variance_of_the_combined_reward_image_by_image():
    """Cov(w_i r_i, R) / Var(R) and Var(w_i r_i) / Var(R), computed the long way: per image, then pooled."""
    rewards = torch.rand(7, 4, 3, generator=torch.Generator().manual_seed(0))
    w = torch.tensor([0.5, 0.3, 2.0])
    got = within_image_spread(rewards, w)
    parts = rewards * w  # (N, K, M)
    total = parts.sum(2)  # (N, K)
    cov = [sum(torch.cov(torch.stack([parts[n, :, i], total[n]]))[0, 1] for n in range(7)) for i in range(3)]
    var = sum(torch.var(total[n]) for n in range(7))
    assert got.share.tolist() == pytest.approx([float(c / var) for c in cov], rel=1e-5)
    own = [sum(torch.var(parts[n, :, i]) for n in range(7)) / var for i in range(3)]
    assert got.own_share.tolist() == pytest.approx([float(o) for o in own], rel=1e-5)


def test_a_reward_constant_within_images_has_no_correlation():
    rewards = REWARDS.clone()
    rewards[:, :, 1] = torch.tensor([[5.0], [7.0]])  # B differs between images only
    got = within_image_spread(rewards, torch.tensor([0.5, 0.5]))
    assert got.within_std[1] == 0 and math.isnan(got.within_corr[0, 1])
    assert got.share.tolist() == pytest.approx([1.0, 0.0])
    assert math.isnan(within_image_spread(rewards[:, :, 1:], torch.tensor([1.0])).share[0])


def test_bad_shapes():
    with pytest.raises(ValueError, match="K >= 2"):
        within_image_spread(REWARDS[:, :1], torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="weights of shape"):
        within_image_spread(REWARDS, torch.tensor([1.0]))


def test_even_weights_give_every_term_the_first_ones_spread():
    got = within_image_spread(REWARDS, torch.tensor([0.5, 0.5]))
    even = even_weights(got.within_std, torch.tensor([0.5, 0.5]))
    # 0.5 * sqrt(2.5) / sqrt(1.5): B's term then spreads as A's
    assert even.tolist() == pytest.approx([0.5, 0.5 * math.sqrt(2.5 / 1.5)])
    again = within_image_spread(REWARDS, even.float())
    assert (again.own_share[0] / again.own_share[1]).item() == pytest.approx(1.0, rel=1e-6)
    # a reward constant within every image has no weight that gives it a spread
    assert math.isnan(even_weights(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0]))[1])
    shapes = even_weights(torch.tensor([0.833, 0.129]), torch.tensor([1.0, 1.0]))  # CIDEr-D and the QA utility
    assert shapes[1].item() == pytest.approx(6.457, abs=1e-3)
