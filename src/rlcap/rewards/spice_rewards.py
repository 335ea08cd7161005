"""SPICE and SPIDEr as rewards, on rlcap's Python SPICE (``rlcap.metrics.spice``; no Java).

The references of the training set are parsed and merged into one scene graph per image once,
when the reward is built; candidates are parsed once per unique string and each (caption, image)
score is cached, so the many repeats of RL batches (n samples per image, Monte-Carlo rollouts)
cost a look-up. SPIDEr is (CIDEr-D + SPICE) / 2 (Liu et al. 2017, [Liu17]);
its CIDEr-D half follows ``eos_counts`` like the ``cider_d`` reward, SPICE scores the plain words.
"""

from __future__ import annotations

import torch

from rlcap.metrics.spice import SpiceScorer
from rlcap.metrics.spider import spider
from rlcap.rewards.batch import RewardBatch, TrainRefs, check_batch
from rlcap.rewards.context import RewardContext
from rlcap.rewards.metric_rewards import CiderDReward, cider_cache


class SpiceReward:
    """Per-caption SPICE F-score against the training references of ``batch.image_ids``."""

    def __init__(self, train_refs: TrainRefs):
        self.scorer = SpiceScorer({str(i): list(c) for i, c in train_refs.items()})

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        return torch.tensor(self.scorer.score(captions, batch.image_ids), dtype=torch.float32)  # cpu: a metric


class SpiderReward:
    """Per-caption SPIDEr = (CIDEr-D + SPICE) / 2, both against the training references."""

    def __init__(self, cider: CiderDReward, spice: SpiceReward):
        self.cider, self.spice = cider, spice

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        cider = self.cider(captions, batch).tolist()
        spice = self.spice(captions, batch).tolist()
        return torch.tensor([spider(c, s) for c, s in zip(cider, spice)], dtype=torch.float32)  # cpu: a metric


def make_spice(ctx: RewardContext) -> SpiceReward:
    return SpiceReward(ctx.train_refs)


def make_spider(ctx: RewardContext) -> SpiderReward:
    return SpiderReward(CiderDReward(ctx.train_refs, ctx.eos_counts, cache=cider_cache(ctx)), SpiceReward(ctx.train_refs))
