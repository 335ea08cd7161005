"""A transformers model's key/value cache as rlcap's decoding state (tensors, batch first) and back, and the
outputs' parts :class:`rlcap.models.hf.captioner.HFCaptioner` reads."""

from __future__ import annotations

from typing import Any

import torch

from rlcap.errors import RlcapError
from rlcap.models.base import Tensors


def output_cache(out: Any) -> Any:
    """The key/value cache an output returns (``cache``, or ``past_key_values`` before transformers renamed it)."""
    for name in ("cache", "past_key_values"):
        try:
            value = getattr(out, name)
        except AttributeError:
            continue
        if value is not None:
            return value
    return None


def flatten_cache(cache: Any) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """A transformers cache as tensors: self-attention keys and values per layer, and cross-attention ones."""
    from transformers.cache_utils import EncoderDecoderCache

    def tensors(c: Any) -> list[torch.Tensor]:
        return [t for layer in c.layers for t in (layer.keys, layer.values)]

    if isinstance(cache, EncoderDecoderCache):
        return tensors(cache.self_attention_cache), tensors(cache.cross_attention_cache)
    return tensors(cache), None


def rebuild_cache(self_kv: Tensors, cross_kv: Tensors | None) -> Any:
    """The model's cache holding these tensors as they are (no copy: its constructor's own update would concatenate
    each onto an empty tensor, and autograd would keep both)."""
    from transformers.cache_utils import EncoderDecoderCache

    own = _holding(self_kv)
    return own if cross_kv is None else EncoderDecoderCache(own, _holding(cross_kv))  # (cross-attention: computed)


def whole_cache() -> Any:
    """An empty cache whose layers keep every key and value, for a prefill whose cache becomes rlcap's state: the
    cache a model makes itself from its config may hold sliding-window layers (Gemma 3's ``layer_types``) that keep
    only the last ``sliding_window - 1`` tokens and count the ones dropped, which the tensors of the state cannot
    carry; :func:`rebuild_cache` rebuilds whole layers, and the model's mask applies the window by position."""
    return _holding([])


def _holding(kv: Tensors) -> Any:
    """A DynamicCache whose layers hold the keys and values ``kv`` (k0, v0, k1, v1, ...)."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(ddp_cache_data=[(None, None)] * (len(kv) // 2))  # empty layers
    for layer, keys, values in zip(cache.layers, kv[0::2], kv[1::2]):
        layer.keys, layer.values, layer.device, layer.is_initialized = keys, values, keys.device, True
    return cache


def last_hidden(out: Any) -> torch.Tensor:
    """The decoder's last layer's states (B, T, H), as the output names them."""
    states = getattr(out, "decoder_hidden_states", None) or getattr(out, "hidden_states", None)
    if not states:
        raise RlcapError("the captioner returned no hidden states (output_hidden_states)")
    return states[-1]
