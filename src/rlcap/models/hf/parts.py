"""The parts of a transformers model an rlcap policy trains, found from what the model declares: its language
model is what its ``get_encoder()``, ``get_decoder()``, input and output embeddings hold, and its layer stacks the
lists of blocks in them; everything else (the vision tower, the projector) is the picture's side, frozen, its
output read from a feature store (what trains of them: :mod:`rlcap.models.hf.weights`). And a model's weights each
once (tied weights under their first name), as a safetensors checkpoint holds them."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rlcap.errors import RlcapError


def language_modules(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model``'s language model: its encoder (an encoder-decoder's), decoder and embeddings."""
    parts = [model.get_decoder(), model.get_input_embeddings(), model.get_output_embeddings()]
    if model.config.is_encoder_decoder:
        parts.append(model.get_encoder())
    return [part for part in parts if part is not None]


def language_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters of ``model``'s language model, each once."""
    seen: dict[int, nn.Parameter] = {}
    for part in language_modules(model):
        for param in part.parameters():
            seen.setdefault(id(param), param)
    return list(seen.values())


def layer_stacks(model: nn.Module) -> list[nn.Module]:
    """The language model's stacks of blocks: its decoder's, and its encoder's for an encoder-decoder."""
    parts = [model.get_encoder()] if model.config.is_encoder_decoder else []
    return [layer_stack(part) for part in [*parts, model.get_decoder()]]


def merged_lora_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model``'s weights with each LoRA adapter added into the weight it adapts, under transformers' names."""
    from peft.tuners.lora import LoraLayer

    state = dict(model.state_dict())
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            key = f"{name}.base_layer.weight"
            state[key] = state[key] + module.get_delta_weight("default").to(state[key].dtype)
    return {k.replace(".base_layer.", "."): v for k, v in state.items() if ".lora_" not in k}


def unique_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with each tensor once: a tied weight (an output layer that is the input embedding) under its
    first name."""
    from torch.distributed.tensor import DTensor

    seen: set[tuple[int, int]] = set()
    out = {}
    for key, tensor in state.items():
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor  # (FSDP2's shard: its own storage)
        where = (local.untyped_storage().data_ptr(), local.storage_offset())
        if where not in seen or not tensor.numel():
            out[key] = tensor
        seen.add(where)
    return out


def with_twins(own: dict[str, torch.Tensor], state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (saved by :func:`unique_state`) with a tied weight's other names taking the saved one's value."""
    full = dict(state)
    for key, tensor in own.items():
        if key not in full:
            twin = next((k for k, t in own.items() if k in state and t.data_ptr() == tensor.data_ptr()), None)
            if twin is not None:
                full[key] = state[twin]
    return full


def layer_stack(decoder: nn.Module) -> nn.Module:
    """The text decoder's stack of blocks: its list of modules that holds the most weights."""
    stacks = [m for m in decoder.modules() if isinstance(m, nn.ModuleList)]
    if not stacks:
        raise RlcapError(f"{type(decoder).__name__}: no stack of layers found to train (model.train=decoder or lora)")
    return max(stacks, key=lambda m: sum(p.numel() for p in m.parameters()))


def import_peft() -> Any:
    try:
        import peft
    except ImportError:
        raise RlcapError("model.train=lora needs peft: pip install 'rlcap[lora]' (peft installs beside torch 2.13 "
                         "without another torch)") from None
    return peft
