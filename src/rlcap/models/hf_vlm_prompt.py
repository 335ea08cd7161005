"""The prompt of an instruction vision-language model policy (:mod:`rlcap.models.hf_vlm`): ``model.prompt`` put
through the processor as a user puts a question before ``generate()``, for a picture of each size.

* **the text**: with a chat template (the processor's or its tokenizer's), one user turn holding the picture and
  the instruction, and the assistant's turn opened (``add_generation_prompt``); without one (PaliGemma), the
  instruction as it is, the processor putting the image tokens before it. The default instruction is
  :data:`INSTRUCTION` for a model with a chat template and :data:`TASK_PREFIX` for one without (PaliGemma's
  captioning task prefix, as its model card gives it): chosen here, as no processor declares a captioning prompt.
* **the inputs**: the processor's own output for that text and a blank picture of the stored size (the image
  tokens expanded as for the picture: Qwen2-VL's grid, Idefics3's tiles), without its pixels: the token ids, the
  attention mask, the token types (PaliGemma's prefix, Qwen2-VL's modalities) and what places the image (Qwen2-VL's
  ``image_grid_thw``), read once per size and kept. A batch is padded on the left, as ``generate()`` pads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcap.encoders.hf_vlm import blank, image_token

INSTRUCTION = "Describe this image briefly in one sentence."
TASK_PREFIX = "caption en"
SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")  # one entry per token


def has_chat_template(processor: Any) -> bool:
    return bool(processor.chat_template or processor.tokenizer.chat_template)


def prompt_text(processor: Any, prompt: str) -> str:
    """``prompt`` (empty: the default instruction) as the text the processor reads with one picture."""
    if not has_chat_template(processor):  # the image placeholder first, as PaliGemma's processor asks
        return image_token(processor)[0] + (prompt or TASK_PREFIX)
    turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt or INSTRUCTION}]}]
    template = processor.chat_template or processor.tokenizer.chat_template  # (the processor's first)
    return processor.apply_chat_template(turn, chat_template=template, add_generation_prompt=True, tokenize=False)


class PromptInputs:
    """The processor's inputs for ``text`` with one picture of a given size, without pixels (module docstring);
    ``accepted``: the model's forward's parameters (what it reads)."""

    def __init__(self, processor: Any, text: str, accepted: Sequence[str]):
        self.processor, self.text = processor, text
        self.accepted = set(accepted)
        self.image_token_id = image_token(processor)[1]
        pad = processor.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else processor.tokenizer.eos_token_id)
        self._by_size: dict[tuple[int, int], dict[str, torch.Tensor]] = {}

    def one(self, size: tuple[int, int]) -> dict[str, torch.Tensor]:
        """The inputs for one picture of (height, width): each tensor with a batch of 1."""
        if size not in self._by_size:
            out = self.processor(text=[self.text], images=[[blank(size)]], return_tensors="pt")
            self._by_size[size] = {k: v for k, v in out.items() if isinstance(v, torch.Tensor)
                                   and k in self.accepted and not k.startswith("pixel_") and k != "labels"}
        return self._by_size[size]

    def image_tokens(self, size: tuple[int, int]) -> int:
        return int((self.one(size)["input_ids"] == self.image_token_id).sum())

    def batch(self, sizes: Sequence[tuple[int, int]], device: torch.device) -> dict[str, torch.Tensor]:
        """The inputs for pictures of ``sizes``, the per-token ones padded on the left to the longest."""
        ones = [self.one(size) for size in sizes]
        width = max(one["input_ids"].shape[1] for one in ones)
        out = {}
        for key in ones[0]:
            if key in SEQUENCE_KEYS:
                fill = self.pad_id if key == "input_ids" else 0
                rows = [torch.nn.functional.pad(one[key], (width - one[key].shape[1], 0), value=fill) for one in ones]
            else:
                rows = [one[key] for one in ones]  # per picture (image_grid_thw: one row each)
            out[key] = torch.cat(rows).to(device)
        return out
