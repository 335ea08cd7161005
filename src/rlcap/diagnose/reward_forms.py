"""What a reward pays for: the leave-one-out advantage of each form of caption among one image's samples.

A policy gradient with a per-image baseline moves the policy towards the captions that score above their image's
other samples. Given forms of caption the user names by a pattern (on shapes: a third shape named, the count phrase
"with two other shapes"), :func:`form_advantages` gives each form's mean reward and its mean advantage
``A_nk = R_nk - mean_{j != k} R_nj``, the leave-one-out baseline (Kool et al. 2019; ``scst.baseline: leave_one_out``):
a form whose mean advantage is positive is one that training makes more likely, one near 0 is one the reward does
not tell from the image's other samples, whatever its mean reward. docs/RL.md, "Where the goals stand", measured
why no QA-utility row named a third shape with it.

:func:`form_labels` labels each caption by the first pattern it matches; :func:`reward_forms` samples a checkpoint
(:func:`rlcap.diagnose.sampled_rewards.sampled_rewards`) and applies both.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import torch

from rlcap.diagnose.sampled_rewards import SampledRewards, sampled_rewards
from rlcap.rl.baselines import leave_one_out_baseline

OTHER = "other"  # the label of a caption that matches no form


class FormStats(NamedTuple):
    """Each of F labels' statistics over the samples that carry it (NaN where none does)."""

    samples: torch.Tensor         # (F,) samples with the label
    images: torch.Tensor          # (F,) images with at least one such sample
    contested: torch.Tensor       # (F,) of those, images whose other samples include another label
    mean_reward: torch.Tensor     # (F,) the label's mean reward
    mean_advantage: torch.Tensor  # (F,) its mean leave-one-out advantage


def form_advantages(rewards: torch.Tensor, labels: torch.Tensor, n_labels: int) -> FormStats:
    """Each label's mean reward and mean leave-one-out advantage among its images' samples.

    ``A_nk = R_nk - (sum_j R_nj - R_nk) / (K - 1)``: a sample's reward above the mean of its image's other samples.
    Over all samples the advantages sum to 0 image by image, so ``sum_f samples_f * mean_advantage_f = 0``.

    Args:
        rewards: (N, K) reward of sample k of image n, K >= 2.
        labels: (N, K) integer label in ``0 .. n_labels - 1`` of each sample.

    Returns:
        :class:`FormStats` of the ``n_labels`` labels, in float64 (counts as int64).

    Example: image 0's rewards (1, 2, 3) labelled (a, b, b), image 1's (0, 0, 3) labelled (b, b, b): advantages
    (-1.5, 0, 1.5) and (-1.5, -1.5, 3); a: 1 sample, mean reward 1, advantage -1.5; b: 5 samples, mean reward
    1.6, advantage 0.3 (and 1 x -1.5 + 5 x 0.3 = 0).
    """
    if rewards.dim() != 2 or rewards.size(1) < 2 or labels.shape != rewards.shape:
        raise ValueError(f"form_advantages: expected rewards (N, K >= 2) and labels of their shape, got "
                         f"{tuple(rewards.shape)} and {tuple(labels.shape)}")
    if labels.numel() and not (0 <= int(labels.min()) and int(labels.max()) < n_labels):
        raise ValueError(f"form_advantages: labels must lie in 0 .. {n_labels - 1}")
    r = rewards.detach().double()
    k = r.size(1)
    advantage = r - leave_one_out_baseline(r.reshape(-1), k).view_as(r)     # (N, K)
    one_hot = torch.nn.functional.one_hot(labels.long(), n_labels).double()  # (N, K, F)
    samples = one_hot.sum((0, 1))                                            # (F,)
    present = one_hot.sum(1) > 0                                             # (N, F)
    others = (one_hot.sum(1, keepdim=True) - one_hot) < (k - 1)              # (N, K, F): another label beside it
    contested = (one_hot.bool() & others).any(1)                             # (N, F)
    mean = torch.einsum("nk,nkf->f", r, one_hot) / samples                   # NaN where samples is 0
    mean_advantage = torch.einsum("nk,nkf->f", advantage, one_hot) / samples
    return FormStats(samples.long(), present.sum(0), contested.sum(0), mean, mean_advantage)


def form_labels(captions: list[list[str]], forms: dict[str, str]) -> tuple[torch.Tensor, list[str]]:
    """(N, K) labels of the captions: the index of the first form (name -> regular expression, searched in the
    caption) that each matches, or ``len(forms)`` (:data:`OTHER`) for none; and the F = len(forms) + 1 names."""
    patterns = [re.compile(p) for p in forms.values()]
    labels = [[next((f for f, p in enumerate(patterns) if p.search(c)), len(patterns)) for c in row]
              for row in captions]
    return torch.tensor(labels, dtype=torch.long).view(len(captions), -1), [*forms, OTHER]


class RewardForms(NamedTuple):
    """What :func:`reward_forms` measured: the samples, each one's label, and each label's statistics for the
    combined reward R (``stats``) and for each of its parts (``by_reward``, in ``sampled.rewards``' order)."""

    sampled: SampledRewards
    names: list[str]             # the F labels: the forms, then OTHER
    labels: torch.Tensor         # (N, K)
    stats: FormStats
    by_reward: list[FormStats]


def reward_forms(checkpoint: str | Path, forms: dict[str, str], split: str = "val", images: int = 500,
                 samples: int | None = None, temperature: float | None = None,
                 weights: dict[str, float] | None = None, data_overrides: list[str] | None = None,
                 batch_size: int = 50, seed: int = 0, progress: bool = False,
                 reward_overrides: list[str] | None = None, max_len: int | None = None) -> RewardForms:
    """Sample the checkpoint's policy, score the samples (the arguments of
    :func:`rlcap.diagnose.sampled_rewards.sampled_rewards`), label them by ``forms`` (name -> regular expression)
    and return each form's :func:`form_advantages` under R = sum_m w_m r_m and under each reward alone."""
    if not forms:
        raise ValueError("reward forms: give at least one form (NAME=REGEX)")
    for name, pattern in forms.items():
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"reward forms: form {name!r}: {pattern!r} is not a regular expression ({exc})") from None
    got = sampled_rewards(checkpoint, split, images, samples, temperature, weights, data_overrides, batch_size, seed,
                          progress, reward_overrides, what="reward forms", max_len=max_len)
    labels, names = form_labels(got.captions, forms)
    combined = got.scores.double() @ torch.tensor(got.weights, dtype=torch.float64)
    return RewardForms(got, names, labels, form_advantages(combined, labels, len(names)),
                       [form_advantages(got.scores[..., m], labels, len(names)) for m in range(len(got.rewards))])
