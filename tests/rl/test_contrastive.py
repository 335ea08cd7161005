"""[Chaffin24]'s contrastive rewards (eq. 2, decoupled), CLIP-S and the dual encoder's InfoNCE, by hand."""

import math

import pytest
import torch

from rlcap.rl.contrastive import bicont_reward, clip_s, i2t_reward, info_nce_loss, t2i_reward

# three images: i0, i1 and a mined neighbour i2 that no caption describes
IMAGES = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6]])
# three captions: x0 and x2 describe i0, x1 describes i1
TEXTS = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6]])
OWNER = torch.tensor([0, 1, 0])
TAU = 0.5


def test_i2t_leaves_only_the_caption_itself_out():
    # x0: s(x, i0) = 1, 0.6, 0.8 -> 1 - 0.5 log(e^1.2 + e^1.6) = -0.0565
    # x1: s(x, i1) = 0, 0.8, 0.6 -> 0.8 - 0.5 log(e^0 + e^1.2) = 0.0684
    # x2: s(x, i0) = 1, 0.6, 0.8 -> 0.8 - 0.5 log(e^2 + e^1.2) = -0.3856 (x0, of the same image, is its baseline)
    got = i2t_reward(TEXTS, IMAGES, OWNER, TAU)
    torch.testing.assert_close(got, torch.tensor([-0.0565, 0.0684, -0.3856]), atol=1e-4, rtol=0)


def test_t2i_against_every_other_image_of_the_pool():
    # x0: s(x0, i) = 1, 0, 0.8 -> 1 - 0.5 log(e^0 + e^1.6) = 0.1080
    # x1: s(x1, i) = 0.6, 0.8, 0.96 -> 0.8 - 0.5 log(e^1.2 + e^1.92) = -0.3583
    # x2: s(x2, i) = 0.8, 0.6, 1.0 -> 0.8 - 0.5 log(e^1.2 + e^2) = -0.3856
    got = t2i_reward(TEXTS, IMAGES, OWNER, TAU)
    torch.testing.assert_close(got, torch.tensor([0.1080, -0.3583, -0.3856]), atol=1e-4, rtol=0)


def test_bicont_is_the_sum_and_tends_to_a_max_baseline():
    torch.testing.assert_close(bicont_reward(TEXTS, IMAGES, OWNER, TAU),
                               i2t_reward(TEXTS, IMAGES, OWNER, TAU) + t2i_reward(TEXTS, IMAGES, OWNER, TAU))
    # small tau: s(x_c, i_c) - max over the rest (sec. 3.4's approximation)
    got = i2t_reward(TEXTS, IMAGES, OWNER, 1e-3)
    torch.testing.assert_close(got, torch.tensor([1 - 0.8, 0.8 - 0.6, 0.8 - 1.0]), atol=1e-2, rtol=0)


def test_coupled_form_would_never_be_positive():
    """Why the positive leaves the denominator: with it in, the best caption still gets <= 0."""
    sim = IMAGES[OWNER] @ TEXTS.T
    coupled = sim.diagonal() - TAU * torch.logsumexp(sim / TAU, dim=1)
    assert bool((coupled <= 0).all())
    assert float(i2t_reward(TEXTS, IMAGES, OWNER, TAU)[1]) > 0


def test_clip_s_and_shapes_checked():
    texts = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    images = torch.tensor([[0.6, 0.8], [0.0, -1.0]])
    torch.testing.assert_close(clip_s(texts, images), torch.tensor([2.5 * 0.6, 0.0]))
    with pytest.raises(ValueError, match="owner"):
        i2t_reward(TEXTS, IMAGES, torch.tensor([0, 3, 0]), TAU)
    with pytest.raises(ValueError, match="owner"):
        t2i_reward(TEXTS, IMAGES, torch.tensor([0, 1]), TAU)


def test_info_nce_by_hand():
    images = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    texts = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    # S = [[1, 0.6], [0, 0.8]], t = 1. Rows (image -> caption): -log(e/(e+e^0.6)), -log(e^0.8/(1+e^0.8));
    # columns (caption -> image): -log(e/(e+1)), -log(e^0.8/(e^0.6+e^0.8))
    rows = -math.log(math.e / (math.e + math.exp(0.6))) - math.log(math.exp(0.8) / (1 + math.exp(0.8)))
    cols = -math.log(math.e / (math.e + 1)) - math.log(math.exp(0.8) / (math.exp(0.6) + math.exp(0.8)))
    assert float(info_nce_loss(images, texts, 1.0)) == pytest.approx((rows / 2 + cols / 2) / 2, abs=1e-6)
