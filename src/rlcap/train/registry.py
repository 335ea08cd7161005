"""Method name -> :class:`Method`: its training loop and its config section, a plain dict.

Each method is one file in ``rlcap/methods/`` holding its config dataclass, its step and its loop.
Entries name them by ``"module:attribute"`` strings, imported on first use (so that ``rlcap --help``
imports no loop), or hold the objects themselves: a user's or a test's own method is one more entry::

    METHODS["toy"] = Method(train_toy, ToyConfig)

``algorithm=toy`` then parses the shared sections plus a ``toy:`` section of ``ToyConfig`` and runs
``train_toy(cfg)``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from rlcap.errors import ConfigError

Trainer = Callable[[Any], Any]


def resolve(entry: Any) -> Any:
    """An entry's object: itself, or the attribute a ``"module:attribute"`` string names."""
    if not isinstance(entry, str):
        return entry
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Method:
    """One training method.

    ``train``: its loop, ``train(cfg) -> TrainResult``. ``config``: the dataclass of its own section,
    named as the method (``scst:``), or None for none. ``rl``: it also reads the ``rl`` section (the
    budget and rollouts of the sequence-level methods). ``epochs``: the key that holds its number
    of epochs (whether a run stopped early). ``reward``: its policy learns from ``reward.weights``
    (``val.metric: auto`` then keeps best/ by the metric the reward optimises). ``check``: a
    function ``check(cfg)`` for rules across sections, raising ConfigError. ``help``: one line.
    ``skips``: shared keys its loop never reads (a key, or a section's prefix ending in ``.``), left
    out of ``rlcap train --help-config`` (:func:`rlcap.train.run_config.read_by`). ``from_xe``: it
    continues an XE model (its recipes name ``init_from``, whose checkpoint gives the architecture and
    the vocabulary); a run without one warns, and ``--help-config`` lists the keys of a run with one."""

    train: str | Trainer
    config: str | type | None = None
    rl: bool = True
    epochs: str = "rl.epochs"
    reward: bool = True
    check: str | Callable[[Any], None] | None = None
    help: str = ""
    skips: tuple[str, ...] = ()
    from_xe: bool = False


M = "rlcap.methods."
# What the trainers of other models than the captioner leave unread: they decode no caption and keep best/
# by their own score (the embedding's mean recall, the critic's F1), and the embedding builds no captioner.
NO_DECODING = ("decode.", "val.metric")
SAMPLING = ("rl.n_samples", "rl.sample_method", "rl.rollout_dropout", "decode.temperature")  # sampled captions
METHODS: dict[str, Method] = {
    "xe": Method(M + "xe:train_xe", M + "xe:XEConfig", rl=False, epochs="xe.epochs", reward=False,
                 skips=("decode.temperature",), help="cross-entropy training (teacher forcing)"),
    "scst": Method(M + "scst:train_scst", M + "scst:ScstConfig", from_xe=True, check=M + "scst:check_baseline",
                   help="self-critical sequence training [Rennie17], or SLL [Chen20]"),
    "sll_me": Method(M + "sll_me:train_sll_me", M + "sll_me:SllMeConfig", from_xe=True,
                     check=M + "scst:check_baseline",
                     help="SLL-ME: SCST plus a per-word entropy bonus [Chen20 sec. 5.2]"),
    "sll_sle": Method(M + "sll_sle:train_sll_sle", M + "sll_sle:SllSleConfig", from_xe=True,
                      help="SLL-SLE: SCST plus sequence-level exploration [Chen20 eq. 8-16]"),
    "embedding": Method(M + "embedding:train_embedding", M + "embedding:EmbeddingConfig", rl=False,
                        epochs="embedding.epochs", reward=False, skips=("model.", *NO_DECODING),
                        help="the image-caption embedding that the embedding reward loads [Shi18]"),
    "retriever": Method(M + "embedding:train_embedding", M + "embedding:RetrieverConfig", rl=False,
                        epochs="retriever.epochs", reward=False, skips=("model.", *NO_DECODING),
                        help="a dual encoder trained contrastively: the retriever and the judge of [Chaffin24]"),
    "ac": Method(M + "actor_critic:train_actor_critic", M + "actor_critic:ActorCriticConfig", from_xe=True,
                 help="actor-critic with a value network [Shi18]"),
    "pg": Method(M + "pg:train_pg", M + "pg:PgConfig", from_xe=True,
                 help="PG-SPIDEr: Monte-Carlo rollouts and a learned baseline [Liu17]"),
    "mixer": Method(M + "mixer:train_mixer", M + "mixer:MixerConfig", from_xe=True,
                    help="MIXER: XE on a prefix annealed to 0, REINFORCE after it [Ranzato16, as Liu17]"),
    "wtf_rl": Method(M + "wtf_rl:train_wtf_rl", M + "wtf_rl:WtfRlConfig", from_xe=True,
                     skips=SAMPLING,  # beam and greedy only
                     help="distinctive captioning: WTF, RL and WTF-RL with a retrieval reward [Chaffin24]"),
    "scst_discriminator": Method(M + "scst_discriminator:train_scst_discriminator",
                                 M + "scst_discriminator:ScstDiscriminatorConfig", from_xe=True,
                                 help="SCST on a retrieval reward plus a discriminator's [Chaffin24]"),
    "critic": Method(M + "critic:train_critic", M + "critic:CriticConfig", rl=False, epochs="critic.epochs",
                     reward=False, skips=("model.arch", "model.att_hidden_dim", "model.dropout", "val.max_images",
                                          "val.batch_size", *NO_DECODING),  # sized by embed_dim, hidden_dim
                     help="the internal critic of HRL, trained before it [Wang18]"),
    "hrl": Method(M + "hrl:train_hrl", M + "hrl:HrlConfig", from_xe=True,
                  help="hierarchical RL for video: alternating worker and manager phases [Wang18]"),
}


def method(name: str) -> Method:
    """The method registered as ``name``; one clear line for an unknown name."""
    if name not in METHODS:
        raise ConfigError(f"algorithm: {name!r} is not one of {sorted(METHODS)}")
    return METHODS[name]


def trainer(name: str) -> Trainer:
    """The loop of method ``name``."""
    return resolve(method(name).train)
