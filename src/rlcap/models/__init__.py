"""Captioning models behind one interface (see :mod:`rlcap.models.base`) and their registry."""

from __future__ import annotations

from typing import Any

from torch import nn

from rlcap.errors import ConfigError
from rlcap.models.architectures import ARCHITECTURES, architecture
from rlcap.models.architecture import Architecture
from rlcap.models.base import Captioner, Feats, StatesHiddenSize, expand_batch, expand_memory, select_batch
from rlcap.models.model_config import ModelConfig
from rlcap.models.hrl import HRLCaptioner
from rlcap.models.embedding import EmbeddingModel, EmbeddingModelConfig, ImageTextEmbedder, load_embedding_model
from rlcap.models.show_tell import ShowTell
from rlcap.models.transformer import TransformerCaptioner
from rlcap.models.updown import UpDown
from rlcap.models.value import (FROM_POLICY_STATE, VALUE_MODELS, AttValueNetwork, HiddenValueNetwork, ValueModel,
                                ValueNetwork)


def model_vocab(cfg: ModelConfig) -> Any:
    """The text interface a new captioner of ``cfg`` brings, or None for one that builds its vocabulary from the
    training captions (its architecture's text codec: a transformers captioner reads text through its own tokenizer)."""
    return architecture(cfg.arch).text_codec(cfg)


def build_model(cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int) -> nn.Module:
    """The captioner named by ``cfg.arch``, built by its architecture (:data:`ARCHITECTURES`)."""
    return _building(cfg).build(cfg, vocab_size, fc_dim, att_dim)


def new_model(cfg: ModelConfig, vocab, fc_dim: int, att_dim: int) -> nn.Module:
    """A captioner to train from scratch: its architecture's :meth:`Architecture.new` (HRL's takes its trained critic)."""
    return _building(cfg).new(cfg, vocab, fc_dim, att_dim)


def _building(cfg: ModelConfig) -> Any:
    """The architecture of ``cfg``, which must read ``model.train_vision`` where it is set (an architecture of
    rlcap's own reads features from a store: it has no image side to train)."""
    arch = architecture(cfg.arch)
    if cfg.train_vision != "frozen" and not arch.reads(cfg, "train_vision"):
        raise ConfigError(f"model.train_vision={cfg.train_vision}: model.arch={cfg.arch} reads features from a "
                          "store and has no image side to train; only model.arch=hf trains one")
    return arch


def hidden_size(model: nn.Module, cfg: ModelConfig) -> int:
    """The width of ``model.hidden(state)``: ``model.hidden_dim`` for rlcap's own captioners (the transformer's
    d_model), the text decoder's width for a transformers captioner (:class:`StatesHiddenSize`)."""
    return int(model.hidden_size) if isinstance(model, StatesHiddenSize) else cfg.hidden_dim


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


__all__ = ["ARCHITECTURES", "VALUE_MODELS", "AttValueNetwork", "Captioner", "HRLCaptioner", "EmbeddingModel",
           "EmbeddingModelConfig", "Feats", "HiddenValueNetwork", "ImageTextEmbedder", "ModelConfig", "ShowTell",
           "TransformerCaptioner", "UpDown", "ValueModel", "ValueNetwork", "build_model", "build_value_model",
           "expand_batch", "expand_memory", "hidden_size", "load_embedding_model", "Architecture", "model_vocab", "new_model",
           "select_batch"]
