"""Where each cell of a grid of region features lies: its box (``model.grid_boxes``).

An attention over regions (UpDown's additive attention, the transformer's cross-attention) sums the regions it
attends to and is blind to their order: over a CNN's grid it cannot tell the left cell from the right one, and a
captioner trained on it guesses "to the left of" against "to the right of". Detector features carry their boxes,
and self-critical.pytorch's ``use_box`` appends each region's box geometry (x1/W, y1/H, x2/W, y2/H, area/(W*H))
to its vector; a grid's cells have boxes too, known from their index (:func:`grid_boxes`). The captioners embed
them apart (a linear map to their width) and add them to each embedded cell, as geometry is added in transformer
captioners: appended to a cell's 1280 CNN features (norm about 27 on shapes), 5 coordinates below 1 barely moved
the embedding (an UpDown trained on shapes so left their weights near their initial values).

A grid store holds its g x g cells in row-major order (``rlcap.encoders.efficientnet``: ``flatten(2)`` of the
(C, g, g) map), so cell ``i`` is at row ``i // g`` and column ``i % g``.
"""

from __future__ import annotations

import math

import torch

from rlcap.errors import ConfigError

BOX_DIM = 5  # (x1, y1, x2, y2, area), each a fraction of the picture's side or area


def grid_side(n: int) -> int:
    """g of a g x g grid of ``n`` cells; a clear error where ``n`` is not a square (detector regions, frames)."""
    side = math.isqrt(n)
    if n < 1 or side * side != n:
        raise ConfigError(f"model.grid_boxes: {n} region vectors are not a square grid; it places the cells of a "
                          "CNN's grid (features of rlcap features), not detector regions or video frames")
    return side


def grid_boxes(n: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The boxes of a g x g grid's ``n`` cells in row-major order, (n, BOX_DIM): (x1, y1, x2, y2, area)."""
    side = grid_side(n)
    index = torch.arange(n, device=device)
    row, col = (index // side).to(dtype), (index % side).to(dtype)
    x1, y1 = col / side, row / side
    area = torch.full_like(x1, 1.0 / n)
    return torch.stack([x1, y1, x1 + 1.0 / side, y1 + 1.0 / side, area], dim=1)

