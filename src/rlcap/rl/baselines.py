"""Baselines for REINFORCE and the advantage step: pure tensor functions.

Scoring, baseline and loss are three separate steps. Every function here
takes rewards already computed by :mod:`rlcap.rewards` and returns a baseline of the same
shape; :func:`advantages` subtracts it. Rows of one image are adjacent throughout (the
:mod:`rlcap.decoding` contract): with ``B`` images and ``n`` samples each, the flat index of
sample ``j`` of image ``i`` is ``i * n + j``.

Baselines never carry gradient: every function returns a detached tensor.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def _check_flat(rewards: torch.Tensor, n: int, name: str) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"{name}: expected rewards of shape (B*n,), got {tuple(rewards.shape)}")
    if n < 1 or rewards.numel() % n != 0:
        raise ValueError(f"{name}: {rewards.numel()} rewards cannot be split into groups of n={n}")


def greedy_baseline(greedy_rewards: torch.Tensor, n: int) -> torch.Tensor:
    """Self-critical baseline (Rennie et al. 2017): each image's greedy-decode reward.

    Args:
        greedy_rewards: (B,) reward of the greedily decoded caption of each image.
        n: samples per image.

    Returns:
        (B*n,) the greedy reward of image ``i`` repeated for its ``n`` samples.

    Example: greedy_rewards [0.5, 2.0], n=2 -> [0.5, 0.5, 2.0, 2.0].
    """
    if greedy_rewards.dim() != 1:
        raise ValueError(f"greedy_baseline: expected greedy_rewards of shape (B,), got {tuple(greedy_rewards.shape)}")
    if n < 1:
        raise ValueError(f"greedy_baseline: n must be >= 1, got {n}")
    return greedy_rewards.detach().repeat_interleave(n)  # (B*n,)


def leave_one_out_baseline(rewards: torch.Tensor, n: int) -> torch.Tensor:
    """Mean reward of the *other* samples of the same image (Kool et al. 2019, "REINFORCE w/ baseline").

    ``b_ij = (sum_k r_ik - r_ij) / (n - 1)``. The baseline of a sample does not depend on that
    sample, so the gradient estimate stays unbiased.

    Args:
        rewards: (B*n,) sample rewards, rows of one image adjacent.
        n: samples per image; must be >= 2 (one sample has no "others").

    Returns:
        (B*n,) baseline.

    Example: rewards [1, 2, 3, 4], n=2 -> [2, 1, 4, 3].
    """
    _check_flat(rewards, n, "leave_one_out_baseline")
    if n < 2:
        raise ValueError("leave_one_out_baseline: needs n >= 2 samples per image, got n=1")
    r = rewards.detach().view(-1, n)  # (B, n)
    baseline = (r.sum(dim=1, keepdim=True) - r) / (n - 1)  # (B, n)
    return baseline.reshape(-1)  # (B*n,)


def no_baseline(rewards: torch.Tensor) -> torch.Tensor:
    """Plain REINFORCE: a zero baseline. (N,) -> (N,) zeros."""
    return torch.zeros_like(rewards).detach()


class RunningMean(NamedTuple):
    """State of an exponential moving average of the mean batch reward.

    value: () float tensor, the current average (meaningless while ``steps == 0``).
    steps: number of updates so far.
    """

    value: torch.Tensor
    steps: int

    @classmethod
    def init(cls) -> "RunningMean":
        return cls(value=torch.zeros(()), steps=0)  # cpu: a 0-dim scalar, which adds to tensors on any device


def update_running_mean(state: RunningMean, rewards: torch.Tensor, decay: float) -> RunningMean:
    """One EMA step: ``value <- decay * value + (1 - decay) * mean(rewards)``.

    The first update sets ``value`` to the batch mean (no bias towards the zero start).

    Args:
        state: the previous :class:`RunningMean`.
        rewards: (N,) rewards of the current batch.
        decay: in [0, 1); 0.9 keeps roughly the last 10 batches.

    Returns:
        The new state; ``state`` is not modified.
    """
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"update_running_mean: decay must be in [0, 1), got {decay}")
    batch_mean = rewards.detach().float().mean()  # ()
    if state.steps == 0:
        return RunningMean(value=batch_mean, steps=1)
    value = decay * state.value.to(batch_mean) + (1.0 - decay) * batch_mean
    return RunningMean(value=value, steps=state.steps + 1)


def running_mean_baseline(state: RunningMean, rewards: torch.Tensor) -> torch.Tensor:
    """The running mean as a baseline for every reward: (N,) -> (N,).

    Use the state from *before* this batch's update, so that a sample's baseline does not
    depend on its own reward. Before the first update (``steps == 0``) the baseline is 0.
    """
    if state.steps == 0:
        return torch.zeros_like(rewards).detach()
    return state.value.to(rewards).expand_as(rewards).clone().detach()


def advantages(rewards: torch.Tensor, baseline: torch.Tensor) -> torch.Tensor:
    """``rewards - baseline``: (N,), (N,) -> (N,). Shapes must match exactly (no broadcasting)."""
    if rewards.shape != baseline.shape:
        raise ValueError(
            f"advantages: rewards {tuple(rewards.shape)} and baseline {tuple(baseline.shape)} differ in shape")
    return rewards - baseline
