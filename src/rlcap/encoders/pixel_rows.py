"""A vision-language model's processor outputs for a batch's pictures as one float32 row a picture: what the data
loader hands a policy that runs its image side itself, because it trains it (``model.train_vision``), in
:class:`rlcap.data.feats.Feats`' ``pixels``.

A processor gives the pictures of one size together, in one of two forms a key: one entry a picture (Qwen2-VL's
``image_grid_thw`` (n, 3), Idefics3's ``pixel_values`` (n, tiles, C, H, W)) or every picture's pieces one after
the other (Qwen2-VL's ``pixel_values`` (n * patches, C * T * P * P), InternVL's tiles). Pictures of one size have
as many pieces each, so both split alike: each key's tensor reshaped (n, first / n, ...) and picture i takes entry
i (:func:`per_picture`); joining pictures again concatenates along the first dimension (:func:`join`), which gives
the processor's own tensors for pictures of one size.

A picture's row holds each key's shape, then its values, in the order of :class:`PixelLayout` (read from the
processor's output for a blank picture, so the loader and the policy, which hold the same processor, agree), and
zeros after it up to the batch's longest row. Pixels are float32 as the processor gives them, and the grids and
masks are integers below 2**24 or booleans: float32 holds all of them exactly. Being one tensor of B rows, the
batch's pictures go through everything a batch's features go through (a device, rows selected, the memory of
decoding expanded per sample and split in micro-batches) unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

from rlcap.errors import RlcapError


class PixelLayout(NamedTuple):
    """The keys of a processor's image outputs (sorted), each one's dtype and number of dimensions."""

    keys: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    ndims: tuple[int, ...]

    @classmethod
    def of(cls, inputs: Mapping[str, torch.Tensor]) -> "PixelLayout":
        keys = tuple(sorted(inputs))
        return cls(keys, tuple(inputs[k].dtype for k in keys), tuple(inputs[k].dim() for k in keys))

    def pack(self, pictures: Sequence[Mapping[str, torch.Tensor]]) -> torch.Tensor:
        """Each picture's inputs (:func:`per_picture`) -> (B, L) float32: shapes, then values, zeros after."""
        rows = []
        for picture in pictures:
            if tuple(sorted(picture)) != self.keys:
                raise RlcapError(f"the processor gave {sorted(picture)} for a picture, expected {list(self.keys)}")
            shapes = [float(d) for k in self.keys for d in picture[k].shape]
            values = [picture[k].reshape(-1).float().cpu() for k in self.keys]
            rows.append(torch.cat([torch.tensor(shapes), *values]))
        width = max(len(r) for r in rows)
        return torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows])

    def unpack(self, rows: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """(B, L) rows of :meth:`pack` -> each picture's inputs, on the rows' device."""
        head = sum(self.ndims)
        shapes = rows[:, :head].round().long().tolist()  # (a host read: the shapes place the values)
        out = []
        for row, dims in zip(rows, shapes):
            picture, at, start = {}, 0, head
            for key, dtype, ndim in zip(self.keys, self.dtypes, self.ndims):
                shape = dims[at: at + ndim]
                size = math.prod(shape)
                values = row[start: start + size]
                picture[key] = (values.round() if not dtype.is_floating_point else values).to(dtype).reshape(shape)
                at, start = at + ndim, start + size
            out.append(picture)
        return out


def per_picture(inputs: Mapping[str, torch.Tensor], pictures: int) -> list[dict[str, torch.Tensor]]:
    """The processor's outputs ``inputs`` for ``pictures`` pictures of one size -> each picture's (module
    docstring)."""
    split = {}
    for key, value in inputs.items():
        if value.shape[0] % pictures:
            raise RlcapError(f"the processor's {key} {tuple(value.shape)} does not split over {pictures} pictures")
        split[key] = value.reshape(pictures, value.shape[0] // pictures, *value.shape[1:])
    return [{key: value[i] for key, value in split.items()} for i in range(pictures)]


def join(pictures: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Pictures of one size -> the processor's outputs for them together (:func:`per_picture` undone)."""
    return {key: torch.cat([p[key] for p in pictures]) for key in pictures[0]}
