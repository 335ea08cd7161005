"""Length terms for rewards that drift toward long captions: a target length with a penalty past it, and
length-conditional masking.

A reward that reads the caption's content (question-answering utility, coverage) pays for every added detail and
never for a wrong one, so a policy learns to write longer captions; [Ye26] (abstract) names utility rewards
"overlong" captions among the failures it corrects. Two remedies, each a setting of the ``reward`` section:

- ``length`` (a reward, weighted like any other): 0 for a caption of at most ``reward.length_target`` words, and
  past it minus the share by which it overshoots, ``-(L - T) / T`` (:func:`overlong_penalty`); with
  ``reward.length_end`` E (> 1) it falls linearly from 0 at T to -1 at E x T and stays there,
  ``-min(1, (L - T) / ((E - 1) T))``. The second is CapRL++'s length reward [Yang26] less its constant: their
  reward code (InternLM/CapRL, ``CapRL++/train/verl/recipe/video_captionrl/reward_fn.py``) adds ``w * R_l``, R_l 1
  up to l1 tokens, falling linearly to 0 at l2 and 0 past it (their training defaults l1 = 2048, l2 = 3072: E =
  1.5, and w = 0.2, per ``CapRL++/train/scripts/README.md``). The default target (T = 0: the mean word count of
  the image's references) and words for tokens are rlcap's choices; ``length_end`` 0
  (the default) keeps the unfloored slope of every run before the setting.
- ``reward.length_mask`` (a modifier of named rewards): a reward named there scores 0 for a caption longer than
  ``ratio`` times its image's mean reference length, and is unchanged otherwise (:func:`length_mask`,
  :class:`LengthMasked`). [Ye26]'s length-conditional reward masking gates a reward by the ratio of the
  generated length to the reference length (its abstract; that it gates the linguistic-quality reward, from a
  summary of its method section); the paper reports it beats a linear length penalty. Its exact threshold was not
  found here: the ratio is the user's, with no default.

Lengths are words as pycocoevalcap's tokenizer gives them (:func:`rlcap.metrics.tokenize.tokenize`), the same
words every metric counts.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from rlcap.metrics.tokenize import tokenize
from rlcap.rewards.batch import Reward, RewardBatch, check_batch
from rlcap.rewards.combine import Closeable


def overlong_penalty(lengths: torch.Tensor, targets: torch.Tensor, end: float = 0.0) -> torch.Tensor:
    """``-max(0, L - T) / T``: (B,) lengths and (B,) targets (> 0) -> (B,) penalties in (-inf, 0]; with ``end``
    E > 1, ``-min(1, max(0, L - T) / ((E - 1) T))`` in [-1, 0] ([Yang26]'s R_l less its constant)."""
    over = (lengths - targets).clamp(min=0)
    if end == 0:
        return -over / targets
    return -(over / ((end - 1) * targets)).clamp(max=1)


def length_mask(lengths: torch.Tensor, ref_lengths: torch.Tensor, max_ratio: float) -> torch.Tensor:
    """1.0 where ``L <= max_ratio * L_ref``, else 0.0: (B,) lengths and (B,) reference lengths -> (B,)."""
    return (lengths <= max_ratio * ref_lengths).float()


@functools.lru_cache(maxsize=1 << 16)
def _words(text: str) -> int:
    """Cached: an image's references, and the samples a peaked policy repeats, come back every step."""
    return len(tokenize(text))


def word_counts(captions: list[str]) -> torch.Tensor:
    """(N,) float: the words of each caption."""
    return torch.tensor([float(_words(c)) for c in captions])  # cpu: counted from text, as the metric rewards are


def reference_lengths(batch: RewardBatch) -> torch.Tensor:
    """(N,) float: the mean word count of each caption's image's references (1 when it has none or they are
    empty, so that a ratio or a target stays defined)."""
    means = []
    for refs in batch.refs:
        counts = [_words(r) for r in refs]
        means.append(max(sum(counts) / len(counts), 1.0) if counts else 1.0)
    return torch.tensor(means)  # cpu: counted from text


class LengthPenalty:
    """The ``length`` reward: :func:`overlong_penalty` of each caption's words against ``target`` (words; 0: the
    mean length of its image's references), floored at -1 from ``end`` times the target (0: no floor)."""

    def __init__(self, target: float, end: float = 0.0):
        if target < 0:
            raise ValueError(f"length target must be >= 0 words, got {target}")
        if end != 0 and not end > 1:
            raise ValueError(f"length end must be 0 (no floor) or a ratio > 1 of the target, got {end}")
        self.target, self.end = target, end

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        targets = reference_lengths(batch) if self.target == 0 else \
            torch.full((len(captions),), float(self.target))  # cpu: beside the word counts
        return overlong_penalty(word_counts(captions), targets, self.end)


class LengthMasked:
    """``reward``'s scores where a caption is at most ``max_ratio`` times its image's mean reference length,
    0 past it ([Ye26]'s length-conditional masking)."""

    def __init__(self, reward: Reward, max_ratio: float):
        if not max_ratio > 0:
            raise ValueError(f"length mask ratio must be > 0, got {max_ratio}")
        self.reward, self.max_ratio = reward, max_ratio

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        scores = self.reward(captions, batch)
        mask = length_mask(word_counts(captions), reference_lengths(batch), self.max_ratio)
        return scores * mask.to(scores.device)

    def close(self) -> None:
        if isinstance(self.reward, Closeable):
            self.reward.close()


def make_length(ctx: Any) -> LengthPenalty:
    return LengthPenalty(ctx.length_target, ctx.length_end)
