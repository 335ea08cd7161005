"""Reward names -> factories (a plain dict), dotted import paths, and :func:`build_reward`.

A factory is ``factory(ctx) -> Reward`` with a :class:`~rlcap.rewards.context.RewardContext`:
the training references (CIDEr-D tokenizes them and takes its document frequencies from them,
once), the vocabulary, feature sizes, device and the paths of checkpoints a learned reward loads. A name that is not in :data:`REWARDS` but contains a
dot or a colon is imported: ``"mypkg.mod:func"`` or ``"mypkg.mod.func"`` names the reward
callable itself (TRL's convention), used as is.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlcap.errors import ConfigError
from rlcap.rewards import bcmr, embedding, metric_rewards, retrieval, spice_rewards
from rlcap.rewards.batch import Reward, TrainRefs
from rlcap.rewards.combine import WeightedReward
from rlcap.rewards.context import RewardContext

if TYPE_CHECKING:  # the config module imports this one to check reward names
    from rlcap.rewards.config import RewardConfig

RewardFactory = Callable[[RewardContext], Reward]

REWARDS: dict[str, RewardFactory] = {
    "cider_d": metric_rewards.make_cider_d,
    "cider": metric_rewards.make_cider,  # plain CIDEr (no clipping, no length penalty): [Wang18]'s delta rewards
    "bleu_1": functools.partial(metric_rewards.make_bleu, n=1),
    "bleu_2": functools.partial(metric_rewards.make_bleu, n=2),
    "bleu_3": functools.partial(metric_rewards.make_bleu, n=3),
    "bleu_4": functools.partial(metric_rewards.make_bleu, n=4),
    "meteor": metric_rewards.make_meteor,
    "rouge_l": metric_rewards.make_rouge_l,
    "spice": spice_rewards.make_spice,
    "spider": spice_rewards.make_spider,
    "embedding": embedding.make_embedding,
    "bcmr": bcmr.make_bcmr,
    # [Chaffin24]: a frozen retriever's similarity (CLIP-S) and eq. 2's contrastive rewards
    "clip_s": functools.partial(retrieval.make_retrieval_reward, kind="clip_s"),
    "i2t": functools.partial(retrieval.make_retrieval_reward, kind="i2t"),
    "t2i": functools.partial(retrieval.make_retrieval_reward, kind="t2i"),
    "bicont": functools.partial(retrieval.make_retrieval_reward, kind="bicont"),
}


def _is_dotted(name: str) -> bool:
    return ":" in name or "." in name


def _unknown(name: str, why: str = "") -> ConfigError:
    return ConfigError(f"unknown reward {name!r}{why}; allowed: {', '.join(REWARDS)}, "
                       "or a dotted import path 'mypkg.mod:func'")


def check_reward_name(name: str) -> None:
    """Raise ConfigError unless ``name`` is registered or has the form of a dotted path."""
    if name not in REWARDS and not _is_dotted(name):
        raise _unknown(name)


def load_dotted(path: str) -> Reward:
    """Import the reward callable named ``"pkg.mod:attr"`` or ``"pkg.mod.attr"``."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise _unknown(path, " (a dotted path needs a module and an attribute)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _unknown(path, f" (cannot import module {module_name!r}: {exc})") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise _unknown(path, f" (module {module_name!r} has no attribute {attr!r})") from None
    if not callable(obj):
        raise ConfigError(f"reward {path!r} is a {type(obj).__name__}, not a callable (captions, batch) -> Tensor")
    return obj


def resolve_reward(name: str, ctx: RewardContext) -> Reward:
    """The reward called ``name``: a registered factory's product, or an imported callable."""
    if name in REWARDS:
        return REWARDS[name](ctx)
    if _is_dotted(name):
        return load_dotted(name)
    raise _unknown(name)


def build_reward(cfg: "RewardConfig", train_refs: TrainRefs, vocab: Any = None, fc_dim: int = 0,
                 att_dim: int = 0, device: str = "cpu") -> WeightedReward:
    """The weighted sum of ``cfg.weights``' rewards, each built once; close it when the run ends
    (``with build_reward(...) as reward:``), as METEOR holds a Java process.

    Args:
        cfg: the reward section of the run config.
        train_refs: training image id -> raw reference captions (CIDEr-D's document frequencies).
        vocab, fc_dim, att_dim, device: the run's, for rewards that hold a model.
    """
    ctx = RewardContext(train_refs, cfg.eos_counts, cfg.cache_dir, vocab, fc_dim, att_dim, device, dict(cfg.paths),
                        cfg.retrieval_tau, cfg.hard_negatives, cfg.negative_captions)
    rewards = {}
    try:
        for name in cfg.weights:
            rewards[name] = resolve_reward(name, ctx)
    except BaseException:
        WeightedReward(rewards, {n: cfg.weights[n] for n in rewards}).close()
        raise
    return WeightedReward(rewards, cfg.weights, nonfinite=cfg.nonfinite)
