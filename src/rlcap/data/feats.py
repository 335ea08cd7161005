"""Image features for a batch: what the data layer hands to models, decoders and rewards."""

from __future__ import annotations

from typing import NamedTuple

import torch


class Feats(NamedTuple):
    """Image features for a batch.

    fc: (B, D) pooled vector; att: (B, N, D) grid or region vectors; att_mask: (B, N) bool,
    True where a region is real (region counts vary per image). pixels: (B, L) float32 or None, each picture's
    processor outputs packed in one row (:class:`rlcap.encoders.pixel_rows.PixelLayout`), for a policy that runs
    its image side itself because it trains it (``model.train_vision``); att then holds no tokens (N = 0).
    """

    fc: torch.Tensor
    att: torch.Tensor
    att_mask: torch.Tensor
    pixels: torch.Tensor | None = None

    def _each(self, change) -> "Feats":
        return Feats(*(None if t is None else change(t) for t in self))

    def expand(self, n: int) -> "Feats":
        return self._each(lambda t: t.repeat_interleave(n, dim=0))

    def select(self, index: torch.Tensor) -> "Feats":
        """Rows ``index`` (K,) of every tensor: (B, ...) -> (K, ...)."""
        return self._each(lambda t: t.index_select(0, index))

    def to(self, device: torch.device | str) -> "Feats":
        return self._each(lambda t: t.to(device))
