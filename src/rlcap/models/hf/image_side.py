"""The image side of a transformers model taken out of it, for a policy that reads its output from a feature store
(every hf policy): the surgery the policies share, beside them.

The image side's modules are frozen and kept aside (:class:`KeptAside`, not a submodule: the policy's weights leave
them out, and the export writes them back under their names). What stands in their place depends on what the
policy hands the model:

* a captioner (VisionEncoderDecoder, BLIP, GIT) keeps its model's own forward: :class:`StoredTower` stands where the
  tower was and hands on the stored tokens as the tower's output (:func:`swap_out` with ``stand_in``);
* Florence-2 keeps its own projector: :class:`StoredMap` hands on the tower's stored map to it;
* a decoder-only vision-language model reads the image tokens as precomputed features (``mm_encoder_outputs``):
  nothing stands in, the image side's children are removed (:func:`take_out`).

Which modules are the image side is read from the model (``rlcap.transformers_io``: what feature extraction reads
too), never from a table of families.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from rlcap.errors import RlcapError


class KeptAside(NamedTuple):
    """The image side's weights out of the model: ``modules`` (frozen) under ``prefix`` (their path in the model's
    state dict), whose digest (:func:`rlcap.encoders.hf.tower_digest`) a feature store of them records."""

    prefix: str
    modules: nn.Module

    def state(self) -> dict[str, torch.Tensor]:
        """The kept-aside weights under the model's names."""
        return {f"{self.prefix}.{k}".lstrip("."): v for k, v in self.modules.state_dict().items()}

    def dtype(self) -> torch.dtype:
        return next(self.modules.parameters()).dtype


class StoredTower(nn.Module):
    """Stands where a captioner's vision tower was: its "pixel_values" are the stored tokens (B, 1, T, D), returned
    as the tower's last hidden state (and its first token as the pooled output)."""

    main_input_name = "pixel_values"

    def __init__(self, config: Any):
        super().__init__()
        self.config = config

    def forward(self, pixel_values: torch.Tensor, **_: Any) -> Any:
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        tokens = pixel_values[:, 0]  # (B, T, D)
        return BaseModelOutputWithPooling(last_hidden_state=tokens, pooler_output=tokens[:, 0])


class StoredMap(nn.Module):
    """Stands where the model's vision tower was: its "pixel_values" are the tower's stored map (B, C, h, w),
    returned as the tower's last hidden state, for the model's own projector."""

    def forward(self, pixel_values: torch.Tensor, **_: Any) -> Any:
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        return BaseModelOutputWithPooling(last_hidden_state=pixel_values)


def _path(model: nn.Module, module: nn.Module) -> str:
    return next(path for path, each in model.named_modules() if each is module)


def swap_out(model: nn.Module, tower: nn.Module, stand_in: nn.Module) -> KeptAside:
    """Put ``stand_in`` where ``tower`` is in ``model``; the tower frozen and kept aside."""
    for parent in model.modules():
        for name, child in parent.named_children():
            if child is tower:
                setattr(parent, name, stand_in)
                return KeptAside(f"{_path(model, parent)}.{name}".lstrip("."), tower.requires_grad_(False))
    raise RlcapError(f"{type(model).__name__}: its image tower is not one of its modules")


def take_out(model: nn.Module, base: nn.Module, names: list[str]) -> KeptAside:
    """Remove ``base``'s children ``names`` (the vision tower, its projector or connector) from ``model``; frozen
    and kept aside together."""
    side = nn.ModuleDict({name: getattr(base, name) for name in names}).requires_grad_(False)
    prefix = _path(model, base)
    for name in names:
        setattr(base, name, None)
    return KeptAside(prefix, side)


def kept_in(model: nn.Module, base: nn.Module, names: list[str]) -> KeptAside:
    """``base``'s children ``names`` (the image side) left in ``model``, which trains them
    (``model.train_vision``: rlcap.models.hf.vision_training), under the same record as :func:`take_out`'s (for the
    digest and the export, which writes their weights as they are then)."""
    return KeptAside(_path(model, base), nn.ModuleDict({name: getattr(base, name) for name in names}))
