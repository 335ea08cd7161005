"""Algorithm name -> its training loop, ``train(cfg) -> TrainResult``: a plain dict.

Each loop is one file in rlcap/train/. Entries are dotted paths imported on first use (so that
``rlcap --help`` imports no loop) or the callables themselves; a user's or a test's own loop is
one more entry.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from rlcap.errors import ConfigError

Trainer = Callable[[Any], Any]

TRAINERS: dict[str, str | Trainer] = {
    "xe": "rlcap.train.xe:train_xe",
    "scst": "rlcap.train.scst:train_scst",
    "sll_me": "rlcap.train.sll_me:train_sll_me",
    "sll_sle": "rlcap.train.sll_sle:train_sll_sle",
    "embedding": "rlcap.train.embedding:train_embedding",
    "ac": "rlcap.train.actor_critic:train_actor_critic",
    "pg": "rlcap.train.pg:train_pg",
    "mixer": "rlcap.train.mixer:train_mixer",
    "wtf_rl": "rlcap.train.wtf_rl:train_wtf_rl",
    "critic": "rlcap.train.critic:train_critic",
    "hrl": "rlcap.train.hrl:train_hrl",
}


def trainer(algorithm: str) -> Trainer:
    """The loop registered for ``algorithm``; one clear line for an unknown name."""
    if algorithm not in TRAINERS:
        raise ConfigError(f"algorithm: {algorithm!r} is not one of {sorted(TRAINERS)}")
    entry = TRAINERS[algorithm]
    if callable(entry):
        return entry
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)
