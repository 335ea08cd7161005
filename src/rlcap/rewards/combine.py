"""Weighted sum of rewards (TRL's ``reward_weights``) and the check for non-finite scores."""

from __future__ import annotations

import logging
import math
from typing import Literal, Protocol, runtime_checkable

import torch

from rlcap.errors import RlcapError
from rlcap.host_sync import on_host, to_device
from rlcap.rewards.batch import Reward, RewardBatch, check_batch

log = logging.getLogger(__name__)

NonFinite = Literal["raise", "zero"]
Parts = dict[str, torch.Tensor]  # each reward's own unweighted scores of the same captions, by name
NONFINITE_CHOICES: tuple[str, ...] = ("raise", "zero")


@runtime_checkable
class Closeable(Protocol):
    """A reward that holds a helper process (METEOR) and must be closed."""

    def close(self) -> None: ...


@runtime_checkable
class TokenReward(Protocol):
    """A reward that also scores the token ids themselves, on their device (the CIDEr-D of
    a CUDA run): ``score_tokens(tokens (N, T), image_ids) -> (N,)``, no decoded text needed."""

    def score_tokens(self, tokens: torch.Tensor, image_ids: list[str]) -> torch.Tensor: ...


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
    if scores.device.type != "cpu":
        # scores left on the device are not read on the host here: NaN or inf becomes 0 under "zero", and
        # under "raise" it makes the loss non-finite, which stops the run at the next log line (rlcap.train.logger)
        return torch.nan_to_num(scores, nan=0.0, posinf=0.0, neginf=0.0) if nonfinite == "zero" else scores
    with on_host():  # a CPU reward's scores: reading them waits for no device
        return _checked_on_host(name, scores, captions, batch, nonfinite)


def _checked_on_host(name: str, scores: torch.Tensor, captions: list[str], batch: RewardBatch,
                     nonfinite: NonFinite) -> torch.Tensor:
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

    def components(self, captions: list[str] | None, batch: RewardBatch,
                   tokens: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Each reward's unweighted (N,) scores, checked; for logging. With ``tokens`` (N, T), a
        :class:`TokenReward` scores them on their device (``captions`` may then be None when every
        reward is one)."""
        n = len(captions) if captions is not None else len(batch.image_ids)
        if captions is not None:
            check_batch(captions, batch)
        parts = {}
        for name, fn in self.rewards.items():
            if tokens is not None and isinstance(fn, TokenReward):
                values = fn.score_tokens(tokens, batch.image_ids)
            elif captions is None:
                raise RlcapError(f"reward {name!r} scores text, and no captions were given")
            else:
                values = fn(captions, batch)
            parts[name] = check_finite(name, values, captions or [""] * n, batch, self.nonfinite)
        return parts

    def needs_text(self) -> bool:
        """Whether some reward scores decoded captions (else token ids on the device are enough)."""
        return not all(isinstance(fn, TokenReward) for fn in self.rewards.values())

    def combine(self, parts: dict[str, torch.Tensor], n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """The weighted sum of :meth:`components` output: (n,) on ``device`` (host scores are copied
        there without waiting: rlcap.host_sync.to_device)."""
        total = torch.zeros(n, device=device)
        for name, scores in parts.items():
            total = total + self.weights[name] * to_device(scores, device)
        return total

    def __call__(self, captions: list[str] | None, batch: RewardBatch,
                 tokens: torch.Tensor | None = None, parts: Parts | None = None) -> torch.Tensor:
        """The weighted sum (N,), on the device of ``batch.feats`` (the CPU when it has none); ``parts``, when
        given, is filled with :meth:`components`' output (each reward's own scores, for :func:`part_means`)."""
        device = batch.feats.fc.device if batch.feats is not None else "cpu"
        n = len(captions) if captions is not None else len(batch.image_ids)
        found = self.components(captions, batch, tokens)
        if parts is not None:
            parts.update(found)
        return self.combine(found, n, device)

    def close(self) -> None:
        """Stop any helper process a component holds (METEOR)."""
        for fn in self.rewards.values():
            if isinstance(fn, Closeable):
                fn.close()

    def __enter__(self) -> "WeightedReward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def score(reward: Reward, captions: list[str] | None, reward_batch: RewardBatch,
          tokens: torch.Tensor | None = None, parts: Parts | None = None) -> torch.Tensor:
    """Rewards as a float tensor (N,), checked for shape, on the device of the batch's features.
    ``tokens`` (N, T): the captions' ids, which a reward computed on the device scores instead of their
    words (``captions`` may then be None); metric rewards are CPU code, their scores copied back once.
    ``parts``: a dict filled with each reward's own unweighted scores (N,) when ``reward`` is a
    :class:`WeightedReward` (for :func:`part_means`); left empty for any other reward."""
    n = len(captions) if captions is not None else len(reward_batch.image_ids)
    values = reward(captions, reward_batch, tokens, parts) if isinstance(reward, WeightedReward) else reward(
        captions, reward_batch)
    if values.shape != (n,):
        raise ValueError(f"reward returned shape {tuple(values.shape)} for {n} captions")
    device = reward_batch.feats.fc.device if reward_batch.feats is not None else values.device
    return to_device(values.float(), device)


def part_means(parts: Parts) -> dict[str, torch.Tensor]:
    """A step's statistics of a summed reward: ``reward/<name>``, each reward's own unweighted mean over the
    sampled captions (TRL logs ``rewards/<name>/mean``), so that a run shows which reward moves; none for a
    single reward, whose mean is the step's ``reward``."""
    return {f"reward/{name}": values.mean() for name, values in parts.items()} if len(parts) > 1 else {}
