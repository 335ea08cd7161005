"""An instruction vision-language model's image side as a frozen encoder: ``rlcap features --encoder hf:DIR`` on the
folder of a decoder-only image-text-to-text model (the families of docs/MODELS.md's family table).

Such a model is recognised by what it declares, not by its name: its forward takes the image features precomputed
(``mm_encoder_outputs``) in place of pixels, and it is not an encoder-decoder (:func:`reads_image_tokens`). Its
store holds what its language model reads at the image's place, so that an rlcap policy built on it
(:mod:`rlcap.models.hf.vlm`) never runs the vision side again:

* **att**: the image tokens after the model's own projector, pixel shuffle or merger, as ``get_image_features``
  returns them (its ``pooler_output``: a tensor per image, or one batch tensor), every tile's tokens of one image in
  order; a variable number per image where the model has dynamic resolution (Qwen2-VL) or tiles (Idefics3), so
  ``att_count`` says how many. The pixels are the processor's own for the picture (:func:`image_inputs`: InternVL's
  tiles, LLaVA-OneVision's AnyRes tiles and ``image_sizes``), so the tokens are those the processor counts; where
  ``get_image_features`` also returns ``deepstack_features`` (Qwen3-VL's DeepStack: the merged tokens of some
  intermediate vision layers, which its language model adds to the hidden states of its first layers at the image's
  place), each token's row is its ``pooler_output`` then each of those layers' token, concatenated along the width
  (``parts`` x the language model's width: :func:`image_parts`), and the store's ``fc_layout`` says so
  (:func:`store_layout`);
* **fc**: their mean, then the picture's height and width as its processor received them, each written as two
  numbers (``high * 1024 + low``, both exact in float16): what places the tokens again. The processor, given a blank
  picture of that size, expands the prompt's image placeholder as it did for the picture (Qwen2-VL's grid, Idefics3's
  rows and columns of tiles) and the model computes its positions from that (:data:`SIZE_PARTS`).

Pictures are read at their own size (no JPEG draft), as ``generate()`` is given them; those of one size in one pass
of the image side, each getting its tokens alone to 1e-5 (tests/encoders/test_hf_vlm_batched.py).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rlcap.data.feats import Feats
from rlcap.encoders.hf_processor import load_processor
from rlcap.encoders.host_workers import HostSide
from rlcap.encoders.pixel_rows import PixelLayout, per_picture
from rlcap.encoders.vlm_host import (AS_THEY_ARE, OnHost, image_inputs, on_host, on_pictures, padded_batch,
                                     vlm_host_side)
from rlcap.errors import RlcapError

SIZE_BASE = 1024  # a side is written as (side // SIZE_BASE, side % SIZE_BASE): both exact in float16
SIZE_PARTS = 4  # fc's last entries: height high, height low, width high, width low
FC_LAYOUT = "mean image token, then height and width as high*1024+low"  # what a store records of its fc
DEEPSTACK = "deepstack_features"  # an image features output's field of further token layers (transformers' Qwen3-VL)


def store_layout(parts: int, width: int) -> str:
    """What a store records as its ``fc_layout``: :data:`FC_LAYOUT`, and where each image token is several
    ``width``-wide parts (:func:`image_parts`), that att's rows are them side by side."""
    if parts == 1:
        return FC_LAYOUT
    return f"{FC_LAYOUT}; att rows: pooler_output then {parts - 1} {DEEPSTACK}, {width} wide each"
# the pictures whose token counts bound a store's width: large ones of the aspect ratios a processor tiles by (a grid
# of a x b tiles, a, b <= 4, and long strips: InternVL's 12 tiles come at 1:12, 1:3 and 3:4) and the long ones that a
# dynamic resolution bounds (Qwen2-VL's)
PROBED_SIZES = tuple(sorted({(4096 * a // max(a, b), 4096 * b // max(a, b)) for a, b in
                             [(a, b) for a in range(1, 5) for b in range(1, 5)] + [(1, k) for k in (6, 8, 12, 16)]
                             + [(k, 1) for k in (6, 8, 12, 16)]}))


def settings_json(settings: dict[str, Any]) -> str:
    """A processor's settings as a store records them (:func:`rlcap.encoders.hf._settings_json`)."""
    from rlcap.encoders.hf import _settings_json

    return _settings_json(settings)


def reads_image_tokens(model_class: Any, config: Any) -> bool:
    """Whether ``model_class`` is a decoder-only model whose forward reads precomputed image features in place of
    its image tokens (transformers' ``mm_encoder_outputs``): an instruction vision-language model."""
    return "mm_encoder_outputs" in inspect.signature(model_class.forward).parameters and \
        not config.is_encoder_decoder


def vision_side(model: nn.Module) -> tuple[str, nn.Module, list[str]]:
    """The image side of ``model``: the module that holds its language model (``get_decoder()``), its path in
    ``model``, and the names of its other children there (the vision tower, its projector or connector)."""
    decoder = model.get_decoder()
    for path, module in model.named_modules():
        children = dict(module.named_children())
        if any(child is decoder for child in children.values()):
            return path, module, [name for name, child in children.items() if child is not decoder]
    raise RlcapError(f"{type(model).__name__}: its language model is not one of its modules")


def tower_of(model: nn.Module) -> nn.ModuleDict:
    """The image side's modules, under their names (weights only: for the digest and the export)."""
    _, base, names = vision_side(model)
    return nn.ModuleDict({name: getattr(base, name) for name in names})


def pack_size(height: int, width: int) -> list[float]:
    return [height // SIZE_BASE, height % SIZE_BASE, width // SIZE_BASE, width % SIZE_BASE]


def unpack_sizes(fc: torch.Tensor) -> list[tuple[int, int]]:
    """fc (B, D + 4) -> each picture's (height, width) (a host read: the processor runs on the host)."""
    parts = fc[:, -SIZE_PARTS:].float().round().long().tolist()
    return [(hh * SIZE_BASE + hl, wh * SIZE_BASE + wl) for hh, hl, wh, wl in parts]


def blank(size: tuple[int, int]) -> Any:
    """A blank RGB picture of (height, width): what the processor reads a layout from."""
    from PIL import Image

    return Image.new("RGB", (size[1], size[0]))


def image_token(processor: Any) -> tuple[str, int]:
    """The processor's image placeholder (``image_token``: what a text holds where a picture goes) and the id of
    the token it expands it into, which the model replaces by the image's features: of the ids the processor
    declares as the image's (``image_token_ids``, what it marks in its token types; by default its
    ``image_token_id``), the one its output for a picture holds most. A placeholder may not be that token: Gemma 3's
    processor reads ``<start_of_image>`` (its ``image_token`` and ``image_token_id``) and writes it around the
    ``<image_soft_token>``s it declares in ``image_token_ids``; others list the boundaries they write there too."""
    try:
        token = processor.image_token
    except AttributeError:
        raise RlcapError(f"{type(processor).__name__} declares no image_token: not an image-text-to-text "
                         "model's processor") from None
    declared = [int(i) for i in processor.image_token_ids if i is not None]
    declared = declared or [int(processor.tokenizer.convert_tokens_to_ids(token))]
    ids = processor(text=[token], images=[[blank((32, 32))]], return_tensors="pt")["input_ids"]
    counts = [int((ids == i).sum()) for i in declared]
    if max(counts) == 0:
        raise RlcapError(f"{type(processor).__name__}: its input ids for a picture hold none of the image token ids "
                         f"it declares ({declared}): not an image-text-to-text model's processor")
    return token, declared[counts.index(max(counts))]


def image_token_count(processor: Any, size: tuple[int, int]) -> int:
    """How many image tokens the processor puts in a text for a picture of ``size``."""
    token, token_id = image_token(processor)
    ids = processor(text=[token], images=[[blank(size)]], return_tensors="pt")["input_ids"]
    return int((ids == token_id).sum())


def image_features(model: Any, processor: Any, images: Any) -> Any:
    """``get_image_features``' output (a ModelOutput) for pictures (one, or a list of one size), on what it takes
    of :func:`image_inputs` (the pixels, and what places them: Qwen2-VL's grid, LLaVA-OneVision's ``image_sizes``)."""
    return features_of_inputs(model, image_inputs(processor, images))


def side_inputs(model: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What ``get_image_features`` takes of the processor's output ``inputs`` (the pixels, and what places them)."""
    params = inspect.signature(model.get_image_features).parameters
    return {k: v for k, v in inputs.items() if k in params}


def features_of_inputs(model: Any, inputs: dict[str, torch.Tensor]) -> Any:
    """``get_image_features``' output for the processor's output ``inputs`` (:func:`image_inputs`), on the model's
    device."""
    device = next(model.parameters()).device
    return model.get_image_features(**{k: v.to(device) for k, v in side_inputs(model, inputs).items()},
                                    return_dict=True)


def image_parts(output: Any) -> list[Any]:
    """What the language model reads of an image features output: its ``pooler_output``, then each layer of its
    ``deepstack_features`` where it returns them (a ModelOutput holds the fields that are set), each a tensor
    per image or one batch tensor."""
    return [output.pooler_output, *output.get(DEEPSTACK, [])]


def _per_picture(part: Any, pictures: int) -> list[torch.Tensor]:
    """One part of an image features output (a tensor a picture, or one batch tensor of every picture's tiles in
    order) as each picture's tokens (N, D): pictures of one size have as many tiles and tokens each."""
    if isinstance(part, (list, tuple)) and len(part) == pictures:
        return [piece.reshape(-1, piece.shape[-1]) for piece in part]
    pieces = list(part) if isinstance(part, (list, tuple)) else [part]
    flat = torch.cat([piece.reshape(-1, piece.shape[-1]) for piece in pieces])
    if flat.shape[0] % pictures:
        raise RlcapError(f"{flat.shape[0]} image tokens do not split evenly over {pictures} pictures of one size")
    return list(flat.split(flat.shape[0] // pictures))


def image_tokens_of(model: Any, processor: Any, images: Sequence[Any]) -> list[torch.Tensor]:
    """The image tokens (N, parts * D) of each of ``images`` (pictures of one size: as many tokens each) as the
    language model reads them (:func:`image_parts` side by side), from one pass of the image side."""
    return tokens_of_inputs(model, image_inputs(processor, list(images)), len(images))


def tokens_of_inputs(model: Any, inputs: dict[str, torch.Tensor], pictures: int) -> list[torch.Tensor]:
    """:func:`image_tokens_of` from the processor's output ``inputs`` for ``pictures`` pictures of one size."""
    parts = [_per_picture(part, pictures) for part in image_parts(features_of_inputs(model, inputs))]
    return [torch.cat([part[i] for part in parts], dim=-1) for i in range(pictures)]


def image_tokens(model: Any, processor: Any, image: Any) -> torch.Tensor:
    """One picture's image tokens (N, parts * D) (:func:`image_tokens_of` for one)."""
    return image_tokens_of(model, processor, [image])[0]


def pixel_layout(model: Any, processor: Any) -> PixelLayout:
    """The layout of a picture's inputs of ``model``'s image side in a row (:mod:`rlcap.encoders.pixel_rows`), read
    from the processor's output for a blank picture."""
    return PixelLayout.of(per_picture(side_inputs(model, image_inputs(processor, blank((32, 32)))), 1)[0])


def keep_image_side(model: nn.Module) -> None:
    """Remove ``model``'s language model and output layer, which an encoder of its image side never runs (a
    frozen store's writer, the online tokens of a run: their weights, most of a vision-language model's, freed)."""
    gone = (model.get_decoder(), model.get_output_embeddings())
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if any(child is each for each in gone):
                setattr(module, name, None)


class HFVLMEncoder:
    """The frozen image side of a vision-language model read from ``folder`` (module docstring): ``prepare`` keeps
    the pictures as they are (RGBA, the alpha channel marking each picture in the padded batch), ``features`` gives
    fc (B, D + 4) and att (B, N, D) float32, ``features_with_counts`` also each row's token count."""

    def __init__(self, folder: str | Path, model: Any, processor: Any, device: torch.device | str = "cpu"):
        self.folder = Path(folder)
        self.processor = processor
        self.device = torch.device(device)
        self.model = model.eval().requires_grad_(False).to(self.device)
        self.name = f"hf:{type(model).__name__}"
        self.tower = tower_of(self.model)
        self.width = int(self.model.config.get_text_config().hidden_size)
        with torch.inference_mode():
            self.parts = len(image_parts(image_features(self.model, processor, blank((32, 32)))))
        self.att_dim = self.parts * self.width
        self.fc_dim = self.att_dim + SIZE_PARTS
        self.image_size = AS_THEY_ARE
        self.regions = max(image_token_count(processor, size) for size in PROBED_SIZES)
        self.layout = pixel_layout(self.model, processor)  # (pixel_feats: a picture's inputs in a row)
        self._counts: dict[tuple[int, int], int] = {}  # (height, width) -> image tokens (_count)
        keep_image_side(self.model)  # (the language model's weights, most of the model's, are not the encoder's)

    @property
    def precision(self) -> str:
        return "fp16" if self.device.type == "cuda" else "fp32"

    def prepare(self, images: Sequence[Any]) -> np.ndarray:
        """RGB PIL pictures -> (B, Hmax, Wmax, 4) uint8 (:func:`padded_batch`)."""
        return padded_batch(images)

    def host(self, pictures: Sequence[Any]) -> OnHost:
        """Decoded pictures -> :meth:`on_host`'s output for them, without the padded batch between."""
        return on_pictures(self.processor, pictures)

    def worker_side(self) -> Callable[[], HostSide]:
        """What builds :meth:`host` in a worker process (rlcap.encoders.host_workers)."""
        return functools.partial(vlm_host_side, str(self.folder))

    def features(self, prepared: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        fc, att, _ = self.features_with_counts(prepared)
        return fc, att

    def features_with_counts(self, prepared: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, Hmax, Wmax, 4) uint8 -> fc (B, D + 4), att (B, N, D) zero past each count, counts (B,)."""
        return self.from_host(self.on_host(prepared))

    def on_host(self, prepared: torch.Tensor) -> OnHost:
        """The host's part of :meth:`features_with_counts` (module function :func:`on_host`)."""
        return on_host(self.processor, prepared)

    @torch.inference_mode()
    def from_host(self, host: OnHost) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The device's part of :meth:`features_with_counts`: the image side over :meth:`on_host`'s inputs."""
        found: dict[int, torch.Tensor] = {}
        for rows, group, inputs in host.groups:
            found.update(zip(rows, self._tokens_of_one_size(group, inputs, host.sizes[rows[0]])))
        rows = []
        for k, (height, width) in enumerate(host.sizes):
            tokens = found[k]
            if len(tokens) > self.regions:
                raise RlcapError(f"{self.folder}: a {width} x {height} picture gives {len(tokens)} image tokens, more "
                                 f"than the {self.regions} the store was sized for")
            size = torch.tensor(pack_size(height, width), device=tokens.device)
            rows.append((torch.cat([tokens.mean(0), size]), tokens))
        counts = torch.tensor([len(t) for _, t in rows], device=self.device)
        att = torch.zeros(len(rows), int(counts.max()), self.att_dim, device=self.device)
        for k, (_, tokens) in enumerate(rows):
            att[k, : len(tokens)] = tokens
        return torch.stack([fc for fc, _ in rows]), att, counts

    def pixel_feats(self, host: OnHost) -> Feats:
        """:meth:`on_host`'s pictures as a policy that runs this image side itself reads them (it trains it:
        ``model.train_vision``): each picture's inputs of the image side in a row of ``pixels``
        (:mod:`rlcap.encoders.pixel_rows`), fc its size (its mean token unknown: 0), att no token."""
        found: dict[int, dict[str, torch.Tensor]] = {}
        for rows, _, inputs in host.groups:
            found.update(zip(rows, per_picture(side_inputs(self.model, inputs), len(rows))))
        pixels = self.layout.pack([found[k] for k in range(len(host.sizes))]).to(self.device)
        fc = torch.zeros(len(host.sizes), self.fc_dim, device=self.device)
        fc[:, -SIZE_PARTS:] = torch.tensor([pack_size(*size) for size in host.sizes], dtype=torch.float32)
        att = torch.zeros(len(host.sizes), 0, self.att_dim, device=self.device)
        return Feats(fc, att, torch.zeros(att.shape[:2], dtype=torch.bool, device=self.device), pixels)

    def _tokens_of_one_size(self, pictures: list[Any], inputs: dict[str, torch.Tensor],
                            size: tuple[int, int]) -> list[torch.Tensor]:
        """The image tokens of pictures of one ``size``, float32, from the processor's ``inputs`` for them all: in one
        pass of the image side (the same tokens as one picture a pass, to float rounding:
        tests/encoders/test_hf_vlm_batched.py), or one picture a pass where the processor's count for the size says
        the batched pass split them otherwise."""
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.device.type == "cuda"):
            tokens = tokens_of_inputs(self.model, inputs, len(pictures))
            if len(pictures) == 1 or all(len(t) == self._count(size) for t in tokens):
                return [t.float() for t in tokens]
            return [image_tokens(self.model, self.processor, picture).float() for picture in pictures]

    def _count(self, size: tuple[int, int]) -> int:
        """How many image tokens the processor counts for a picture of ``size`` (kept)."""
        if size not in self._counts:
            self._counts[size] = image_token_count(self.processor, size)
        return self._counts[size]

    def records(self) -> dict[str, str | int]:
        """What a store records of this encoder: the model class, the image side's weights (what the policy
        compares), the processor's settings, the fc and att layout and the precision."""
        from rlcap.encoders.hf import tower_digest, weights_digest

        return {"encoder": self.name, "encoder_weights": weights_digest(self.folder),
                "tower_weights": tower_digest(self.tower),
                "preprocessing": settings_json(self.processor.image_processor.to_dict()),
                "fc_layout": store_layout(self.parts, self.width), "image_size": self.image_size,
                "precision": self.precision}

    def to(self, device: torch.device | str) -> "HFVLMEncoder":
        self.device = torch.device(device)
        self.model.to(self.device)
        return self


def load_vlm_encoder(folder: str | Path, device: torch.device | str = "cpu") -> HFVLMEncoder | None:
    """The encoder of the vision-language model in ``folder``, or None when the folder holds another kind of model
    (:func:`reads_image_tokens`: then :class:`rlcap.encoders.hf.HFImageEncoder` reads it)."""
    from rlcap.transformers_io import import_transformers, load_weights_of, no_bars

    transformers = import_transformers("a transformers encoder")
    folder = Path(folder).expanduser().resolve()
    if not (folder / "config.json").is_file():
        return None  # (HFImageEncoder says what is missing)
    with no_bars(transformers):
        try:
            config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError, KeyError):
            return None
        model_class = getattr(transformers, (config.architectures or [""])[0], None)
        if model_class is None or not reads_image_tokens(model_class, config):
            return None
        model = load_weights_of(model_class, folder)
        processor = load_processor(folder)
    return HFVLMEncoder(folder, model, processor, device)
