"""The weights of a transformers model that an rlcap policy holds, one object for every hf policy (captioners,
decoder-only vision-language models, Florence-2): what trains (``model.train``), LoRA's merged state, the store
check against the image side kept aside, and the dtype the export declares. Each policy class holds a
:class:`HFWeights` and delegates to it; :class:`HoldsHFWeights` is what they share of ``nn.Module``'s weight calls
(each weight once in a state dict, saved weights read through :meth:`HFWeights.adapt`).

``model.train``:

* ``all``: every weight still in the model (the image side is out of it: kept aside), or only ``language``'s where
  a part of the image side stays in place (Florence-2's projector, which reads the stored map);
* ``decoder``: the language model's layer stacks only (``stacks``: its decoder's, and its encoder's for an
  encoder-decoder language model); embeddings, output layer and any image projection as loaded;
* ``lora``: LoRA adapters of rank ``rank`` (scale ``alpha / rank``, no dropout) on every linear map of those stacks
  (``nn.Linear``, and GPT-2's ``Conv1D``, whose weight is in x out), through peft, and nothing else; the adapters
  (and so their optimizer state) in fp32 over weights of any dtype: peft casts a layer's input to the adapters'
  dtype and the sum back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlcap.encoders.hf import HF_PREFIX, tower_digest
from rlcap.errors import ConfigError, DataError
from rlcap.models.hf.image_side import KeptAside
from rlcap.models.hf.lora import (adapters_off, holds_adapters, merged, module_scale, same_adapters, saved_scale,
                                  under_adapters)
from rlcap.models.hf.parts import import_peft, layer_stacks, merged_lora_state, unique_state, with_twins
from rlcap.models.hf.vision_training import set_vision_training

log = logging.getLogger(__name__)

TRAIN_MODES = ("all", "decoder", "lora")


def set_training(model: nn.Module, train: str, rank: int, alpha: float, stacks: Sequence[nn.Module],
                 language: Sequence[nn.Parameter] | None = None) -> None:
    """Freeze all of ``model`` but what ``train`` names (module docstring)."""
    if train not in TRAIN_MODES:
        raise ConfigError(f"model.train: {train!r} is not one of {', '.join(TRAIN_MODES)}")
    model.requires_grad_(train == "all" and language is None)
    if train == "all":
        for param in language or ():
            param.requires_grad_(True)
        return
    if train == "decoder":
        for stack in stacks:
            stack.requires_grad_(True)
        return
    peft = import_peft()
    from transformers.pytorch_utils import Conv1D

    names = {id(m): n for n, m in model.named_modules()}
    maps = [m for stack in stacks for m in stack.modules() if isinstance(m, (nn.Linear, Conv1D))]
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=[names[id(m)] for m in maps],
                             fan_in_fan_out=any(isinstance(m, Conv1D) for m in maps))  # (GPT-2's are Conv1D)
    peft.inject_adapter_in_model(config, model)
    for name, param in model.named_parameters():
        param.requires_grad_(".lora_" in name)
        if ".lora_" in name:
            param.data = param.data.float()


class HFWeights:
    """The weights of ``model`` (read from ``folder``) as a policy holds them (module docstring); ``side``: its
    image side, kept aside."""

    def __init__(self, model: nn.Module, folder: Path, side: KeptAside, train: str = "all", rank: int = 8,
                 alpha: float = 16.0, stacks: Sequence[nn.Module] = (), language: Sequence[nn.Parameter] | None = None,
                 export_dtype: torch.dtype = torch.float32, vision: str = "frozen",
                 projector: Sequence[nn.Module] = ()):
        self.model, self.folder, self.side = model, folder, side
        self.train_mode = train
        self.vision = vision  # model.train_vision (rlcap.models.hf.vision_training): "lora" adapts ``stacks``' too
        self.export_dtype = export_dtype  # what the export declares (rlcap.models.hf.vlm.declare_dtype)
        self._digest: str | None = None  # the image side's (computed when a store is checked or at the export)
        self.whole: dict[str, torch.Tensor] | None = None  # FSDP2: the gathered weights an export reads (consolidated)
        set_training(model, train, rank, alpha, stacks, language)
        if vision in ("all", "projector"):
            set_vision_training(side.modules, vision, list(projector))

    @property
    def trains_adapters(self) -> bool:
        return self.train_mode == "lora"

    def adapters_off(self) -> AbstractContextManager[None]:
        """The model without its LoRA adapters (:func:`~rlcap.models.hf.lora.adapters_off`), on the same module."""
        return adapters_off(self.model)

    @property
    def digest(self) -> str:
        """The image side's digest (:func:`rlcap.encoders.hf.tower_digest`), computed once (at every call where
        the image side trains)."""
        if self._digest is None or self.vision != "frozen":
            self._digest = tower_digest(self.side.modules)
        return self._digest

    def adopt_side(self, side: nn.Module) -> bool:
        """Keep ``side`` aside instead of this policy's own image side when it holds the same weights (names, shapes,
        dtypes and values; on any device: the export writes from the CPU), the own copy then freed
        (:class:`~rlcap.models.base.AdoptsImageSide`). Not when the image side trains (it is in the model)."""
        if self.vision != "frozen":
            return False
        own, other = self.side.modules.state_dict(), side.state_dict()
        if own.keys() != other.keys() or any(
                own[k].shape != other[k].shape or own[k].dtype != other[k].dtype or
                not torch.equal(own[k], other[k].to(own[k].device)) for k in own):
            return False
        self.side = KeptAside(self.side.prefix, side.requires_grad_(False))
        return True

    @property
    def encoder_name(self) -> str:
        return f"{HF_PREFIX}{type(self.model).__name__}"

    def merged_state(self) -> dict[str, torch.Tensor]:
        """The model's weights (LoRA adapters added into the weights they adapt, under transformers' names: the
        layers themselves left as they are, so that training goes on with the same numbers)."""
        if self.whole is not None:  # (a sharded model: its weights gathered, rlcap.train.optimizer)
            return merged(self.whole, module_scale(self.model), self.transposed) if self.trains_adapters else self.whole
        return merged_lora_state(self.model) if self.trains_adapters else dict(self.model.state_dict())

    @staticmethod
    def transposed(name: str) -> bool:
        return False  # (set by the policy: whether a map holds its weight in x out, GPT-2's Conv1D)

    def check_store(self, records: Mapping[str, Any], store: str, reads: str,
                    also: Mapping[str, Any] | None = None, unrecorded_passes: bool = False) -> None:
        """Refuse, in one line naming what to run, features that are not this model's image side's
        (:class:`~rlcap.models.base.ReadsOwnTower`): the store's ``encoder`` must be this model's class, its
        ``tower_weights`` this image side's digest and each record of ``also`` (the fc layout) what it says.
        ``reads``: what the policy reads of it, in words; ``unrecorded_passes``: a store that records no weights
        of this class (written before rlcap recorded them) passes with a warning."""
        encoder, weights = records.get("encoder"), records.get("tower_weights")
        if unrecorded_passes and (encoder is None or (encoder == self.encoder_name and weights is None)):
            log.warning("%s records no encoder weights (written before rlcap recorded them): it is taken as the "
                        "tokens of %s's own tower, which cannot be checked", store, self.folder)
            return
        if encoder != self.encoder_name or weights != self.digest or \
                any(records.get(key) != value for key, value in (also or {}).items()):
            dtype = str(self.side.dtype()).removeprefix("torch.")
            raise DataError(f"{store} holds features of {encoder} (image side {weights or 'not recorded'}), but "
                            f"model.path={self.folder} reads {reads}, {self.encoder_name}'s own (image side "
                            f"{self.digest}, its {dtype} weights as the folder holds them): extract them with "
                            f"`rlcap features --encoder hf:{self.folder}`")

    def adapt(self, state: dict[str, torch.Tensor], own: dict[str, torch.Tensor],
              saved: dict[str, Any] | None, transposed: Any) -> dict[str, torch.Tensor]:
        """Saved weights in the policy's own names (``own``: its state dict; rlcap.models.hf.lora). A LoRA
        checkpoint's go as they are into LoRA adapters of the same rank and scale; else their adapters are merged
        first (``W + (alpha / r) B A``: the function the checkpoint computes, ``saved`` its model section, which
        gives alpha and r; ``transposed(name)``: whether the map holds its weight in x out). Plain weights go
        under the layers a LoRA policy adapts, its adapters new (B = 0: the same function)."""
        state = self._with_own_side(state, own)
        if holds_adapters(state):
            if same_adapters(state, own, module_scale(self.model), saved):
                return state
            state = merged(state, saved_scale(state, saved), transposed)
        return under_adapters(state, own) if holds_adapters(own) else state

    def _with_own_side(self, state: dict[str, torch.Tensor], own: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Saved weights with the image side as this policy holds it: a policy that trains its image side
        (``model.train_vision``) started from a checkpoint whose policy did not keeps its own (read from the
        checkpoint's hf/, its ``model.path``); one that does not leaves a saved image side out (its own, taken
        out of the model, is the same folder's). Names are the policy's: its model's under one attribute."""
        side = set(self.side.state())

        def of_side(key: str) -> bool:
            return key.partition(".")[2] in side

        if self.vision == "frozen":
            return {k: v for k, v in state.items() if k in own or not of_side(k)}
        if any(of_side(k) for k in state):
            return state
        return {**state, **{k: v for k, v in own.items() if of_side(k)}}


class HoldsHFWeights(nn.Module):
    """What every hf policy shares of ``nn.Module``'s weight calls, over its :class:`HFWeights` (``self.weights``):
    each weight once in a state dict (safetensors holds no twins: a tied output layer under the embedding's name),
    saved weights read through :meth:`HFWeights.adapt`, LoRA's protocol (:class:`~rlcap.models.base.TrainsAdapters`)."""

    weights: HFWeights

    @property
    def trains_adapters(self) -> bool:
        return self.weights.trains_adapters

    @property
    def train_mode(self) -> str:
        return self.weights.train_mode

    def adapters_off(self) -> AbstractContextManager[None]:
        return self.weights.adapters_off()

    def frozen_aside(self) -> list[nn.Module]:
        """The image side kept aside, frozen (:class:`~rlcap.models.base.KeepsFrozenAside`); nothing for a policy
        that trains it (``model.train_vision``: it is in the model, and a copy keeps its starting weights)."""
        return [self.weights.side.modules] if self.weights.vision == "frozen" else []

    def adopt_image_side(self, side: nn.Module) -> bool:
        """:meth:`HFWeights.adopt_side` (:class:`~rlcap.models.base.AdoptsImageSide`)."""
        return self.weights.adopt_side(side)

    def shard_units(self) -> tuple[nn.Module, list[nn.Module]]:
        """The transformers model (every pass goes through its forward) and its layers, one FSDP2 unit each
        (:class:`~rlcap.models.base.Shardable`)."""
        return self.weights.model, [layer for stack in layer_stacks(self.weights.model) for layer in stack]

    @contextmanager
    def consolidated(self, state: dict[str, torch.Tensor]) -> Iterator[None]:
        """The export reads ``state``, this policy's whole weights in its own names (gathered from FSDP2's shards),
        instead of its sharded model's."""
        prefix = next(name for name, module in self.named_modules() if module is self.weights.model) + "."
        self.weights.whole = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        self.weights.transposed = self._holds_transposed  # type: ignore[method-assign]
        try:
            yield
        finally:
            self.weights.whole = None

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        return unique_state(super().state_dict(*args, **kwargs))

    def adapt_weights(self, state: dict[str, torch.Tensor],
                      saved: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
        """:meth:`HFWeights.adapt` in this policy's names (:class:`rlcap.train.checkpoint.AdaptsWeights`)."""
        return self.weights.adapt(state, self.state_dict(), saved, self._holds_transposed)

    def _holds_transposed(self, name: str) -> bool:
        """Whether the linear map ``name`` (as :meth:`state_dict` names it) holds its weight in x out (GPT-2's
        Conv1D)."""
        from transformers.pytorch_utils import Conv1D

        modules = dict(self.named_modules())
        return isinstance(modules.get(f"{name}.base_layer", modules.get(name)), Conv1D)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Weights saved by :meth:`state_dict` (or plain ones, :meth:`adapt_weights`): a tied weight's other names
        take the one it was saved under. (``state_dict`` by name: torch.distributed.checkpoint passes it so.)"""
        full = with_twins(super().state_dict(), self.adapt_weights(dict(state_dict)))
        return super().load_state_dict(full, strict=strict, assign=assign)
