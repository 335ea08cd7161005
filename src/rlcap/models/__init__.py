"""Captioning models behind one interface (see :mod:`rlcap.models.base`) and their registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from rlcap.errors import ConfigError
from rlcap.models.base import Captioner, Feats, expand_batch, expand_memory, select_batch
from rlcap.models.model_config import ModelConfig
from rlcap.models.hrl import HRLCaptioner
from rlcap.models.embedding import EmbeddingModel, EmbeddingModelConfig, ImageTextEmbedder, load_embedding_model
from rlcap.models.show_tell import ShowTell
from rlcap.models.transformer import TransformerCaptioner
from rlcap.models.updown import UpDown
from rlcap.models.value import (FROM_POLICY_STATE, VALUE_MODELS, AttValueNetwork, HiddenValueNetwork, ValueModel,
                                ValueNetwork)

def _hf_captioner(cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int) -> nn.Module:
    """A transformers captioner from ``model.path`` (rlcap.models.hf_captioner), on its stored tower tokens."""
    from rlcap.models.hf_captioner import HFCaptioner

    return HFCaptioner(cfg.path, vocab_size, att_dim, train=cfg.train, lora_rank=cfg.lora_rank,
                       lora_alpha=cfg.lora_alpha)


def model_vocab(cfg: ModelConfig) -> Any:
    """The text interface a new captioner of ``cfg`` brings, or None for one that builds its vocabulary from the
    training captions: a transformers captioner reads text through its own tokenizer."""
    if cfg.arch != "hf":
        return None
    from rlcap.data.hf_text import TokenizerVocab

    return TokenizerVocab.from_folder(cfg.path)


# arch name -> class (or builder); every one is built as cls(cfg, vocab_size, fc_dim, att_dim).
MODELS: dict[str, Callable[..., nn.Module]] = {
    "fc": ShowTell,
    "updown": UpDown,
    "transformer": TransformerCaptioner,
    "hrl": HRLCaptioner,  # [Wang18]'s manager, worker and internal critic, over frame features
    "hf": _hf_captioner,  # a transformers captioner from a local folder: its decoder the policy
}


def build_model(cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int) -> nn.Module:
    """The captioner named by ``cfg.arch``."""
    if cfg.arch not in MODELS:
        raise ConfigError(f"model.arch: unknown architecture {cfg.arch!r}; expected one of {', '.join(MODELS)}")
    return MODELS[cfg.arch](cfg, vocab_size, fc_dim, att_dim)


def _take_trained_critic(model: nn.Module, cfg: ModelConfig, vocab) -> None:
    """A new HRL captioner takes the trained internal critic, frozen inside ([Wang18 sec. 3.2])."""
    if not cfg.critic_from:
        raise ConfigError("model.arch=hrl needs model.critic_from: the internal critic's checkpoint "
                          "(train it first with algorithm=critic)")
    model.load_critic(cfg.critic_from, vocab)


# arch name -> what a new captioner of that arch needs beyond its random weights (not one loaded from a checkpoint)
NEW_MODEL_SETUP = {"hrl": _take_trained_critic}


def new_model(cfg: ModelConfig, vocab, fc_dim: int, att_dim: int) -> nn.Module:
    """A captioner to train from scratch: :func:`build_model`, then its arch's set-up (:data:`NEW_MODEL_SETUP`)."""
    model = build_model(cfg, len(vocab), fc_dim, att_dim)
    if cfg.arch in NEW_MODEL_SETUP:
        NEW_MODEL_SETUP[cfg.arch](model, cfg, vocab)
    return model


def hidden_size(model: nn.Module, cfg: ModelConfig) -> int:
    """The width of ``model.hidden(state)``: ``model.hidden_dim`` for rlcap's own captioners (the transformer's
    d_model), the text decoder's width for a transformers captioner (which sets ``hidden_size``)."""
    return int(getattr(model, "hidden_size", cfg.hidden_dim))


def build_value_model(cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int = 0,
                      features: str = "fc") -> ValueModel:
    """The value network V(image, partial caption) sized like the captioner, reading the image
    ``features`` (``ac.value_features``): ``fc`` the pooled vector, ``att`` also the regions (att_dim)."""
    if features == FROM_POLICY_STATE:
        raise ConfigError("ac.value_features=hidden reads the policy's decoder states as it samples: it has no state "
                          "to step word by word, so lookahead decoding and value diagnostics need fc or att")
    if features not in VALUE_MODELS:
        raise ConfigError(f"ac.value_features: unknown {features!r}; expected one of {', '.join(VALUE_MODELS)}")
    if features == "att" and att_dim < 1:
        raise ConfigError(f"ac.value_features=att needs region features; their size is {att_dim}")
    return VALUE_MODELS[features](cfg, vocab_size, fc_dim, att_dim)


__all__ = ["MODELS", "VALUE_MODELS", "AttValueNetwork", "Captioner", "HRLCaptioner", "EmbeddingModel",
           "EmbeddingModelConfig", "Feats", "HiddenValueNetwork", "ImageTextEmbedder", "ModelConfig", "ShowTell",
           "TransformerCaptioner", "UpDown", "ValueModel", "ValueNetwork", "build_model", "build_value_model",
           "expand_batch", "expand_memory", "hidden_size", "load_embedding_model", "model_vocab", "new_model",
           "select_batch"]
