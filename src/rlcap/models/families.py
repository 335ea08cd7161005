"""The model families' registry: ``model.arch`` -> its family (:class:`rlcap.models.family.ModelFamily`). Adding a
family is its module and one line here (docs/ARCHITECTURE.md, "How to add a model family")."""

from __future__ import annotations

from pathlib import Path

from rlcap.errors import ConfigError
from rlcap.models.family import ModelFamily
from rlcap.models.hf_family import HF
from rlcap.models.model_config import ModelConfig
from rlcap.models.own_family import HRL, SHOW_TELL, TRANSFORMER, UPDOWN

FAMILIES: dict[str, ModelFamily] = {
    "fc": SHOW_TELL,
    "updown": UPDOWN,
    "transformer": TRANSFORMER,
    "hrl": HRL,  # [Wang18]'s manager, worker and internal critic, over frame features
    "hf": HF,  # a transformers captioner from a local folder: its decoder the policy
}


def archs() -> tuple[str, ...]:
    """The architectures ``model.arch`` takes: the registered families' names."""
    return tuple(FAMILIES)


def model_reads(model: ModelConfig, key: str) -> bool:
    """Whether the captioner of ``model`` reads its model key ``key`` (without ``model.``): its family says
    (:meth:`ModelFamily.reads`); ``arch`` always."""
    return key == "arch" or family(model.arch).reads(model, key)


def family(arch: str) -> ModelFamily:
    """The family of ``model.arch``; ConfigError listing the known ones."""
    if arch not in FAMILIES:
        raise ConfigError(f"model.arch: unknown architecture {arch!r}; expected one of {', '.join(FAMILIES)}")
    return FAMILIES[arch]


def folder_section(model: ModelConfig, folder: str | Path) -> ModelConfig | None:
    """The model section that starts a run from ``folder`` (``init_from``) when a family's own kind of folder
    holds it (a transformers captioner's); None: an rlcap checkpoint."""
    for each in dict.fromkeys(FAMILIES.values()):
        section = each.start_section(model, folder)
        if section is not None:
            return section
    return None


def training_keys() -> tuple[str, ...]:
    """The model keys any family trains by rather than builds by (:attr:`ModelFamily.training_keys`)."""
    return tuple(dict.fromkeys(key for each in FAMILIES.values() for key in each.training_keys))
