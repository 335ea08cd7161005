"""Weighted sum of rewards (TRL's ``reward_weights``) and the check for non-finite scores."""

from __future__ import annotations

import logging
import math
from typing import Literal, Protocol, runtime_checkable

import torch

from rlcap.errors import RlcapError
from rlcap.rewards.batch import Reward, RewardBatch, check_batch

log = logging.getLogger(__name__)

NonFinite = Literal["raise", "zero"]
NONFINITE_CHOICES: tuple[str, ...] = ("raise", "zero")


@runtime_checkable
class Closeable(Protocol):
    """A reward that holds a helper process (METEOR) and must be closed."""

    def close(self) -> None: ...


class NonFiniteRewardError(RlcapError):
    """A reward returned NaN or +-inf for a caption."""


def check_finite(name: str, scores: torch.Tensor, captions: list[str], batch: RewardBatch,
                 nonfinite: NonFinite) -> torch.Tensor:
    """Validate one reward's output: shape (len(captions),) and finite values.

    With ``nonfinite="raise"`` a NaN or inf raises :class:`NonFiniteRewardError` naming the
    reward, the caption and its image; with ``"zero"`` such scores become 0 and one warning per call
    (per batch) gives their count and the first of them. Returns the scores as a float32 tensor.
    """
    if not isinstance(scores, torch.Tensor) or scores.shape != (len(captions),):
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise RlcapError(f"reward {name!r} returned {shape}; expected a tensor of shape ({len(captions)},), "
                         "one score per caption")
    scores = scores.detach().float()
    bad = (~torch.isfinite(scores)).nonzero().flatten().tolist()
    if not bad:
        return scores
    first = bad[0]
    what = f"{scores[first].item()} for caption {first} {captions[first]!r} (image {batch.image_ids[first]})"
    if nonfinite == "raise":
        raise NonFiniteRewardError(f"reward {name!r} returned {what}; rewards must be finite "
                                   "(set nonfinite: zero to score it 0)")
    log.warning("reward %r returned NaN or inf for %d of %d captions of this batch, scored 0 (the first: %s)",
                name, len(bad), len(captions), what)
    return torch.where(torch.isfinite(scores), scores, torch.zeros_like(scores))


class WeightedReward:
    """``sum_name weight[name] * reward[name](captions, batch)``, each term checked for finiteness.

    Args:
        rewards: name -> reward callable.
        weights: name -> weight; the same names as ``rewards``.
        nonfinite: "raise" (default) or "zero"; see :func:`check_finite`.
    """

    def __init__(self, rewards: dict[str, Reward], weights: dict[str, float], nonfinite: NonFinite = "raise"):
        if set(rewards) != set(weights):
            raise ValueError(f"WeightedReward: rewards {sorted(rewards)} and weights {sorted(weights)} differ")
        if nonfinite not in NONFINITE_CHOICES:
            raise ValueError(f"WeightedReward: nonfinite must be one of {list(NONFINITE_CHOICES)}, got {nonfinite!r}")
        for name, w in weights.items():
            if not math.isfinite(w):
                raise ValueError(f"WeightedReward: weight of {name!r} is {w}")
        self.rewards = dict(rewards)
        self.weights = dict(weights)
        self.nonfinite: NonFinite = nonfinite

    def components(self, captions: list[str], batch: RewardBatch) -> dict[str, torch.Tensor]:
        """Each reward's unweighted (len(captions),) scores, checked; for logging."""
        check_batch(captions, batch)
        return {name: check_finite(name, fn(captions, batch), captions, batch, self.nonfinite)
                for name, fn in self.rewards.items()}

    def combine(self, parts: dict[str, torch.Tensor], n: int) -> torch.Tensor:
        """The weighted sum of :meth:`components` output: (n,)."""
        total = torch.zeros(n)  # cpu: rewards are gathered on the CPU; train.rollout.score moves them once
        for name, scores in parts.items():
            total = total + self.weights[name] * scores.cpu()
        return total

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        return self.combine(self.components(captions, batch), len(captions))

    def close(self) -> None:
        """Stop any helper process a component holds (METEOR)."""
        for fn in self.rewards.values():
            if isinstance(fn, Closeable):
                fn.close()

    def __enter__(self) -> "WeightedReward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
