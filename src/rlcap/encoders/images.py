"""Reading images from disk and turning them into the encoder's input tensor.

Loading (:func:`load_image`) always returns an 8-bit RGB image:

* EXIF orientation is applied first (phone photos are stored sideways with a rotate tag).
* Greyscale and palette modes (``1``, ``L``, ``P``) and ``CMYK``/``YCbCr`` go through Pillow's
  ``convert("RGB")``.
* High bit-depth greyscale (``I;16*``, ``I``, ``F``) is rescaled to 0..255 first, because
  Pillow's own conversion clips every value above 255 to white: 16-bit modes are divided by 257;
  ``I`` is treated as 16-bit when any value exceeds 255; ``F`` is taken as 0..1 when its maximum
  is at most 1, otherwise as 0..255 (clipped).
* Anything with transparency (``RGBA``, ``LA``, ``PA``, ``P`` with a transparent colour) is
  composited on white: a transparent pixel carries no colour, and white is what a viewer shows.

Preprocessing (:func:`preprocess`) resizes the whole image to ``size x size`` (bicubic,
antialiased) without cropping. A caption describes the whole picture, and a centre crop of a
16:9 photo throws away 44% of its width, often the object a caption names; the mild aspect
distortion costs less. Pixels are then scaled as ``(x - 127) / 128`` (about [-1, 1]), the input
scaling EfficientNet-Lite was trained with in TensorFlow (``MEAN_RGB = 127``,
``STDDEV_RGB = 128`` in ``efficientnet/lite/efficientnet_lite_builder.py``); the PyTorch port's
weights are a direct conversion of those checkpoints.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from rlcap.data.embedded import EmbeddedImage
from rlcap.errors import DataError

PIXEL_MEAN = 127.0
PIXEL_STD = 128.0

_HIGH_DEPTH_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")
# Pillow plugins report broken files with any of these; nothing else is caught.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)


def load_image(path: str | Path | EmbeddedImage, draft_size: int | None = None) -> Image.Image:
    """Read ``path`` as an 8-bit RGB image (see the module docstring for the conversions): a file, or a picture
    stored in a dataset file (:class:`rlcap.data.embedded.EmbeddedImage`, read where it lies).

    ``draft_size``: let the JPEG decoder shrink by a power of two while keeping both sides at
    least this many pixels (much faster for large photos; no effect on other formats).
    Raises :class:`DataError` naming the file when it is missing or cannot be decoded.
    """
    if isinstance(path, EmbeddedImage):
        source: Path | io.BytesIO = io.BytesIO(path.read())
    else:
        source = path = Path(path)
        if path.is_dir():
            raise DataError(f"{path} is a folder, not an image file")
        if not path.is_file():
            raise DataError(f"image not found: {path}")
    try:
        with Image.open(source) as img:
            if draft_size is not None:
                img.draft(None, (draft_size, draft_size))
            img.load()
            img = ImageOps.exif_transpose(img)
            return to_rgb(img)
    except _DECODE_ERRORS as exc:
        raise DataError(f"cannot read image {path}: {exc}") from exc


def to_rgb(img: Image.Image) -> Image.Image:
    """Convert any Pillow mode to 8-bit RGB: high bit depths rescaled, transparency on white."""
    if img.mode in _HIGH_DEPTH_MODES:
        img = Image.fromarray(_high_depth_to_uint8(np.asarray(img), img.mode), mode="L")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in _ALPHA_MODES:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba)
    return img.convert("RGB")


def _high_depth_to_uint8(pixels: np.ndarray, mode: str) -> np.ndarray:
    values = pixels.astype(np.float64)
    if mode == "F":
        scale = 255.0 if values.size and values.max() <= 1.0 else 1.0
    elif mode.startswith("I;16") or (values.size and values.max() > 255):
        scale = 1.0 / 257.0  # 65535 -> 255
    else:
        scale = 1.0
    return np.clip(np.rint(values * scale), 0, 255).astype(np.uint8)


def resize(img: Image.Image, size: int) -> np.ndarray:
    """Whole image to ``size x size`` RGB pixels, bicubic: uint8 array (size, size, 3)."""
    if img.size != (size, size):
        img = img.resize((size, size), Image.Resampling.BICUBIC)
    return np.asarray(img, dtype=np.uint8)


def normalize(pixels: torch.Tensor) -> torch.Tensor:
    """uint8 pixels (B, H, W, 3) -> float input (B, 3, H, W) scaled as ``(x - 127) / 128``."""
    x = pixels.permute(0, 3, 1, 2).float()  # (B, 3, H, W)
    return (x - PIXEL_MEAN) / PIXEL_STD


def preprocess(images: Sequence[Image.Image], size: int) -> torch.Tensor:
    """RGB images -> the encoder's input batch (B, 3, size, size), float32."""
    if not images:
        raise ValueError("preprocess needs at least one image")
    pixels = np.stack([resize(img, size) for img in images])  # (B, size, size, 3)
    return normalize(torch.from_numpy(pixels))
