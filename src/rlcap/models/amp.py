"""Autocast in the hand-written backward passes (rlcap.models.linear, rlcap.models.attention).

A run enters autocast around its forward passes only (rlcap.devices.Precision), so the backward pass runs
outside it. Autograd's own backward of an autocast op computes in the dtypes its forward chose; a hand-written
``torch.autograd.Function`` must do so itself: its forward records the autocast state it ran under
(:func:`forward_state`) and its backward computes under the same (:func:`backward_context`), as
``torch.amp.custom_fwd``/``custom_bwd`` do for one device type fixed when the function is defined.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch


class AutocastState(NamedTuple):
    device_type: str
    enabled: bool
    dtype: torch.dtype


def forward_state(like: torch.Tensor) -> AutocastState:
    """The autocast state a Function's forward runs under, on ``like``'s kind of device."""
    kind = like.device.type
    return AutocastState(kind, torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))


def backward_context(state: AutocastState) -> contextlib.AbstractContextManager:
    """Autocast as the forward had it (nothing when it had none: an fp32 run computes as before)."""
    if not state.enabled:
        return contextlib.nullcontext()
    return torch.autocast(state.device_type, dtype=state.dtype)
