"""Eq. 5's ranking loss and eq. 6's reward ([Shi18]) on hand-computed vectors."""

import pytest
import torch

from rlcap.rl.embedding_loss import cosine_reward, ranking_loss

IMAGES = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
TEXTS = torch.tensor([[1.0, 0.0], [0.6, 0.8]])


def test_ranking_loss_by_hand():
    # s = [[1, 0.6], [0, 0.8]]; image 0 vs caption 1: 0.5 - 1 + 0.6 = 0.1; caption 1 vs image 0:
    # 0.5 - 0.8 + 0.6 = 0.3; the other two hinges are negative -> (0.1 + 0.3) / 2
    assert ranking_loss(IMAGES, TEXTS, margin=0.5).item() == pytest.approx(0.2)
    # margin 0.2: 0.2 - 1 + 0.6 < 0 and 0.2 - 0.8 + 0.6 = 0 -> nothing violates the margin
    assert ranking_loss(IMAGES, TEXTS, margin=0.2).item() == pytest.approx(0.0, abs=1e-7)


def test_ranking_loss_three_pairs_by_hand():
    images = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    texts = torch.tensor([[0.8, 0.6], [0.0, 1.0], [1.0, 0.0]])
    # s[i, j] = images[i] . texts[j] = [[0.8, 0, 1], [0.6, 1, 0], [0.96, 0.8, 0.6]], s(i, i) = 0.8, 1, 0.6
    # image -> caption, margin 0.3: (0,2): 0.3 - 0.8 + 1 = 0.5; (1,0): 0.3 - 1 + 0.6 < 0; (2,0): 0.3 - 0.6 + 0.96
    #   = 0.66; (2,1): 0.3 - 0.6 + 0.8 = 0.5; others < 0          -> 1.66
    # caption -> image: caption 0 vs image 1: 0.3 - 0.8 + 0.6 = 0.1; vs image 2: 0.3 - 0.8 + 0.96 = 0.46;
    #   caption 1 vs image 2: 0.3 - 1 + 0.8 = 0.1; caption 2 vs image 0: 0.3 - 0.6 + 1 = 0.7   -> 1.36
    assert ranking_loss(images, texts, margin=0.3).item() == pytest.approx((1.66 + 1.36) / 3)


def test_pairs_marked_not_negative_are_skipped():
    skip = torch.tensor([[False, True], [True, False]])
    assert ranking_loss(IMAGES, TEXTS, 0.5, not_negative=skip).item() == 0.0
    only_01 = torch.tensor([[False, True], [False, False]])  # (image 0, caption 1) in both directions
    assert ranking_loss(IMAGES, TEXTS, 0.5, not_negative=only_01).item() == 0.0


def test_ranking_loss_gradient_pushes_the_violating_pair_apart():
    texts = TEXTS.clone().requires_grad_()
    ranking_loss(IMAGES, texts, 0.5).backward()
    # d/d texts[1] of (0.5 - s00 + s01) + (0.5 - s11 + s01) = images[0] + images[0] - images[1]
    torch.testing.assert_close(texts.grad[1], torch.tensor([2.0, -1.0]) / 2)
    torch.testing.assert_close(texts.grad[0], torch.tensor([-1.0, 0.0]) / 2)


def test_cosine_reward_by_hand():
    images = torch.tensor([[3.0, 4.0], [1.0, 0.0], [1.0, 1.0]])
    texts = torch.tensor([[4.0, 3.0], [-2.0, 0.0], [0.0, 5.0]])
    torch.testing.assert_close(cosine_reward(images, texts), torch.tensor([24 / 25, -1.0, 2 ** -0.5]))


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="one shape"):
        ranking_loss(IMAGES, TEXTS[:1], 0.2)
    with pytest.raises(ValueError, match="not_negative"):
        ranking_loss(IMAGES, TEXTS, 0.2, not_negative=torch.zeros(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="one shape"):
        cosine_reward(IMAGES, TEXTS[:, :1])
