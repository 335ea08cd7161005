"""The ``repetition`` reward: minus the share of a caption's word n-grams that repeat one before it.

A reward that pays for each detail a caption states and charges nothing for stating one again lets a policy loop:
with the QA utility over every shape's questions, the abstaining SCST row wrote "a purple circle below a purple
circle on a purple circle on ..." into the 16-word cap on 78% of its test pictures (docs/BENCHMARKS.md, "Rewards
that read the caption"). [Yeo25] (Appendix C.2) shapes a reasoning model's reward against such loops with an n-gram
repetition penalty, and open-r1 (huggingface/open-r1, ``get_repetition_penalty_reward``) ships it as a GRPO reward:
for a text of words w_1..w_L and n-grams g_1..g_{L-n+1},

    R_rep = -(1 - |{g_i}| / (L - n + 1))        (0 when L < n),

times a maximum penalty, which here is the reward's weight in ``reward.weights``. rlcap counts words as every
metric does (pycocoevalcap's tokenizer, :func:`rlcap.metrics.tokenize.tokenize`) where open-r1 lower-cases and
splits on white space; n is ``reward.repetition_ngram`` (3 by default: a shape or an object with its colour, "a
purple circle", is three words, so a three-word n-gram is the shortest whose repetition names one thing twice).

A caption that names two like objects ("a red square to the right of a red square") pays for the repeated
trigram, 1/8 of the penalty here; the references write "another red square", which does not.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from rlcap.metrics.tokenize import tokenize
from rlcap.rewards.batch import RewardBatch, check_batch


def repeated_share(words: list[str], n: int) -> float:
    """``1 - distinct n-grams / n-grams`` of ``words``: 0 for a caption shorter than ``n`` words or one whose
    n-grams are all distinct, approaching 1 as one n-gram fills it.

    Example: "a red square on a red square" with n = 3: 5 trigrams, 4 distinct -> 0.2."""
    if n < 1:
        raise ValueError(f"repetition n-gram size must be >= 1, got {n}")
    count = len(words) - n + 1
    if count < 1:
        return 0.0
    distinct = {tuple(words[i:i + n]) for i in range(count)}
    return 1.0 - len(distinct) / count


@functools.lru_cache(maxsize=1 << 16)
def _caption_share(text: str, n: int) -> float:
    """Cached: a peaked policy samples the same captions step after step."""
    return repeated_share(tokenize(text), n)


class RepetitionPenalty:
    """The ``repetition`` reward: ``-repeated_share`` of each caption's words, in [-1, 0] ([Yeo25])."""

    def __init__(self, ngram: int = 3):
        if ngram < 1:
            raise ValueError(f"reward.repetition_ngram: expected an integer >= 1, got {ngram}")
        self.ngram = ngram

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        return -torch.tensor([_caption_share(c, self.ngram) for c in captions])  # cpu: counted from text


def make_repetition(ctx: Any) -> RepetitionPenalty:
    return RepetitionPenalty(ctx.repetition_ngram)
