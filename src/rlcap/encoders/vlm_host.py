"""The host part of a vision-language model's image side (rlcap.encoders.hf_vlm): the pictures through the model's
processor, each size's together, before the image side runs on the device. What the loader's read-ahead thread or
a worker process runs a batch ahead of the step (rlcap.encoders.online, rlcap.encoders.host_workers), and what
``rlcap features`` runs on its padded batches (:func:`on_host`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from rlcap.encoders.hf_processor import load_processor
from rlcap.encoders.host_workers import HostSide

AS_THEY_ARE = 1 << 16  # the encoder's image_size: larger than any picture, so the JPEG decoder never shrinks one


def image_inputs(processor: Any, images: Any) -> dict[str, torch.Tensor]:
    """What the processor gives the model for pictures (one, or a list of pictures of one size): its output for a
    text of one image token a picture and the pictures. The processor's own image settings apply (InternVL's asks
    its image processor to tile a picture, ``crop_to_patches``, which the image processor alone does not), so the
    pixels are the tiles whose tokens the processor counts in the prompt, in its order."""
    pictures = images if isinstance(images, (list, tuple)) else [images]
    token = processor.image_token  # (the placeholder's text is all it needs: not image_token's run of the processor)
    out = processor(text=[token] * len(pictures), images=[[picture] for picture in pictures], return_tensors="pt")
    return {key: value for key, value in out.items() if isinstance(value, torch.Tensor)}


class OnHost(NamedTuple):
    """A batch's pictures read for the processor: each picture's (height, width), and for each size its rows, its
    pictures and the processor's output for them together (:meth:`HFVLMEncoder.on_host`)."""

    sizes: list[tuple[int, int]]
    groups: list[tuple[list[int], list[Any], dict[str, torch.Tensor]]]


def padded_batch(images: Sequence[Any]) -> np.ndarray:
    """RGB PIL pictures -> (B, Hmax, Wmax, 4) uint8: each picture top left, alpha 255 on it, 0 around it."""
    arrays = [np.asarray(image.convert("RGB"), np.uint8) for image in images]
    out = np.zeros((len(arrays), max(a.shape[0] for a in arrays), max(a.shape[1] for a in arrays), 4), np.uint8)
    for row, a in zip(out, arrays):
        row[: a.shape[0], : a.shape[1], :3] = a
        row[: a.shape[0], : a.shape[1], 3] = 255
    return out


def on_host(processor: Any, prepared: torch.Tensor) -> OnHost:
    """The host's part of :meth:`HFVLMEncoder.features_with_counts`: the pictures out of their padded batch
    (:func:`padded_batch`'s), then :func:`on_pictures`."""
    from PIL import Image

    pictures = []
    for picture in prepared.cpu().numpy():  # cpu: the processor reads pictures on the host
        alpha = picture[..., 3] > 0
        height, width = int(alpha.any(1).sum()), int(alpha.any(0).sum())
        pictures.append(Image.fromarray(np.ascontiguousarray(picture[:height, :width, :3])))
    return on_pictures(processor, pictures)


def on_pictures(processor: Any, pictures: Sequence[Any]) -> OnHost:
    """RGB PIL pictures, each size's through ``processor`` together (what a loader's read-ahead thread or worker
    runs ahead of the step, rlcap.encoders.online: the pictures as decoded, not through a padded batch)."""
    pictures = list(pictures)
    sizes = [(picture.height, picture.width) for picture in pictures]
    groups = []
    for size in dict.fromkeys(sizes):  # the pictures of one size in one pass (:meth:`_tokens_of_one_size`)
        rows = [k for k, each in enumerate(sizes) if each == size]
        group = [pictures[k] for k in rows]
        groups.append((rows, group, image_inputs(processor, group)))
    return OnHost(sizes, groups)


def vlm_host_side(folder: str) -> HostSide:
    """:func:`on_pictures` with the processor of ``folder`` loaded as the encoder loads it."""
    return HostSide(functools.partial(on_pictures, load_processor(Path(folder))), AS_THEY_ARE)


