"""Reward names -> factories: a plain dict of lazy ``"module:factory"`` strings, and dotted import paths.

A factory is ``factory(ctx) -> Reward`` with a :class:`~rlcap.rewards.context.RewardContext`. Entries
are imported on first use, so that checking a config's reward names (:func:`check_reward_name`)
imports no reward implementation (no retriever, image bank or SPICE parser). A user's or a test's
own reward is one more entry holding the factory itself. A name that is not in :data:`REWARDS` but
contains a dot or a colon is imported: ``"mypkg.mod:func"`` or ``"mypkg.mod.func"`` names the reward
callable itself (TRL's convention), used as is. Building the rewards of a config is
:func:`rlcap.rewards.build.build_reward`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rlcap.errors import ConfigError

R = "rlcap.rewards."
REWARDS: dict[str, str | Callable[[Any], Any]] = {
    "cider_d": R + "metric_rewards:make_cider_d",
    "cider": R + "metric_rewards:make_cider",  # plain CIDEr (no clipping, no length penalty): [Wang18]'s delta rewards
    "bleu_1": R + "metric_rewards:make_bleu_1",
    "bleu_2": R + "metric_rewards:make_bleu_2",
    "bleu_3": R + "metric_rewards:make_bleu_3",
    "bleu_4": R + "metric_rewards:make_bleu_4",
    "meteor": R + "metric_rewards:make_meteor",
    "rouge_l": R + "metric_rewards:make_rouge_l",
    "spice": R + "spice_rewards:make_spice",
    "spider": R + "spice_rewards:make_spider",
    "embedding": R + "embedding:make_embedding",
    "bcmr": R + "bcmr:make_bcmr",
    # [Chaffin24]: a frozen retriever's similarity (CLIP-S) and eq. 2's contrastive rewards
    "clip_s": R + "retrieval:make_clip_s",
    "i2t": R + "retrieval:make_i2t",
    "t2i": R + "retrieval:make_t2i",
    "bicont": R + "retrieval:make_bicont",
}


def _is_dotted(name: str) -> bool:
    return ":" in name or "." in name


def unknown_reward(name: str, why: str = "") -> ConfigError:
    return ConfigError(f"unknown reward {name!r}{why}; allowed: {', '.join(REWARDS)}, "
                       "or a dotted import path 'mypkg.mod:func'")


def check_reward_name(name: str) -> None:
    """Raise ConfigError unless ``name`` is registered or has the form of a dotted path."""
    if name not in REWARDS and not _is_dotted(name):
        raise unknown_reward(name)


def factory(name: str) -> Callable[[Any], Any]:
    """The factory registered as ``name`` (imported on first use)."""
    entry = REWARDS[name]
    if callable(entry):
        return entry
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


def load_dotted(path: str) -> Callable[..., Any]:
    """Import the reward callable named ``"pkg.mod:attr"`` or ``"pkg.mod.attr"``."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise unknown_reward(path, " (a dotted path needs a module and an attribute)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise unknown_reward(path, f" (cannot import module {module_name!r}: {exc})") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise unknown_reward(path, f" (module {module_name!r} has no attribute {attr!r})") from None
    if not callable(obj):
        raise ConfigError(f"reward {path!r} is a {type(obj).__name__}, not a callable (captions, batch) -> Tensor")
    return obj
