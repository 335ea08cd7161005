"""BCMR: the weighted sum of BLEU-4, CIDEr-D, METEOR and ROUGE-L that [Liu17]
optimises as PG-BCMR (the four COCO metrics of the time).

The weights are the metrics' (:data:`rlcap.metrics.combined.BCMR_WEIGHTS`, equal: the summary of [Liu17] we
hold names the four metrics but not their weights), so that the reward a run learns from and the corpus BCMR
it validates by (``val.metric: BCMR``) weigh the same. On their own scales CIDEr-D (pycocoevalcap's, about 1
on COCO and 0-10 in range) varies the most between captions, so it carries most of the reward's variance; a
run that wants other weights lists the four rewards in ``reward.weights`` itself instead of naming ``bcmr``.
METEOR needs Java; the reward is closed with the run's :class:`WeightedReward`, which stops its
process.
"""

from __future__ import annotations

from rlcap.errors import ConfigError, RlcapError
from rlcap.metrics.combined import BCMR_WEIGHTS as METRIC_WEIGHTS
from rlcap.rewards.combine import WeightedReward
from rlcap.rewards.context import RewardContext
from rlcap.rewards.cider_device import make_cider_d
from rlcap.rewards.metric_rewards import BleuReward, MeteorReward, RougeLReward

# the reward that scores each of BCMR's metrics (score_captions' names) caption by caption
PART_REWARDS: dict[str, str] = {"Bleu_4": "bleu_4", "CIDEr": "cider_d", "METEOR": "meteor", "ROUGE_L": "rouge_l"}
BCMR_WEIGHTS: dict[str, float] = {PART_REWARDS[metric]: weight for metric, weight in METRIC_WEIGHTS.items()}


def make_bcmr(ctx: RewardContext) -> WeightedReward:
    """BLEU-4 + CIDEr-D + METEOR + ROUGE-L (weights :data:`BCMR_WEIGHTS`); BLEU-4 and CIDEr-D follow
    ``eos_counts`` as their own rewards do."""
    try:
        meteor = MeteorReward()
    except RlcapError as exc:
        raise ConfigError(f"reward 'bcmr' is not available (its METEOR part): {exc}") from exc
    parts = {"bleu_4": BleuReward(4, ctx.eos_counts), "cider_d": make_cider_d(ctx), "meteor": meteor,
             "rouge_l": RougeLReward()}
    return WeightedReward(parts, BCMR_WEIGHTS)
