"""What an architecture is: one protocol every architecture of captioners implements (rlcap's own, transformers
captioners, HRL), which the engine (``rlcap.train``) and inference (``rlcap.eval``) ask through the registry
(:mod:`rlcap.models.architectures`), never importing an architecture's module.

An architecture builds its captioner from the model section and the vocabulary's size, says whether it starts from a
folder of its own kind (``init_from``), brings its text codec (a tokenizer) or leaves the vocabulary to the
training captions, and says how its model section is written into a checkpoint and read back from one, and what
it exports beside its weights there. Its modules read saved weights their own way through
:class:`rlcap.train.checkpoint.AdaptsWeights` (a LoRA policy's adapters)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from torch import nn

from rlcap.models.model_config import ModelConfig


@runtime_checkable
class Architecture(Protocol):
    """One architecture of captioners (docs/ARCHITECTURE.md, "How to add an architecture")."""

    # model keys that say how a run trains the captioner rather than what it is: a run started from a checkpoint
    # (init_from) takes them from its own settings, the rest from the checkpoint
    training_keys: tuple[str, ...]
    # whether :meth:`text_codec` brings the vocabulary (a tokenizer): then none is built from the captions
    brings_text_codec: bool
    # whether a new captioner starts from trained weights (a transformers captioner's folder), not random ones: a
    # method meant to continue an XE model warns of a run without init_from only when they are random
    starts_trained: bool
    # whether its captioners are sampled without autograd and scored in one teacher-forced pass
    # (rlcap.models.base.ScoresSamples): only then does a run read rl.micro_batch, the rows of a scoring pass
    scores_samples: bool

    def build(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int) -> nn.Module:
        """The captioner of ``cfg``, its weights random (or its folder's, for a pretrained one)."""

    def new(self, cfg: ModelConfig, vocab: Any, fc_dim: int, att_dim: int) -> nn.Module:
        """A captioner to train from scratch (not loaded from a checkpoint): :meth:`build` and any set-up it needs
        (HRL's trained internal critic)."""

    def reads(self, cfg: ModelConfig, key: str) -> bool:
        """Whether a captioner of this architecture built from ``cfg`` reads the model key ``key`` (without ``model.``,
        ``arch`` aside): what ``--help-config`` lists for it, and what a run warns of when set but never read."""

    def text_codec(self, cfg: ModelConfig) -> Any:
        """The vocabulary a new captioner of ``cfg`` brings (its tokenizer), or None: built from the captions."""

    def start_section(self, model: ModelConfig, folder: str | Path) -> ModelConfig | None:
        """``init_from`` a folder of this architecture (not an rlcap checkpoint): the model section that starts there,
        ``model`` the run's own; None when ``folder`` is not one."""

    def saved_section(self, config: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's run config as the checkpoint records it: every path its model reads found from the
        checkpoint itself (a transformers policy: its own exported folder)."""

    def found_section(self, folder: Path, config: dict[str, Any]) -> dict[str, Any]:
        """The run config read from checkpoint ``folder`` with its model's paths absolute."""

    def export(self, module: nn.Module, folder: Path, config: dict[str, Any], previous: Path | None) -> None:
        """Write what the checkpoint being saved in ``folder`` holds beside the weights (a transformers folder);
        ``previous``: the complete checkpoint this save replaces, or None (what did not change may come from it)."""

    def evaluated(self, folder: Path, scores: dict[str, Any]) -> None:
        """An evaluation of checkpoint ``folder`` has written ``scores`` (scores.json): what the checkpoint keeps
        of them beside its weights, where its export holds a place for them (a transformers folder's model card
        takes the scores of its own decoding); nothing for most architectures."""


@runtime_checkable
class ComputesImageTokens(Protocol):
    """An architecture whose policies can read pictures instead of a feature store: ``online_features`` is what
    :func:`rlcap.data.loader.load_data` calls with a split's records to have their features computed from their
    pictures (``data.images``) by the policy's own processor and image side on ``device``
    (:mod:`rlcap.encoders.online`)."""

    def online_features(self, cfg: ModelConfig, data: Any, device: Any) -> Any: ...
