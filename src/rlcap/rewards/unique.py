"""Scoring many captions of which many repeat: each unique (caption, image) pair is scored once.

Monte-Carlo rollouts (PG-SPIDEr) score B*T*K completions per step, and a peaked policy completes
a prefix the same way again and again; MIXER's rows of an image repeat a reference once its
prefix holds the whole caption. A reward is a pure function of the caption and its image, so the
loops call it once per unique pair and scatter the scores back (one batched call: CIDEr-D's and
SPICE's per-call set-up is paid once, METEOR's Java process sees one request).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import torch

from rlcap.rewards import Reward, RewardBatch
from rlcap.rewards.combine import score


class UniqueScores(NamedTuple):
    rewards: torch.Tensor  # (N,) one per caption, as if every caption had been scored
    unique: int  # pairs the reward was called on
    seconds: float  # time spent in the reward


def unique_pairs(captions: list[str], image_ids: list[str]) -> tuple[list[int], torch.Tensor]:
    """The first index of every distinct (caption, image id) pair, and for every caption the
    position of its pair in that list: (U,) list, (N,) long.

    Example: captions [a, b, a, a], image ids [1, 1, 1, 2] -> [0, 1, 3], [0, 1, 0, 2]."""
    slot: dict[tuple[str, str], int] = {}
    first: list[int] = []
    where = []
    for i, pair in enumerate(zip(captions, image_ids)):
        if pair not in slot:
            slot[pair] = len(first)
            first.append(i)
        where.append(slot[pair])
    return first, torch.tensor(where, dtype=torch.long)  # cpu: indexes the rewards, gathered on the CPU


def score_unique(reward: Reward, captions: list[str], batch: RewardBatch) -> UniqueScores:
    """``score(reward, captions, batch)`` calling the reward on each distinct (caption, image) once."""
    start = time.perf_counter()
    first, where = unique_pairs(captions, batch.image_ids)
    rows_on = batch.feats_index.device if batch.feats_index is not None else (
        batch.feats.fc.device if batch.feats is not None else torch.device("cpu"))
    index = torch.tensor(first, dtype=torch.long, device=rows_on)
    feats_index = batch.feats_index.index_select(0, index) if batch.feats_index is not None else None
    feats = batch.feats if batch.feats_index is not None or batch.feats is None else batch.feats.select(index)
    sub = RewardBatch([batch.image_ids[i] for i in first], [batch.refs[i] for i in first], feats, feats_index)
    values = score(reward, [captions[i] for i in first], sub)  # (U,)
    return UniqueScores(values[where], len(first), time.perf_counter() - start)
