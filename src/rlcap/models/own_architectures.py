"""rlcap's own captioners (fc, updown, transformer) and [Wang18]'s HRL captioner as architectures
(:class:`rlcap.models.architecture.Architecture`): built from the model section, their vocabulary from the training
captions, nothing beside their weights in a checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from rlcap.errors import ConfigError
from rlcap.models.hrl import HRLCaptioner
from rlcap.models.model_config import ModelConfig
from rlcap.models.show_tell import ShowTell
from rlcap.models.transformer import TransformerCaptioner
from rlcap.models.updown import UpDown


@dataclass(frozen=True)
class OwnArchitecture:
    """A captioner class built as ``model(cfg, vocab_size, fc_dim, att_dim)``, reading the model keys ``keys``;
    ``setup(model, cfg, vocab)``: what a new one needs beyond its random weights."""

    model: Callable[..., nn.Module]
    keys: tuple[str, ...] = ()  # the model section's keys its captioner reads (``arch`` aside)
    setup: Callable[[nn.Module, ModelConfig, Any], None] | None = None
    training_keys: tuple[str, ...] = ()
    brings_text_codec: bool = False  # (a vocabulary built from the training captions)
    starts_trained: bool = False  # (random weights, or HRL's trained critic beside them)
    scores_samples: bool = False  # (sampled with autograd through every step)

    def build(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int) -> nn.Module:
        return self.model(cfg, vocab_size, fc_dim, att_dim)

    def new(self, cfg: ModelConfig, vocab: Any, fc_dim: int, att_dim: int) -> nn.Module:
        model = self.build(cfg, len(vocab), fc_dim, att_dim)
        if self.setup is not None:
            self.setup(model, cfg, vocab)
        return model

    def reads(self, cfg: ModelConfig, key: str) -> bool:
        return key in self.keys

    def text_codec(self, cfg: ModelConfig) -> Any:
        return None

    def start_section(self, model: ModelConfig, folder: str | Path) -> ModelConfig | None:
        return None

    def saved_section(self, config: dict[str, Any]) -> dict[str, Any]:
        return config

    def found_section(self, folder: Path, config: dict[str, Any]) -> dict[str, Any]:
        return config

    def export(self, module: nn.Module, folder: Path, config: dict[str, Any], previous: Path | None) -> None:
        return None

    def evaluated(self, folder: Path, scores: dict[str, Any]) -> None:
        return None


def _take_trained_critic(model: nn.Module, cfg: ModelConfig, vocab: Any) -> None:
    """A new HRL captioner takes the trained internal critic, frozen inside ([Wang18 sec. 3.2])."""
    if not cfg.critic_from:
        raise ConfigError("model.arch=hrl needs model.critic_from: the internal critic's checkpoint "
                          "(train it first with algorithm=critic)")
    model.load_critic(cfg.critic_from, vocab)


LSTM_KEYS = ("embed_dim", "hidden_dim", "dropout")
SHOW_TELL = OwnArchitecture(ShowTell, LSTM_KEYS)
UPDOWN = OwnArchitecture(UpDown, (*LSTM_KEYS, "att_hidden_dim", "grid_boxes"))
TRANSFORMER = OwnArchitecture(TransformerCaptioner, ("hidden_dim", "dropout", "num_layers", "num_enc_layers", "num_heads",
                                               "ff_dim", "max_len", "grid_boxes"))
HRL = OwnArchitecture(HRLCaptioner, (*LSTM_KEYS, "att_hidden_dim", "manager_dim", "goal_dim", "critic_from"),
                setup=_take_trained_critic)  # [Wang18]'s manager, worker and internal critic
