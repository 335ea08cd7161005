"""What differs between decoder-only vision-language families, as small declared adapters: one per behaviour, each
chosen from what the model and its processor declare (never from a family's name), held by
:class:`rlcap.models.hf.vlm.HFVLMCaptioner`, which calls them where its shared steps differ. docs/MODELS.md's
family table lists which adapters each family takes (a test checks it against :func:`choose` on every family's
tiny folder). A family with a new behaviour is a new adapter here and a line in :func:`choose`, not an edit of the
policy's methods.

* **image features** (:class:`ImageFeatures`): how the stored image tokens go back into the forward as its
  precomputed ``mm_encoder_outputs``: a tensor per picture (Qwen2-VL, LLaVA, ...) or one tensor for the batch
  (PaliGemma, Idefics3), with the model's own output class; and :class:`DeepStack`, the further token layers
  (Qwen3-VL's ``deepstack_features``) stored beside each token, handed back as a list.
* **positions** (:class:`TextPositions`, :class:`GridPositions`): a caption word one past the last, on one row of
  positions, or on each of the rows of rotary positions computed from the picture's grid (Qwen2-VL's multimodal
  rotary positions: the prompt's position ids have a leading dimension of rows).
* **token types** (:class:`TypesWordByWord`): a model whose prompt carries token types (PaliGemma's and Gemma 3's
  ``token_type_ids``, Qwen2-VL's ``mm_token_type_ids``: what attends both ways over the picture) has a caption's
  types extended a word at a time as ``generate()`` extends them (the model's generic update repeats the last
  types, the picture's, for several new tokens at once); without types, the mask is extended in one go.
* **cache** (:class:`WholeWindow`): a language model with sliding-window layers (Gemma 3's ``layer_types``) prefills
  into a cache whose layers keep every key (its own would drop the ones past the window, which rlcap's state
  tensors cannot carry; the model's mask applies the window by position); others prefill into the cache the model
  makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlcap.encoders.hf_vlm import DEEPSTACK, image_parts
from rlcap.models.hf.cache import whole_cache

TYPE_KEYS = ("token_type_ids", "mm_token_type_ids")  # the prompt inputs that say what attends both ways


@dataclass(frozen=True)
class ImageFeatures:
    """The stored tokens (N, D) of a batch's pictures as ``get_image_features`` returns them: ``per_picture``, a
    tuple of one tensor (its forward splits them by the prompt's image tokens), else one tensor."""

    output_class: Any
    per_picture: bool
    width: int

    @property
    def label(self) -> str:
        return "a tensor per picture" if self.per_picture else "one batch tensor"

    def form(self, part: torch.Tensor) -> Any:
        return (part,) if self.per_picture else part

    def output(self, images: torch.Tensor) -> Any:
        return self.output_class(pooler_output=self.form(images))

    @property
    def parts(self) -> int:
        return 1


@dataclass(frozen=True)
class DeepStack(ImageFeatures):
    """Stored rows of ``parts`` x ``width``: the ``pooler_output``, then each DeepStack layer's token."""

    layers: int = 0

    @property
    def label(self) -> str:
        return f"{super().label}, DeepStack layers beside each token"

    def output(self, images: torch.Tensor) -> Any:
        first, *rest = images.split(self.width, dim=-1)
        return self.output_class(pooler_output=self.form(first), **{DEEPSTACK: [self.form(part) for part in rest]})

    @property
    def parts(self) -> int:
        return 1 + self.layers


class TextPositions:
    """One row of positions: the prompt's last (B, 1), a caption's ``t`` words after it (B, t)."""

    label = "text positions"

    def last(self, position_ids: torch.Tensor) -> torch.Tensor:
        return position_ids[:, -1:]

    def after(self, last: torch.Tensor, t: int) -> torch.Tensor:
        return last + torch.arange(1, t + 1, device=last.device)


class GridPositions(TextPositions):
    """Rows of rotary positions from the picture's grid (P, B, L): the prompt's last as (B, P), a caption's ``t``
    words after it on every row (P, B, t)."""

    label = "rotary positions from the picture's grid"

    def last(self, position_ids: torch.Tensor) -> torch.Tensor:
        return position_ids[..., -1].T

    def after(self, last: torch.Tensor, t: int) -> torch.Tensor:
        return last.T[:, :, None] + torch.arange(1, t + 1, device=last.device)


class MaskOnly:
    """No token types: a caption's ``t`` words extend the mask in one update."""

    label = "mask only"

    def extend(self, model: Any, kwargs: dict[str, Any], words: int) -> dict[str, Any]:
        return model._update_model_kwargs_for_generation({}, kwargs, num_new_tokens=words) if words else kwargs


class TypesWordByWord(MaskOnly):
    """Token types extended a word at a time, as ``generate()`` extends them (module docstring)."""

    label = "token types, a word at a time"

    def extend(self, model: Any, kwargs: dict[str, Any], words: int) -> dict[str, Any]:
        for _ in range(words):
            kwargs = model._update_model_kwargs_for_generation({}, kwargs, num_new_tokens=1)
        return kwargs


class OwnCache:
    """The prefill's cache: the one the model makes (None)."""

    label = "the model's cache"

    def empty(self) -> Any:
        return None


class WholeWindow(OwnCache):
    """The prefill's cache: layers that keep every key (module docstring)."""

    label = "sliding-window layers kept whole"

    def empty(self) -> Any:
        return whole_cache()


@dataclass(frozen=True)
class Adapters:
    """The adapters one policy takes (:func:`choose`)."""

    images: ImageFeatures
    positions: TextPositions
    types: MaskOnly
    cache: OwnCache

    def labels(self) -> dict[str, str]:
        """What docs/MODELS.md's family table shows, column by column."""
        return {"image features": self.images.label, "positions": self.positions.label,
                "token types": self.types.label, "cache": self.cache.label}


def choose(model: Any, probe: Any, prompt_inputs: dict[str, torch.Tensor], position_ids: torch.Tensor) -> Adapters:
    """The adapters of ``model`` from what it declares: ``probe``, its ``get_image_features`` output for a blank
    picture; ``prompt_inputs``, its processor's inputs for the prompt with one picture; ``position_ids``, the
    positions its ``_prepare_position_ids_for_generation`` gives them."""
    width = int(model.config.get_text_config().hidden_size)
    per_picture = isinstance(probe.pooler_output, (list, tuple))
    layers = len(image_parts(probe)) - 1
    images = DeepStack(type(probe), per_picture, width, layers) if layers else \
        ImageFeatures(type(probe), per_picture, width)
    positions = GridPositions() if position_ids.dim() == 3 else TextPositions()
    types = TypesWordByWord() if any(key in prompt_inputs for key in TYPE_KEYS) else MaskOnly()
    layer_types = getattr(model.config.get_text_config(), "layer_types", None) or ()
    cache = WholeWindow() if any("sliding" in str(kind) for kind in layer_types) else OwnCache()
    return Adapters(images, positions, types, cache)
