"""What of a vision-language model's image side trains (``model.train_vision``), read from the model, never from a
table of families.

* ``frozen``: nothing. The image side is taken out of the model and kept aside (:func:`rlcap.models.hf.image_side.
  take_out`); its tokens come from a store or are computed online under ``no_grad``.
* ``all``: every weight of the image side (the children of the module that holds the language model, other than
  it: Qwen2-VL's ``visual``, LLaVA's ``vision_tower`` and ``multi_modal_projector``, Idefics3's ``vision_model`` and
  ``connector``).
* ``projector``: the image-side weights that first run after the vision tower's last layer, found by running the
  image side once on a blank picture with hooks (:func:`projector_of`): Qwen2-VL's and Qwen2.5-VL's ``merger``,
  LLaVA's and PaliGemma's ``multi_modal_projector``, Idefics3's ``connector``, with the tower's final norm where it
  has one (SigLIP's ``post_layernorm``). The tower's last layer is the last block of its layer stack (the image
  side's list of modules holding the most weights). What runs between the tower's layers (Qwen3-VL's DeepStack
  mergers) stays frozen.
* ``lora``: LoRA adapters, through peft, on the linear maps of the tower's layer stack, beside those
  ``model.train=lora`` puts on the language model's (the policy's reference for the KL term is then still itself
  with every adapter off).

With anything but ``frozen`` the image side stays in the model, a part of the policy: its weights are in the
policy's state dict, so the checkpoint, the optimizer, the KL reference (a frozen copy of the starting policy) and
the export hold it as they hold the language model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from rlcap.errors import RlcapError
from rlcap.models.hf.parts import layer_stack


def projector_of(side: nn.Module, run: Callable[[], Any]) -> list[nn.Module]:
    """The modules of the image side ``side`` with weights of their own that first run after the last block of
    its layer stack, in the order they run, when ``run()`` runs it (a blank picture through the image side)."""
    last = layer_stack(side)[-1]
    owners = [m for m in side.modules() if next(m.parameters(recurse=False), None) is not None]
    order: list[nn.Module] = []
    ends: list[int] = []
    hooks = [m.register_forward_pre_hook(lambda module, args: order.append(module)) for m in owners]
    hooks.append(last.register_forward_hook(lambda module, args, out: ends.append(len(order))))
    try:
        with torch.no_grad():
            run()
    finally:
        for hook in hooks:
            hook.remove()
    if not ends:
        raise RlcapError(f"{type(side).__name__}: the image side's last layer did not run on a picture")
    before = {id(m) for m in order[: ends[-1]]}
    after = list({id(m): m for m in order[ends[-1]:] if id(m) not in before}.values())
    if not after:
        raise RlcapError("model.train_vision=projector: no weights of the image side run after its tower's last "
                         "layer: train it with model.train_vision=all")
    return after


def set_vision_training(side: nn.Module, mode: str, projector: list[nn.Module]) -> None:
    """Freeze the image side ``side`` but what ``mode`` names (module docstring); ``lora``'s adapters are made
    trainable where they are injected (:func:`rlcap.models.hf.weights.set_training`)."""
    if mode == "lora":
        for name, param in side.named_parameters():
            param.requires_grad_(".lora_" in name)
        return
    side.requires_grad_(mode == "all")
    for module in projector if mode == "projector" else ():
        module.requires_grad_(True)


class RunsImageSide:
    """The image side of ``model`` run by the policy on a batch's processor outputs (``Feats.pixels``, in rows of
    ``layout``: :mod:`rlcap.encoders.pixel_rows`), with autograd where it is on: once per picture, the pictures of
    one size in one pass (one a pass where that pass splits their tokens otherwise than the processor counts them,
    as :class:`rlcap.encoders.hf_vlm.HFVLMEncoder` does)."""

    def __init__(self, model: nn.Module, layout: Any, dtype: torch.dtype):
        self.model, self.layout, self.dtype = model, layout, dtype

    def tokens(self, pixels: torch.Tensor, sizes: list[tuple[int, int]],
               count: Callable[[tuple[int, int]], int]) -> list[torch.Tensor]:
        """Each picture's image tokens (N, parts * D) from ``pixels`` (B, L); ``sizes``: the pictures' (height,
        width); ``count(size)``: the tokens the processor puts in the prompt for a picture of that size."""
        from rlcap.encoders.hf_vlm import tokens_of_inputs
        from rlcap.encoders.pixel_rows import join

        pictures = [{k: v.to(self.dtype) if v.is_floating_point() else v for k, v in p.items()}
                    for p in self.layout.unpack(pixels)]
        out: dict[int, torch.Tensor] = {}
        for size in dict.fromkeys(sizes):
            rows = [k for k, each in enumerate(sizes) if each == size]
            tokens = tokens_of_inputs(self.model, join([pictures[k] for k in rows]), len(rows))
            if len(rows) > 1 and any(len(t) != count(size) for t in tokens):
                tokens = [tokens_of_inputs(self.model, pictures[k], 1)[0] for k in rows]
            out.update(zip(rows, tokens))
        return [out[k] for k in range(len(sizes))]
