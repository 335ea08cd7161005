"""Building the rewards a config names: each name resolved once (:func:`resolve_reward`) and their
weighted sum (:func:`build_reward`), a :class:`WeightedReward` to close when the run ends."""

from __future__ import annotations

from typing import Any

from rlcap.rewards.batch import Reward, TrainRefs
from rlcap.rewards.combine import WeightedReward
from rlcap.rewards.reward_config import RewardConfig
from rlcap.rewards.context import RewardContext
from rlcap.rewards.length import LengthMasked
from rlcap.rewards.registry import REWARDS, _is_dotted, factory, load_dotted, unknown_reward


def resolve_reward(name: str, ctx: RewardContext) -> Reward:
    """The reward called ``name``: a registered factory's product, or an imported callable."""
    if name in REWARDS:
        return factory(name)(ctx)
    if _is_dotted(name):
        return load_dotted(name)
    raise unknown_reward(name)


def build_reward(cfg: RewardConfig, train_refs: TrainRefs, vocab: Any = None, fc_dim: int = 0,
                 att_dim: int = 0, device: str = "cpu") -> WeightedReward:
    """The weighted sum of ``cfg.weights``' rewards, each built once; close it when the run ends
    (``with build_reward(...) as reward:``), as METEOR holds a Java process.

    Args:
        cfg: the reward section of the run config.
        train_refs: training image id -> raw reference captions (CIDEr-D's document frequencies).
        vocab, fc_dim, att_dim, device: the run's, for rewards that hold a model.
    """
    ctx = RewardContext.from_config(cfg, train_refs, vocab=vocab, fc_dim=fc_dim, att_dim=att_dim, device=device)
    rewards = {}
    try:
        for name in cfg.weights:
            rewards[name] = resolve_reward(name, ctx)
            if name in cfg.length_mask:  # [Ye26]'s length-conditional masking of this reward
                rewards[name] = LengthMasked(rewards[name], cfg.length_mask[name])
    except BaseException:
        WeightedReward(rewards, {n: cfg.weights[n] for n in rewards}).close()
        raise
    return WeightedReward(rewards, cfg.weights, nonfinite=cfg.nonfinite)
