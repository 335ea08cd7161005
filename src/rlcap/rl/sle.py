"""Sequence-level exploration (SLE): Chen & Jin, "Better Captioning with Sequence-Level
Exploration" ([Chen20], sec. 4, eq. 8-16, Algorithm 1).

The objective (eq. 8, negated and split in eq. 9) for one image x_i is

    L(theta)   = alpha * L_1 + (1 - alpha) * L_2                                   (9)
    L_1        = -E_{y ~ p}[Delta(y, y_i)]                      precision          (10)
    L_2        = -E_{y ~ p} E_{y' ~ p}[d(y, y')]                diversity          (12)

With s samples y_1..y_s per image, REINFORCE gives (eq. 11, 14) the surrogate (eq. 15, 16)

    L   = 1/s * sum_j L^j                                                          (15)
    L^j = -alpha * Delta(y_j, y_i) * log p(y_j | x_i)
          - (1 - alpha) * 2/s * sum_k d(y_j, y_k) * log p(y_j | x_i)               (16)

and sec. 4.3 adds one baseline per term: the greedy caption's reward for Delta (self-critical)
and the mean pairwise distance ``b_div = 1/s^2 * sum_j sum_k d(y_j, y_k)`` for the diversity
term. We subtract ``b_div`` from every d(y_j, y_k) inside the sum, so that the diversity
advantage of sample j is

    A_div_j = 2/s * sum_k (d(y_j, y_k) - b_div) = 2 * (dbar_j - b_div),   dbar_j = 1/s sum_k d_jk

which has mean 0 over the s samples (the precision advantage ``Delta_j - greedy`` does not).
The total advantage is ``A_j = alpha * (Delta_j - b_greedy) + (1 - alpha) * A_div_j``, and the
loss is :func:`rlcap.rl.losses.reinforce_loss` on it (eq. 15's 1/s mean becomes the mean over
the batch's valid tokens; see that module for why).

Distance (sec. 4.3: "we use BLEU3 + BLEU4 to calculate d(y, y')"). The paper gives no formula;
we use ``d(y, y') = 1 - (BLEU_3(y | y') + BLEU_4(y | y')) / 2``: BLEU is a similarity in
[0, 1] and d must grow with difference, and halving the sum keeps d in [0, 1]. An additive
constant in d cancels against b_div, so only the factor 1/2 differs from ``-(BLEU_3 + BLEU_4)``.
Identical token lists (and so the diagonal k = j) have d = 0 exactly. Sentence BLEU is
asymmetric (brevity penalty and clipping count the hypothesis side), while eq. 14 follows from
eq. 13 only for a symmetric d; :func:`sle_advantages` therefore uses the symmetric part
``(d + d^T) / 2``, which is exactly eq. 13's gradient for any d.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlcap.metrics.bleu import bleu_stats, sentence_bleu
from rlcap.rl.losses import reinforce_loss

def bleu34_distance(y: Sequence[str], y2: Sequence[str]) -> float:
    """``d(y, y') = 1 - (BLEU_3(y | y') + BLEU_4(y | y')) / 2`` (sec. 4.3); 0 when y == y'.

    ``BLEU_n(y | y')`` is the per-caption BLEU of pycocoevalcap (:mod:`rlcap.metrics.bleu`)
    with ``y`` the hypothesis and ``y'`` the single reference.
    """
    if list(y) == list(y2):
        return 0.0
    bleu = sentence_bleu(bleu_stats(y, [y2]))
    return 1.0 - (bleu[2] + bleu[3]) / 2.0


def pairwise_distances(samples: Sequence[Sequence[str]], s: int) -> torch.Tensor:
    """Distance matrix between the samples of each image (sec. 4.3).

    Args:
        samples: B*s token lists (words, without BOS/EOS), the s samples of one image adjacent.
        s: samples per image.

    Returns:
        (B, s, s) float tensor ``D[i, j, k] = d(y_ij, y_ik)`` (:func:`bleu34_distance`);
        zero diagonal; not necessarily symmetric.
    """
    if s < 1 or len(samples) % s != 0:
        raise ValueError(f"pairwise_distances: {len(samples)} samples cannot be split into groups of s={s}")
    batch = len(samples) // s
    dist = torch.zeros(batch, s, s)  # cpu: BLEU distances of strings, computed on the CPU
    for i in range(batch):
        group = samples[i * s:(i + 1) * s]
        for j in range(s):
            for k in range(s):
                if j != k:
                    dist[i, j, k] = bleu34_distance(group[j], group[k])
    return dist


def diversity_baseline(distances: torch.Tensor) -> torch.Tensor:
    """``b_div = 1/s^2 * sum_j sum_k d(y_j, y_k)`` per image (sec. 4.3): (B, s, s) -> (B,)."""
    if distances.dim() != 3 or distances.shape[1] != distances.shape[2]:
        raise ValueError(f"diversity_baseline: expected distances of shape (B, s, s), got {tuple(distances.shape)}")
    return distances.mean(dim=(1, 2))


def diversity_advantages(distances: torch.Tensor) -> torch.Tensor:
    """``A_div_j = 2/s * sum_k (d_jk - b_div)`` with d symmetrised (eq. 14, 16 and sec. 4.3).

    Args:
        distances: (B, s, s) pairwise distances, samples of image i in ``distances[i]``.

    Returns:
        (B*s,) diversity advantage of each sample, mean 0 per image; all 0 when an image's
        samples are all at the same distance from each other (e.g. all identical).

    Example (1 image, s=3): d = [[0, 1, 1], [1, 0, 0], [1, 0, 0]] -> b_div = 4/9,
    A_div = 2/3 * ([2, 1, 1] - 3 * 4/9) = [4/9, -2/9, -2/9].
    """
    baseline = diversity_baseline(distances)  # (B,)
    s = distances.shape[1]
    sym = (distances + distances.transpose(1, 2)) / 2  # (B, s, s): eq. 13 -> eq. 14 needs symmetry
    adv = 2.0 / s * (sym - baseline[:, None, None]).sum(dim=2)  # (B, s)
    return adv.reshape(-1)  # (B*s,)


def sle_advantages(rewards: torch.Tensor, baseline: torch.Tensor, distances: torch.Tensor,
                   alpha: float = 0.75) -> torch.Tensor:
    """Per-sample multiplier of ``-log p(y_j | x_i)`` in eq. 16, with both baselines.

    ``A_j = alpha * (Delta_j - b_j) + (1 - alpha) * 2/s * sum_k (d_jk - b_div)``

    Args:
        rewards: (B*s,) precision reward Delta(y_j, y_i) of each sample (CIDEr-D in the paper).
        baseline: (B*s,) precision baseline, e.g. :func:`rlcap.rl.baselines.greedy_baseline`.
        distances: (B, s, s) from :func:`pairwise_distances`.
        alpha: precision weight of eq. 8/9 (the paper's tuned value 0.75, sec. 5.1).

    Returns:
        (B*s,) advantages, detached.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"sle_advantages: alpha must be in [0, 1], got {alpha}")
    if rewards.shape != baseline.shape or rewards.dim() != 1:
        raise ValueError(f"sle_advantages: expected rewards and baseline of one shape (B*s,), got "
                         f"{tuple(rewards.shape)} and {tuple(baseline.shape)}")
    if distances.dim() != 3 or distances.shape[0] * distances.shape[1] != rewards.shape[0]:
        raise ValueError(f"sle_advantages: distances {tuple(distances.shape)} do not match "
                         f"{rewards.shape[0]} rewards (expected (B, s, s) with B*s rewards)")
    precision = rewards.detach() - baseline.detach()  # (B*s,)
    diversity = diversity_advantages(distances.detach().to(precision))  # (B*s,)
    return alpha * precision + (1.0 - alpha) * diversity


def sle_loss(logprobs: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor, baseline: torch.Tensor,
             distances: torch.Tensor, alpha: float = 0.75) -> torch.Tensor:
    """SLE surrogate loss (eq. 15, 16 with the sec. 4.3 baselines).

    Args:
        logprobs: (B*s, T) log-probability of each sampled token (with grad).
        mask: (B*s, T) tokens that count (words, plus EOS when it counts; empty samples may
            have an all-zero row).
        rewards: (B*s,) precision reward of each sample.
        baseline: (B*s,) precision baseline (greedy reward of the image, repeated).
        distances: (B, s, s) pairwise sample distances.
        alpha: precision weight (default 0.75 as in sec. 5.1).

    Returns:
        () scalar: :func:`rlcap.rl.losses.reinforce_loss` with :func:`sle_advantages`.
    """
    return reinforce_loss(logprobs, mask, sle_advantages(rewards, baseline, distances, alpha))
