"""Sequence-level rewards: plain callables ``(captions, batch) -> Tensor[len(captions)]``.

A reward scores captions and nothing else: no baseline, no printing. Rewards are combined by the
weights of :class:`RewardConfig` into a :class:`WeightedReward` (:func:`build_reward`); names come
from the plain dict :data:`REWARDS`, or a user's reward is named by dotted import path. See docs/RL.md
for the EOS and non-finite conventions.
"""

from rlcap.rewards.batch import EOS_TOKEN, Reward, RewardBatch, TrainRefs
from rlcap.rewards.build import build_reward, resolve_reward
from rlcap.rewards.combine import NonFiniteRewardError, WeightedReward, check_finite
from rlcap.rewards.context import RewardContext
from rlcap.rewards.metric_rewards import BleuReward, CiderDReward, MeteorReward, RougeLReward
from rlcap.rewards.registry import REWARDS, load_dotted
from rlcap.rewards.reward_config import RewardConfig
from rlcap.rewards.spice_rewards import SpiceReward, SpiderReward

__all__ = ["EOS_TOKEN", "Reward", "RewardBatch", "TrainRefs", "NonFiniteRewardError", "WeightedReward", "check_finite",
           "RewardConfig", "RewardContext", "BleuReward", "CiderDReward", "MeteorReward", "RougeLReward", "SpiceReward",
           "SpiderReward", "REWARDS", "load_dotted", "build_reward", "resolve_reward"]
