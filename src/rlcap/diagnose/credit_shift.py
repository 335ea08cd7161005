"""Where [Wang18]'s per-word rewards put the credit of a wrong prefix: a measurement of the prefix metric.

[Wang18] (sec. 3.3.3) rewards each word a_t with f(a_t) = CIDEr(sent + a_t) - CIDEr(sent), the change in
the score of the caption's prefix. A metric that credits each word where it is written makes wrong
words cost where they stand. CIDEr-D does not quite: its Gaussian length penalty (sigma 6, on the
bigram count) keeps a short prefix's score near 0 whatever its words, so the words' worth is only
paid once the prefix nears the references' length, on later words. Plain CIDEr has no length
penalty.

:func:`prefix_credit` measures this on any captions: it replaces the first ``swap`` words of each
caption by those of another clip's caption and compares the delta rewards before and after the
swap, summed over the replaced (wrong) words and over the identical words after them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from rlcap.errors import DataError
from rlcap.metrics.tokenize import tokenize
from rlcap.rewards import Reward, RewardBatch
from rlcap.rl.hrl import delta_rewards


class CreditShift(NamedTuple):
    """Mean change per caption of the delta rewards when its first ``swap`` words are another clip's."""

    wrong: float  # the replaced words' rewards, summed per caption: after the swap minus before
    later: float  # the identical later words' rewards, summed per caption: after minus before
    captions: int  # captions measured (long enough, and whose first words the swap changes)


def swapped_pairs(words: Sequence[Sequence[str]], swap: int) -> list[tuple[int, list[str]]]:
    """(i, caption i with its first ``swap`` words taken from caption i + 1, cyclically) for every
    caption that has words after them and whose first words the swap changes."""
    out = []
    for i, own in enumerate(words):
        donor = words[(i + 1) % len(words)]
        if len(own) > swap and len(donor) >= swap and list(donor[:swap]) != list(own[:swap]):
            out.append((i, [*donor[:swap], *own[swap:]]))
    return out


def prefix_score_table(reward: Reward, captions: Sequence[Sequence[str]], image_ids: Sequence[str],
                       refs: Sequence[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The reward of every prefix of every tokenized caption, in one call: -> scores (N, T) and mask (N, T),
    column t the prefix of t + 1 words (0 and False past a caption's end)."""
    width = max(len(c) for c in captions)
    texts, ids, rows = [], [], []
    for i, caption in enumerate(captions):
        for t in range(len(caption)):
            texts.append(" ".join(caption[: t + 1]))
            ids.append(image_ids[i])
            rows.append(refs[i])
    values = reward(texts, RewardBatch(ids, rows)).float()
    lengths = torch.tensor([len(c) for c in captions])
    mask = torch.arange(width)[None, :] < lengths[:, None]  # (N, T)
    scores = torch.zeros(len(captions), width)
    scores[mask] = values  # row-major: caption by caption, prefix by prefix, as texts
    return scores, mask


def prefix_credit(reward: Reward, captions: Sequence[str], batch: RewardBatch, swap: int = 5) -> CreditShift:
    """How the delta rewards ([Wang18 sec. 3.3.3], scored by ``reward``) of ``captions`` change when the first
    ``swap`` words of each are replaced by those of the next caption (cyclically; one caption per clip,
    ``batch.image_ids[i]`` the clip of ``captions[i]``), each still scored against its own clip.

    Returns the mean change per caption over the replaced words and over the identical later words;
    their sum is the mean change of the whole captions' scores. Captions of ``swap`` words or fewer,
    and those whose first words the swap leaves unchanged, are left out."""
    clips = len(set(batch.image_ids))
    if not len(captions) == len(batch.image_ids) == clips >= 2:
        raise DataError(f"prefix_credit: expected one caption per clip of at least two clips, got "
                        f"{len(captions)} captions of {clips} clips")
    words = [tokenize(c) for c in captions]
    pairs = swapped_pairs(words, swap)
    if not pairs:
        raise DataError(f"prefix_credit: no caption has more than {swap} words and another clip's first words")
    index = [i for i, _ in pairs]
    both = [words[i] for i in index] + [w for _, w in pairs]  # the originals, then the swapped captions
    ids = [batch.image_ids[i] for i in index] * 2
    scores, mask = prefix_score_table(reward, both, ids, [batch.refs[i] for i in index] * 2)
    f = delta_rewards(scores, mask)  # (2M, T)
    before, after = f[: len(index)], f[len(index):]  # (M, T) each; the same lengths
    change = after - before
    return CreditShift(float(change[:, :swap].sum(1).mean()), float(change[:, swap:].sum(1).mean()), len(index))
