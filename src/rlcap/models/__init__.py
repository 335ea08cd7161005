"""Captioning models behind one interface (see :mod:`rlcap.models.base`) and their registry."""

from __future__ import annotations

from torch import nn

from rlcap.errors import ConfigError
from rlcap.models.base import Captioner, Feats, expand_batch, expand_memory, select_batch
from rlcap.models.config import ModelConfig
from rlcap.models.hrl import HRLCaptioner
from rlcap.models.embedding import EmbeddingModel, EmbeddingModelConfig, ImageTextEmbedder, load_embedding_model
from rlcap.models.show_tell import ShowTell
from rlcap.models.transformer import TransformerCaptioner
from rlcap.models.updown import UpDown
from rlcap.models.value import ValueNetwork

# arch name -> class; every class is built as cls(cfg, vocab_size, fc_dim, att_dim).
MODELS: dict[str, type[nn.Module]] = {
    "fc": ShowTell,
    "updown": UpDown,
    "transformer": TransformerCaptioner,
    "hrl": HRLCaptioner,  # 004's manager, worker and internal critic, over frame features
}


def build_model(cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int) -> nn.Module:
    """The captioner named by ``cfg.arch``."""
    if cfg.arch not in MODELS:
        raise ConfigError(f"model.arch: unknown architecture {cfg.arch!r}; expected one of {', '.join(MODELS)}")
    return MODELS[cfg.arch](cfg, vocab_size, fc_dim, att_dim)


def build_value_model(cfg: ModelConfig, vocab_size: int, fc_dim: int) -> ValueNetwork:
    """The value network V(image, partial caption) sized like the captioner."""
    return ValueNetwork(cfg, vocab_size, fc_dim)


__all__ = ["MODELS", "Captioner", "HRLCaptioner", "EmbeddingModel", "EmbeddingModelConfig", "Feats", "ImageTextEmbedder",
           "ModelConfig", "ShowTell", "TransformerCaptioner", "UpDown", "ValueNetwork", "build_model",
           "build_value_model", "expand_batch", "expand_memory", "load_embedding_model", "select_batch"]
