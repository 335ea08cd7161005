"""Image features for a batch: what the data layer hands to models, decoders and rewards."""

from __future__ import annotations

from typing import NamedTuple

import torch


class Feats(NamedTuple):
    """Image features for a batch.

    fc: (B, D) pooled vector; att: (B, N, D) grid or region vectors; att_mask: (B, N) bool,
    True where a region is real (region counts vary per image).
    """

    fc: torch.Tensor
    att: torch.Tensor
    att_mask: torch.Tensor

    def expand(self, n: int) -> "Feats":
        return Feats(*(t.repeat_interleave(n, dim=0) for t in self))

    def select(self, index: torch.Tensor) -> "Feats":
        """Rows ``index`` (K,) of every tensor: (B, ...) -> (K, ...)."""
        return Feats(*(t.index_select(0, index) for t in self))

    def to(self, device: torch.device | str) -> "Feats":
        return Feats(*(t.to(device) for t in self))
