"""Sequence-level rewards: plain callables ``(captions, batch) -> Tensor[len(captions)]``.

A reward scores captions and nothing else: no baseline, no printing. Rewards are combined by the
weights of :class:`RewardConfig` into a :class:`WeightedReward` (:func:`build_reward`); names come
from the plain dict :data:`REWARDS` (lazy ``"module:factory"`` strings), or a user's reward is named
by dotted import path. See docs/RL.md for the EOS and non-finite conventions.

The names below are imported on first use, so that reading the config schema
(:class:`RewardConfig`) imports no reward implementation.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "EOS_TOKEN": "batch", "Reward": "batch", "RewardBatch": "batch", "TrainRefs": "batch",
    "NonFiniteRewardError": "combine", "WeightedReward": "combine", "check_finite": "combine",
    "RewardConfig": "reward_config", "RewardContext": "context",
    "BleuReward": "metric_rewards", "CiderDReward": "metric_rewards", "MeteorReward": "metric_rewards",
    "RougeLReward": "metric_rewards", "SpiceReward": "spice_rewards", "SpiderReward": "spice_rewards",
    "REWARDS": "registry", "load_dotted": "registry", "build_reward": "build", "resolve_reward": "build",
}
__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'rlcap.rewards' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rlcap.rewards.{_WHERE[name]}"), name)
