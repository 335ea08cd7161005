"""What a reward sees: the captions to score and a :class:`RewardBatch` describing them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

import torch

from rlcap.data.vocab import SPECIALS
from rlcap.data.feats import Feats
from rlcap.data.loader import Batch

# The end token appended to candidate and reference tokens when ``RewardConfig.eos_counts``
# is set: the vocabulary's own EOS spelling, which the caption tokenizer can never produce
# (it strips punctuation), so it cannot collide with a real word.
EOS_TOKEN = SPECIALS[2]

# Training image id -> its raw reference captions.
TrainRefs = Mapping[str, Sequence[str]]


class RewardBatch(NamedTuple):
    """Context for scoring ``len(image_ids)`` captions.

    image_ids: one per caption; the samples of one image are adjacent.
    refs: the raw reference captions of each caption's image, one list per caption.
    feats: the features of the batch's *images*, one row per image (not per caption), for rewards
        that look at the image (embedding, retrieval, discriminator); None when the caller has none.
    feats_index: (len(image_ids),) long, the row of ``feats`` each caption belongs to; None when
        feats has one row per caption.
    """

    image_ids: list[str]
    refs: list[list[str]]
    feats: Feats | None = None
    feats_index: torch.Tensor | None = None

    def caption_feats(self) -> Feats | None:
        """One row of features per caption (copied here, only for the rewards that ask)."""
        if self.feats is None or self.feats_index is None:
            return self.feats
        return self.feats.select(self.feats_index)


class Reward(Protocol):
    """``(captions, batch) -> (len(captions),) float tensor``; one score per caption.

    A reward scores; it never subtracts a baseline, prints or changes the captions.
    """

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor: ...


def check_batch(captions: list[str], batch: RewardBatch) -> None:
    """Raise ValueError unless ``batch`` has one image id and one reference list per caption."""
    if len(batch.image_ids) != len(captions) or len(batch.refs) != len(captions):
        raise ValueError(f"reward batch: {len(captions)} captions but {len(batch.image_ids)} image ids and "
                         f"{len(batch.refs)} reference lists (expected one of each per caption)")


def with_eos(tokens: list[str], eos_counts: bool) -> list[str]:
    """The tokens a reward scores: ``tokens + [EOS_TOKEN]`` when EOS counts, else ``tokens``."""
    return [*tokens, EOS_TOKEN] if eos_counts else list(tokens)


def reward_batch(batch: Batch, n: int) -> RewardBatch:
    """The context of n captions per image: ids and references per caption, features once per image."""
    rows = torch.arange(len(batch.ids), device=batch.feats.fc.device).repeat_interleave(n)  # (B*n,) caption -> image
    return RewardBatch([i for i in batch.ids for _ in range(n)], [r for r in batch.refs for _ in range(n)],
                       batch.feats, rows)
