"""The architectures' registry: ``model.arch`` -> its architecture (:class:`rlcap.models.architecture.Architecture`). Adding a
architecture is its module and one line here (docs/ARCHITECTURE.md, "How to add an architecture")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcap.errors import ConfigError
from rlcap.models.architecture import Architecture, ComputesImageTokens
from rlcap.models.hf.architecture import HF
from rlcap.models.model_config import ModelConfig
from rlcap.models.own_architectures import HRL, SHOW_TELL, TRANSFORMER, UPDOWN

ARCHITECTURES: dict[str, Architecture] = {
    "fc": SHOW_TELL,
    "updown": UPDOWN,
    "transformer": TRANSFORMER,
    "hrl": HRL,  # [Wang18]'s manager, worker and internal critic, over frame features
    "hf": HF,  # a transformers captioner from a local folder: its decoder the policy
}


def archs() -> tuple[str, ...]:
    """The architectures ``model.arch`` takes: the registered architectures' names."""
    return tuple(ARCHITECTURES)


def model_reads(model: ModelConfig, key: str) -> bool:
    """Whether the captioner of ``model`` reads its model key ``key`` (without ``model.``): its architecture says
    (:meth:`Architecture.reads`); ``arch`` always."""
    return key == "arch" or architecture(model.arch).reads(model, key)


def architecture(arch: str) -> Architecture:
    """The architecture of ``model.arch``; ConfigError listing the known ones."""
    if arch not in ARCHITECTURES:
        raise ConfigError(f"model.arch: unknown architecture {arch!r}; expected one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def folder_section(model: ModelConfig, folder: str | Path) -> ModelConfig | None:
    """The model section that starts a run from ``folder`` (``init_from``) when an architecture's own kind of folder
    holds it (a transformers captioner's); None: an rlcap checkpoint."""
    for each in dict.fromkeys(ARCHITECTURES.values()):
        section = each.start_section(model, folder)
        if section is not None:
            return section
    return None


def training_keys() -> tuple[str, ...]:
    """The model keys any architecture trains by rather than builds by (:attr:`Architecture.training_keys`)."""
    return tuple(dict.fromkeys(key for each in ARCHITECTURES.values() for key in each.training_keys))


def online_features(model: ModelConfig, data: Any, device: Any) -> Any:
    """What :func:`rlcap.data.loader.load_data` computes a split's features with when the run has no feature store
    (``data.features`` unset): the policy's architecture's own image side, where it has one
    (:class:`~rlcap.models.architecture.ComputesImageTokens`); None otherwise (the store is then asked for)."""
    if data.features:
        return None
    arch = architecture(model.arch)
    return arch.online_features(model, data, device) if isinstance(arch, ComputesImageTokens) else None

