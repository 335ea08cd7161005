"""LoRA adapters in saved weights, as peft names them, merged into the weights they adapt.

A policy trained with ``model.train=lora`` saves each adapted linear map as its frozen weight
(``X.base_layer.weight``) and its adapter (``X.lora_A.default.weight``, r x in; ``X.lora_B.default.weight``,
out x r), the map computing ``W x + (alpha / r) B A x``. A run that starts from such a checkpoint and trains
otherwise (``model.train=all`` or ``decoder``, or LoRA of another rank or alpha) starts from that function:
the adapters merged, ``W + (alpha / r) B A``, under the plain names (``X.weight``). GPT-2's Conv1D maps hold
their weight transposed (in x out), and take the merged term transposed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from rlcap.errors import RlcapError

BASE = ".base_layer."
LORA_A = ".lora_A.default.weight"
LORA_B = ".lora_B.default.weight"


@contextmanager
def adapters_off(model: nn.Module) -> Iterator[None]:
    """``model`` without its LoRA adapters: each adapted layer switched off as peft's disable-adapter context
    switches a PeftModel's (``BaseTunerLayer.enable_adapters(False)``), and on again on leaving, so that the model
    computes with the weights under the adapters. The adapters' values are left as they are."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def holds_adapters(state: dict[str, torch.Tensor]) -> bool:
    """Whether saved weights hold LoRA adapters."""
    return any(".lora_" in key for key in state)


def adapter_rank(state: dict[str, torch.Tensor]) -> int:
    """The rank r of the adapters in ``state`` (each A is r x in)."""
    return next(int(tensor.shape[0]) for key, tensor in state.items() if key.endswith(LORA_A))


def adapted_maps(state: dict[str, torch.Tensor]) -> list[str]:
    """The names of the linear maps ``state`` holds adapters for (``X`` of ``X.lora_A.default.weight``)."""
    return [key[: -len(LORA_A)] for key in state if key.endswith(LORA_A)]


def saved_scale(state: dict[str, torch.Tensor], saved: dict[str, Any] | None) -> float:
    """alpha / r of the adapters in ``state``, from ``saved``, the model section of the checkpoint they come from;
    one line when there is none, or when its rank is not theirs."""
    rank = adapter_rank(state)
    if saved is None or saved.get("train") != "lora":
        raise RlcapError(f"these weights hold LoRA adapters of rank {rank}, but not the model section of the "
                         "model.train=lora run that saved them (its lora_alpha scales them): load them through "
                         "their checkpoint (init_from=CHECKPOINT)")
    if int(saved["lora_rank"]) != rank:
        raise RlcapError(f"these weights hold LoRA adapters of rank {rank}, but their config says model.lora_rank="
                         f"{saved['lora_rank']} (an edited config.json?)")
    return float(saved["lora_alpha"]) / rank


def same_adapters(state: dict[str, torch.Tensor], own: dict[str, torch.Tensor], scale: float | None,
                  saved: dict[str, Any] | None) -> bool:
    """Whether the adapters in ``state`` load as they are into a policy whose weights are ``own`` and whose
    adapters' scale is ``scale`` (None: it has none): the same names, shapes and scale (taken as the same when
    ``saved``, the checkpoint's model section, is not given)."""
    if scale is None or state.keys() != own.keys():
        return False
    if any(tuple(state[k].shape) != tuple(own[k].shape) for k in own):
        return False
    return saved is None or saved_scale(state, saved) == scale


def module_scale(model: nn.Module) -> float | None:
    """The scale (alpha / r) of ``model``'s LoRA adapters, or None when it has none."""
    if not any(".lora_" in name for name, _ in model.named_parameters()):
        return None
    from peft.tuners.lora import LoraLayer

    return next(float(m.scaling["default"]) for m in model.modules() if isinstance(m, LoraLayer))


def merged(state: dict[str, torch.Tensor], scale: float,
           transposed: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """``state`` with each adapter merged into the weight it adapts, ``W + scale * B A`` (scale: alpha / r),
    under the plain names and without the adapters. ``transposed(X)``: whether map ``X`` holds its weight
    in x out (a Conv1D). Computed in float32, stored in the weight's dtype."""
    plain = {key.replace(BASE, "."): tensor for key, tensor in state.items() if ".lora_" not in key}
    for name in adapted_maps(state):
        a, b = state[name + LORA_A].float(), state[name + LORA_B].float()  # (r, in), (out, r)
        delta = scale * (b @ a)  # (out, in)
        weight = plain[f"{name}.weight"]
        plain[f"{name}.weight"] = (weight.float() + (delta.T if transposed(name) else delta)).to(weight.dtype)
    return plain


def under_adapters(state: dict[str, torch.Tensor], own: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Plain weights ``state`` in the names of a LoRA policy whose own weights are ``own``: each adapted map's
    weight under ``X.base_layer.``, the adapters ``own``'s (new ones: B = 0, the same function)."""
    full = dict(state)
    for key in own:
        plain = key.replace(BASE, ".")
        if plain != key and plain in full:
            full[key] = full.pop(plain)
        elif ".lora_" in key:
            full[key] = own[key]
    return full
