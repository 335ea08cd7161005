"""[Wang18]'s delta-CIDEr rewards, the critic's loss and its targets, by hand; returns for worker and manager."""

import math

import pytest
import torch

from rlcap.rl.credit import discounted_returns, segment_returns
from rlcap.rl.hrl import critic_loss, delta_rewards, segment_end_targets


def test_delta_rewards_and_both_returns_by_hand():
    scores = torch.tensor([[0.2, 0.5, 0.4, 0.9], [0.3, 0.6, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    f = delta_rewards(scores, mask)
    torch.testing.assert_close(f, torch.tensor([[0.2, 0.3, -0.1, 0.5], [0.3, 0.3, 0.0, 0.0]]))
    assert float(f[0].sum()) == pytest.approx(0.9)  # telescopes to the caption's score
    # worker (eq. 24), gamma 0.95: R_t = sum_k 0.95^k f_{t+k}
    worker = discounted_returns(f, mask, 0.95)
    assert float(worker[0, 2]) == pytest.approx(-0.1 + 0.95 * 0.5)
    assert float(worker[0, 0]) == pytest.approx(0.2 + 0.95 * 0.3 + 0.95 ** 2 * -0.1 + 0.95 ** 3 * 0.5)
    # manager (eq. 25): segments [0, 1] and [2, 3] of caption 0 -> f(e) = 0.5 and 0.4
    ends = torch.tensor([[0, 1, 0, 0], [1, 0, 0, 0]])
    manager = segment_returns(f, ends, mask, 0.95)
    assert manager[0].tolist() == pytest.approx([0.5 + 0.95 * 0.4, 0.5 + 0.95 * 0.4, 0.4, 0.4])
    assert manager[1].tolist() == pytest.approx([0.3 + 0.95 * 0.3, 0.3, 0.0, 0.0])


def test_critic_loss_by_hand():
    logits = torch.tensor([[0.0, 2.0, -1.0]])
    targets = torch.tensor([[1, 1, 0]])
    mask = torch.tensor([[1, 1, 0]])
    # -(log sigmoid(0) + log sigmoid(2)) / 2; the padded third word does not count
    want = (math.log(2) + math.log(1 + math.exp(-2))) / 2
    assert float(critic_loss(logits, targets, mask)) == pytest.approx(want)


def test_segment_end_targets():
    assert segment_end_targets([[0, 3], [0, 2, 4]], 5).tolist() == [[0, 0, 1, 0, 1], [0, 1, 0, 1, 1]]


def test_manager_gradient_on_a_toy_goal_space():
    """Eq. 22 with mu_theta(s) = theta (the goal is the parameter) and a fixed worker pi(a | g) =
    softmax(W g): the gradient of -(R - b) log pi(a) is -(R - b) W^T (1_a - pi) (eq. 16 through x = W g),
    and a step along it raises pi(a) when R > b and lowers it when R < b."""
    from rlcap.rl.losses import reinforce_loss

    W = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # 3 words, 2-d goals
    for advantage in (0.5, -0.5):  # R - b
        goal = torch.tensor([0.2, -0.1], requires_grad=True)
        logp = torch.log_softmax(W @ goal, 0)
        a = 2
        loss = reinforce_loss(logp[a].view(1, 1), torch.ones(1, 1), torch.tensor([advantage]))
        loss.backward()
        pi = torch.softmax(W @ goal.detach(), 0)
        want = -advantage * W.T @ (torch.nn.functional.one_hot(torch.tensor(a), 3).float() - pi)
        torch.testing.assert_close(goal.grad, want)
        stepped = goal.detach() - 0.1 * goal.grad
        assert (torch.softmax(W @ stepped, 0)[a] > pi[a]) == (advantage > 0)
