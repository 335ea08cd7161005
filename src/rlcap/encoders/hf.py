"""A transformers vision model from a local folder as a frozen image encoder (``rlcap features --encoder hf:DIR``).

The folder is what ``save_pretrained`` writes (``config.json``, the weights, ``preprocessor_config.json``),
loaded with ``local_files_only=True``: nothing is downloaded. Its images go through the folder's own image
processor (resize, crop, normalisation as the model was trained with). One code path serves every family;
what is read depends on what the loaded model declares and returns, never on its name:

* **the vision forward**: a vision model (its ``main_input_name`` is ``pixel_values`` and it generates no
  text: ViT, DINOv2, ConvNeXt, SigLIP's or CLIP's vision model, with or without projection) runs itself; a dual model that offers
  ``get_image_features`` (CLIP, SigLIP) runs that (the projected embedding and the vision tower's states in
  one pass); any other model runs its image tower: transformers' ``get_encoder(modality="image")`` (BLIP),
  an encoder-decoder's encoder when it reads pixels (VisionEncoderDecoder), else its outermost sub-model
  that reads pixels (GIT's image encoder).
* **att** (the regions): the last hidden state. A convolutional map (B, D, h, w) becomes its h*w grid
  cells. A token sequence (B, T, D) keeps its patch tokens, the last (H/p)(W/p) of them for the tower's
  ``patch_size`` p: the tokens before them (ViT's and CLIP's class token, DINOv2's class and register
  tokens) summarise the image rather than a place in it, and the pooled vector below carries the summary.
  A captioner's tower (the model writes text: VisionEncoderDecoder, BLIP, GIT) keeps every token, class
  token included: they are what its text decoder attends to, so its store holds exactly its decoder's input
  (what an rlcap policy built on that captioner reads, docs/MODELS.md).
* **fc** (the pooled vector): the model's image embedding when it returns one (``image_embeds``; CLIP's
  and SigLIP's projected embedding, the vector their retrieval scores), else its ``pooler_output``
  (ViT's tanh-pooled class token, DINOv2's normed class token, ConvNeXt's normed mean), else the mean of
  the patch tokens (a tower without a pooler: GIT's, a VisionEncoderDecoder's ViT built without one).

On CUDA the forward runs under fp16 autocast (the store records it); on the CPU in fp32.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcap.encoders.host_workers import HostSide
from rlcap.errors import RlcapError
from rlcap.transformers_io import import_transformers, load_weights_of, no_bars
HF_PREFIX = "hf:"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_NOT_SETTINGS = ("transformers_version", "_name_or_path", "architectures", "processor_class")


def local_folder(name: str | Path) -> Path:
    """The folder an ``hf:DIR`` name (or a plain path) names: ``--encoder hf:DIR`` and the retrieval reward's
    ``reward.paths.retrieval: hf:DIR`` name one local model the same way."""
    text = str(name)
    return Path(text[len(HF_PREFIX):] if text.startswith(HF_PREFIX) else text)


def _digest(*chunks: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def _settings_json(settings: dict[str, Any]) -> str:
    """A config's or processor's settings as canonical JSON (its paths and versions left out)."""
    return json.dumps({k: v for k, v in settings.items() if k not in _NOT_SETTINGS}, sort_keys=True, default=str)


def weights_digest(folder: Path) -> str:
    """BLAKE2b-128 of the folder's weight files, in name order: which weights, whatever the folder's path."""
    h = hashlib.blake2b(digest_size=16)
    files = sorted(p for p in folder.iterdir() if p.suffix in _WEIGHT_SUFFIXES and p.is_file())
    for path in files:
        h.update(path.name.encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def tower_digest(tower: torch.nn.Module) -> str:
    """BLAKE2b-128 of a captioner's image tower's weights (each one's name, shape and float32 values, in name
    order): what ``rlcap features`` records of a captioner (``tower_weights``) and what its policy computes from
    its own tower, whatever folder either loaded it from (a download, a checkpoint's hf/ export) and in whatever
    precision it was saved."""
    h = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(tower.state_dict().items()):
        h.update(f"{name}{tuple(tensor.shape)}".encode())
        h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def pixel_values(processor: Any, images: Sequence[Any]) -> np.ndarray:
    """RGB PIL images -> ``pixel_values`` (B, 3, H, W) float32, by ``processor`` (an image processor)."""
    return np.asarray(processor(images=list(images), return_tensors="np")["pixel_values"], np.float32)


def pixel_tensor(processor: Any, images: Sequence[Any]) -> torch.Tensor:
    """:func:`pixel_values` as a tensor: what :meth:`HFImageEncoder.features` reads."""
    return torch.from_numpy(pixel_values(processor, images))


def captioner_host_side(folder: str, draft_size: int | None) -> HostSide:
    """:meth:`HFImageEncoder.prepare` with the image processor of ``folder`` loaded as the encoder loads it."""
    processor = import_transformers().AutoImageProcessor.from_pretrained(folder, local_files_only=True)
    return HostSide(functools.partial(pixel_tensor, processor), draft_size)


def _reads_pixels(module: Any) -> bool:
    return getattr(module, "main_input_name", None) == "pixel_values"


def vision_forward(model: Any) -> tuple[Callable[..., Any], Any]:
    """The call that embeds ``pixel_values`` with ``model``, and the config of the tower it runs (its
    ``patch_size``); see the module docstring for the order in which they are looked for."""
    config = model.config
    if _reads_pixels(model) and not model.can_generate() and not hasattr(model, "get_image_features"):
        return model, config  # a vision model (a captioner reads pixels too, but writes text)
    vision_config = getattr(config, "vision_config", config)
    if hasattr(model, "get_image_features"):
        return model.get_image_features, vision_config
    tower = model.get_encoder(modality="image")
    if tower is model:
        encoder = model.get_encoder()
        tower = encoder if encoder is not model and _reads_pixels(encoder) else None
    if tower is None:
        towers = [(name.count("."), module) for name, module in model.named_modules()
                  if module is not model and _reads_pixels(module)]
        tower = min(towers, key=lambda t: t[0])[1] if towers else None
    if tower is None:
        raise RlcapError(f"{type(model).__name__} is a text-only model (it reads {model.main_input_name}), with no "
                         "image tower: give a vision model, or a captioner or dual model with an image tower")
    return tower, getattr(tower, "config", vision_config)


class HFImageEncoder:
    """A frozen transformers vision model read from ``folder`` (module docstring): ``prepare`` turns
    images into its input with the folder's image processor, ``features`` gives ``fc`` (B, Dfc) and ``att``
    (B, N, Datt), float32."""

    def __init__(self, folder: str | Path, device: torch.device | str = "cpu"):
        transformers = import_transformers("a transformers encoder")
        self.folder = Path(folder).expanduser().resolve()
        if not (self.folder / "config.json").is_file():
            raise RlcapError(f"{HF_PREFIX}{folder}: no config.json there; give a folder that save_pretrained "
                             "wrote (a model downloaded for transformers, or one you saved)")
        with no_bars(transformers):
            try:
                config = transformers.AutoConfig.from_pretrained(self.folder, local_files_only=True)
            except (OSError, ValueError, KeyError) as exc:
                raise RlcapError(f"cannot load a transformers model from {self.folder}: "
                                 f"{str(exc).splitlines()[0]}") from None
            architecture = (getattr(config, "architectures", None) or [None])[0]
            cls = getattr(transformers, architecture, None) if architecture else None
            model = load_weights_of(cls or transformers.AutoModel, self.folder)
            try:
                self.forward, self.tower_config = vision_forward(model)
            except RlcapError as exc:  # a text-only model: refused before its (missing) image processor
                raise RlcapError(f"{HF_PREFIX}{folder}: {exc}") from None
            try:
                self.processor = transformers.AutoImageProcessor.from_pretrained(self.folder, local_files_only=True)
            except (OSError, ValueError, KeyError) as exc:
                raise RlcapError(f"cannot load the image processor of {self.folder}: "
                                 f"{str(exc).splitlines()[0]}") from None
        self.device = torch.device(device)
        self.model = model.eval().requires_grad_(False).to(self.device)
        self.captioner = bool(self.model.can_generate())  # its decoder reads every token of its tower
        self.name = f"{HF_PREFIX}{type(model).__name__}"
        from PIL import Image

        probe = torch.from_numpy(self.prepare([Image.new("RGB", (64, 48))]))
        fc, att = self.features(probe)
        self.fc_dim, self.att_dim, self.regions = fc.shape[1], att.shape[2], att.shape[1]
        self.image_size = int(probe.shape[-2])  # the processor's output side (its crop, else its resize)

    @property
    def precision(self) -> str:
        return "fp16" if self.device.type == "cuda" else "fp32"

    def prepare(self, images: Sequence[Any]) -> np.ndarray:
        """RGB PIL images -> ``pixel_values`` (B, 3, H, W) float32, by the folder's own image processor."""
        return pixel_values(self.processor, images)

    def host(self, pictures: Sequence[Any]) -> torch.Tensor:
        """Decoded pictures -> what :meth:`features` reads (:meth:`prepare`'s pixels as a tensor)."""
        return pixel_tensor(self.processor, pictures)

    def worker_side(self) -> Callable[[], HostSide]:
        """What builds :meth:`host` in a worker process (rlcap.encoders.host_workers): the folder's image
        processor loaded there, never the model."""
        return functools.partial(captioner_host_side, str(self.folder), self.image_size)

    @torch.inference_mode()
    def features(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``pixel_values`` (B, 3, H, W) -> fc (B, Dfc), att (B, N, Datt), float32."""
        pixels = pixels.to(self.device)
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.device.type == "cuda"):
            out = self.forward(pixel_values=pixels)
        hidden = out.last_hidden_state
        if hidden.dim() == 4:  # a convolutional map (B, D, h, w): its cells, row by row
            att = hidden.flatten(2).transpose(1, 2)
        elif self.captioner:
            att = hidden  # every token: what the captioner's text decoder attends to
        else:
            patch = getattr(self.tower_config, "patch_size", None)
            cells = (pixels.shape[-2] // patch) * (pixels.shape[-1] // patch) if isinstance(patch, int) else 0
            if cells > hidden.shape[1]:
                raise RlcapError(f"{self.folder}: {hidden.shape[1]} tokens for {cells} patches of {patch} pixels")
            att = hidden[:, hidden.shape[1] - cells:] if cells else hidden  # the patch tokens (after CLS/registers)
        pooled = getattr(out, "image_embeds", None)
        if pooled is None:
            pooled = getattr(out, "pooler_output", None)
        if pooled is None or pooled.dim() != 2:
            pooled = att.mean(1)
        return pooled.float(), att.float()

    def records(self) -> dict[str, str | int]:
        """What a store records of this encoder, compared when rows are added: the model class, digests of
        its settings and of its weights, the image processor's settings, the input size and precision."""
        return {"encoder": self.name,
                "encoder_config": _digest(_settings_json(self.model.config.to_dict()).encode()),
                "encoder_weights": weights_digest(self.folder),
                # a captioner's tower alone: what its policy compares, from whatever folder it is loaded
                **({"tower_weights": tower_digest(self._tower())} if self.captioner else {}),
                "preprocessing": _settings_json(self.processor.to_dict()),
                "image_size": self.image_size, "precision": self.precision}

    def _tower(self) -> torch.nn.Module:
        """The module that computes what the store holds: the vision forward itself, or, for a model whose
        ``get_image_features`` runs it (Florence-2), its image tower (``get_encoder(modality="image")``)."""
        return self.forward if isinstance(self.forward, torch.nn.Module) else self.model.get_encoder(modality="image")

    def to(self, device: torch.device | str) -> "HFImageEncoder":
        self.device = torch.device(device)
        self.model.to(self.device)
        return self
