"""Reward names -> factories: the plain dict :data:`REWARDS`, and dotted import paths.

A factory is ``factory(ctx) -> Reward`` with a :class:`~rlcap.rewards.context.RewardContext`. A user's or
a test's own reward is one more entry holding its factory (:data:`SETTINGS` names the ``reward.*`` keys it
reads beside its weight, when it reads any). A name that is not in :data:`REWARDS` but contains a dot or
a colon is imported: ``"mypkg.mod:func"`` or ``"mypkg.mod.func"`` names the reward callable itself (TRL's
convention), used as is. Building the rewards of a config is :func:`rlcap.rewards.build.build_reward`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rlcap.errors import ConfigError
from rlcap.rewards.bcmr import make_bcmr
from rlcap.rewards.embedding import make_embedding
from rlcap.rewards.length import make_length
from rlcap.rewards.cider_device import make_cider, make_cider_d
from rlcap.rewards.repetition import make_repetition
from rlcap.rewards.qa_utility import QA_SETTINGS, make_qa_utility
from rlcap.rewards.metric_rewards import make_bleu_1, make_bleu_2, make_bleu_3, make_bleu_4, make_meteor, make_rouge_l
from rlcap.rewards.retrieval import (RETRIEVAL_SETTINGS, SIMILARITIES, make_bicont, make_clip_s, make_i2t,
                                     make_ref_clip_s, make_t2i)
from rlcap.rewards.spice_rewards import make_spice, make_spider

REWARDS: dict[str, Callable[[Any], Any]] = {
    "cider_d": make_cider_d,
    "cider": make_cider,  # plain CIDEr (no clipping, no length penalty): [Wang18]'s delta rewards
    "bleu_1": make_bleu_1,
    "bleu_2": make_bleu_2,
    "bleu_3": make_bleu_3,
    "bleu_4": make_bleu_4,
    "meteor": make_meteor,
    "rouge_l": make_rouge_l,
    "spice": make_spice,
    "spider": make_spider,
    "embedding": make_embedding,
    "bcmr": make_bcmr,
    # [Chaffin24]: a frozen retriever's similarity (CLIP-S) and eq. 2's contrastive rewards
    "clip_s": make_clip_s,
    "ref_clip_s": make_ref_clip_s,  # RefCLIP-S: CLIP-S and the caption's best cosine with its references
    "i2t": make_i2t,
    "t2i": make_t2i,
    "bicont": make_bicont,
    "length": make_length,  # minus the share a caption overshoots reward.length_target by ([Yang26]; rewards/length.py)
    "repetition": make_repetition,  # minus the share of repeated n-grams ([Yeo25]; rewards/repetition.py)
    "qa_utility": make_qa_utility,  # [Xing26]: a text-only reader's answers to the picture's questions
}
# reward name -> the reward.* keys it reads beside its weight (a learned reward's model, a retriever's settings)
SETTINGS: dict[str, tuple[str, ...]] = {"embedding": ("paths",), "length": ("length_target", "length_end"),
                                        "repetition": ("repetition_ngram",),
                                        "qa_utility": QA_SETTINGS,
                                        **{name: RETRIEVAL_SETTINGS for name in (*SIMILARITIES, "ref_clip_s")}}
# reward name -> the combined corpus metric it optimises (a name of rlcap.metrics.combined.COMBINED): what
# val.metric: auto keeps best/ by in a run that learns from it, the first one named here that the run's weights
# have (CIDEr-D when none)
OPTIMISES: dict[str, str] = {"spider": "SPIDEr", "bcmr": "BCMR"}


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
    """The factory registered as ``name``."""
    return REWARDS[name]


def settings_of_some() -> set[str]:
    """The ``reward.*`` keys (without the prefix) that only the rewards of :data:`SETTINGS` read."""
    return {key for keys in SETTINGS.values() for key in keys}


def settings_read(weights: dict[str, float]) -> set[str]:
    """The ``reward.*`` keys (without the prefix) that the rewards of ``weights`` read beside their weights."""
    return {key for name in weights for key in SETTINGS.get(name, ())}


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
