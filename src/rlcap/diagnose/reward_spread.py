"""How the parts of a combined reward vary among one image's sampled captions.

A policy gradient with a per-image baseline (the greedy caption, the other samples' mean) follows
the reward's variation *among an image's samples*, not its mean. For a combined reward
``R = sum_i w_i r_i`` (``reward.weights``) what counts is therefore how much of R's within-image
variance each part makes up. [Liu17]'s SPIDEr, ``(CIDEr-D + SPICE) / 2``, is the case in point:
SPICE varies so much less than CIDEr-D among an image's samples that SPIDEr's advantages are
nearly CIDEr-D's (docs/RL.md, PG-SPIDEr).

:func:`within_image_spread` is the maths; :func:`reward_spread` samples captions from a
checkpoint's policy, scores them with each reward and applies it.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import NamedTuple

import torch

from rlcap.diagnose.sampled_rewards import sampled_rewards

log = logging.getLogger(__name__)


class SpreadStats(NamedTuple):
    """Each reward's statistics among an image's samples (:func:`within_image_spread`); M rewards."""

    mean: torch.Tensor          # (M,) mean of each reward over every sample
    within_std: torch.Tensor    # (M,) square root of the pooled within-image variance
    within_corr: torch.Tensor   # (M, M) pooled within-image correlation
    share: torch.Tensor         # (M,) share of the combined reward's within-image variance; sums to 1
    own_share: torch.Tensor     # (M,) the reward's own term's variance over the combined reward's
    combined_mean: torch.Tensor  # () mean of R = sum_i w_i r_i
    combined_std: torch.Tensor  # () square root of R's pooled within-image variance


def within_image_spread(rewards: torch.Tensor, weights: torch.Tensor) -> SpreadStats:
    """The spread of M rewards among each image's K samples, and each one's share of the combined reward's.

    Every statistic is taken *within images*: each image's samples are centred on their own mean,
    ``d_nk = r_nk - mean_k r_nk``, and the pooled within-image covariance is
    ``C = sum_{n,k} d_nk d_nk^T / (N (K - 1))`` (M, M), the mean over images of each image's
    unbiased sample covariance. Then ``within_std_i = sqrt(C_ii)``,
    ``within_corr_ij = C_ij / sqrt(C_ii C_jj)``, and for ``R = sum_i w_i r_i``:

        Var(R) = w^T C w,    share_i = Cov(w_i r_i, R) / Var(R) = w_i (C w)_i / (w^T C w),

    which sum to 1 over the rewards (a reward correlated with the others can take a share above its
    own variance; a negative share is a reward that varies against the rest). ``own_share_i =
    Var(w_i r_i) / Var(R) = w_i^2 C_ii / (w^T C w)`` leaves the covariances out: it does not sum to
    1, the rest of Var(R) being ``2 sum_{i<j} w_i w_j C_ij``. NaN where a variance is 0: a
    correlation of a reward constant within every image, every share when R is.

    Args:
        rewards: (N, K, M) reward i of sample k of image n, K >= 2.
        weights: (M,) the weight of each reward in R.

    Returns:
        :class:`SpreadStats`, computed in float64 and detached.

    Example: 2 images x 3 samples, A = [[1, 2, 3], [0, 2, 4]], B = [[1, 1, 4], [3, 3, 3]], weights
    (0.5, 0.5): C = [[10, 3], [3, 6]] / 4, stds 1.581 and 1.225, correlation 0.387,
    Var(R) = 1.375, shares 13/22 and 9/22, own shares 5/11 and 3/11.
    """
    if rewards.dim() != 3 or rewards.size(1) < 2:
        raise ValueError(f"within_image_spread: expected rewards of shape (N, K >= 2, M), got {tuple(rewards.shape)}")
    if weights.shape != rewards.shape[2:]:
        raise ValueError(f"within_image_spread: expected weights of shape ({rewards.size(2)},), "
                         f"got {tuple(weights.shape)}")
    r = rewards.detach().double()                                   # (N, K, M)
    w = weights.detach().double()                                   # (M,)
    n, k, _ = r.shape
    d = r - r.mean(1, keepdim=True)                                 # (N, K, M) centred per image
    cov = torch.einsum("nki,nkj->ij", d, d) / (n * (k - 1))         # (M, M) pooled within-image covariance
    std = cov.diagonal().sqrt()                                     # (M,)
    corr = cov / (std[:, None] * std[None, :])                      # (M, M); NaN where a std is 0
    var_r = w @ cov @ w                                             # ()
    share = w * (cov @ w) / var_r                                   # (M,); NaN when Var(R) = 0
    own_share = w**2 * cov.diagonal() / var_r                       # (M,)
    combined = r @ w                                                # (N, K)
    return SpreadStats(r.mean((0, 1)), std, corr, share, own_share, combined.mean(), var_r.sqrt())


def even_weights(within_std: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(M,) weights that give every reward's term the within-image spread of the first one's:
    ``w'_i = w_0 std_0 / std_i`` (``w'_0 = w_0``). With them each term alone moves the advantage as much as the
    first; their shares of R's variance are equal when the rewards are uncorrelated (a correlation adds to
    both). NaN where a reward is constant within every image.

    Example: stds (0.833, 0.129), weights (1, 1) -> (1, 6.46): CIDEr-D beside the QA utility on shapes."""
    w0s0 = weights[0].double() * within_std[0].double()
    return torch.where(within_std > 0, w0s0 / within_std.double(), torch.full_like(within_std.double(), math.nan))


class RewardSpread(NamedTuple):
    """What :func:`reward_spread` measured: the settings, and the statistics of ``rewards`` in that order."""

    checkpoint: str
    split: str
    images: int
    samples_per_image: int
    temperature: float
    rewards: list[str]      # the M rewards, in the order of the statistics
    weights: list[float]    # (M,) their weights in R
    stats: SpreadStats


def reward_spread(checkpoint: str | Path, split: str = "val", images: int = 500, samples: int | None = None,
                  temperature: float | None = None, weights: dict[str, float] | None = None,
                  data_overrides: list[str] | None = None, batch_size: int = 50, seed: int = 0,
                  progress: bool = False, reward_overrides: list[str] | None = None) -> RewardSpread:
    """Sample ``samples`` captions per image of ``split`` from the checkpoint's policy, score each
    with every reward of ``weights`` and return their :func:`within_image_spread`. The arguments are
    :func:`rlcap.diagnose.sampled_rewards.sampled_rewards`'s (None: the run's ``rl.n_samples``,
    ``decode.temperature``, ``reward.weights``)."""
    got = sampled_rewards(checkpoint, split, images, samples, temperature, weights, data_overrides, batch_size, seed,
                          progress, reward_overrides)
    # their spread among each image's samples, and each one's share of R's
    stats = within_image_spread(got.scores, torch.tensor(got.weights))
    log.info("reward spread of %s on %s (%d images, %d samples each, temperature %g): shares %s", checkpoint, split,
             len(got.image_ids), got.samples_per_image, got.temperature,
             ", ".join(f"{m} {s:.3f}" for m, s in zip(got.rewards, stats.share.tolist())))
    return RewardSpread(got.checkpoint, split, len(got.image_ids), got.samples_per_image, got.temperature,
                        got.rewards, got.weights, stats)
