"""The prompt of an instruction vision-language model policy (:mod:`rlcap.models.hf.vlm`): ``model.prompt`` put
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

What a user's folder or prompt can hold that would train on another prompt than they meant is said before the run
(:func:`policy_prompt`): the prompt text is logged once; a whitespace prompt is refused; the processor's own
placeholders in it (``<image>``, which transformers' PaliGemma warning asks for) are removed with a warning, as
rlcap places the picture; a processor that needs the picture's place written into the text (all but PaliGemma's,
which puts the picture before a task prefix itself) in a folder without a chat template (a partial download) is
refused; a prompt past the language model's positions is warned of once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from rlcap.encoders.hf_vlm import blank, image_token
from rlcap.errors import ConfigError, RlcapError

log = logging.getLogger(__name__)

INSTRUCTION = "Describe this image briefly in one sentence."
TASK_PREFIX = "caption en"
SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")  # one entry per token


def has_chat_template(processor: Any) -> bool:
    return bool(processor.chat_template or processor.tokenizer.chat_template)


def instruction(processor: Any, prompt: str) -> str:
    """``model.prompt`` as the instruction to put through the processor: whitespace alone refused (an override
    ``model.prompt=" "`` means no instruction rlcap could guess), the processor's own placeholders removed (rlcap
    places the picture; written again, the processor would count two pictures for one) with a warning."""
    if prompt and not prompt.strip():
        raise ConfigError(f"model.prompt: {prompt!r} holds only whitespace: write the instruction, or leave it empty "
                          "for the default")
    placeholders = [token for token in processor.all_special_multimodal_tokens if token in prompt]
    if not placeholders:
        return prompt
    kept = prompt
    for token in placeholders:
        kept = kept.replace(token, "")
    kept = kept.strip()
    log.warning("model.prompt %r holds %s: rlcap places the picture itself, so the instruction read is %s", prompt,
                " and ".join(placeholders), repr(kept) if kept else "the default")
    return kept


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' warnings off (PaliGemma's processor warns of a text without its image token, which is what
    :func:`places_picture` asks it)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def places_picture(processor: Any) -> bool:
    """Whether the processor places a picture given beside a text that holds no image token (PaliGemma's puts it
    before the task prefix); a chat model's processor refuses such a text, the placeholders being its chat
    template's to write."""
    try:
        with _quiet_transformers():
            out = processor(text=[TASK_PREFIX], images=[[blank((32, 32))]], return_tensors="pt")
    except ValueError:
        return False
    return bool((out["input_ids"] == image_token(processor)[1]).any())


def policy_prompt(processor: Any, prompt: str, folder: Path) -> str:
    """The text a policy of ``folder`` reads before each caption (:func:`instruction`, :func:`prompt_text`),
    logged once; a processor that needs a chat template it does not have refused in one line."""
    if not has_chat_template(processor) and not places_picture(processor):
        raise RlcapError(f"{folder}: its processor needs the picture's place written into the prompt, as a chat "
                         "template writes it, but the folder has no chat template "
                         "(chat_template.jinja or chat_template.json; a partial download?): copy it from where the "
                         "model came from")
    text = prompt_text(processor, instruction(processor, prompt))
    log.info("%s: the prompt before each caption: %r", folder, text)
    return text


def prompt_text(processor: Any, prompt: str) -> str:
    """``prompt`` (empty: the default instruction) as the text the processor reads with one picture."""
    if not has_chat_template(processor):  # the image placeholder first, as PaliGemma's processor asks
        return image_token(processor)[0] + (prompt or TASK_PREFIX)
    turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt or INSTRUCTION}]}]
    template = processor.chat_template or processor.tokenizer.chat_template  # (the processor's first)
    return processor.apply_chat_template(turn, chat_template=template, add_generation_prompt=True, tokenize=False)


class PromptInputs:
    """The processor's inputs for ``text`` with one picture of a given size, without pixels (module docstring);
    ``accepted``: the model's forward's parameters (what it reads); ``positions``: the language model's
    ``max_position_embeddings``, which a prompt reaching it is warned of (once)."""

    def __init__(self, processor: Any, text: str, accepted: Sequence[str], positions: int | None = None):
        self.processor, self.text = processor, text
        self.accepted = set(accepted)
        self.positions, self._warned = positions, False
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
            self._check_length(size, self._by_size[size]["input_ids"].shape[1])
        return self._by_size[size]

    def _check_length(self, size: tuple[int, int], length: int) -> None:
        """A warning, once, for a prompt that fills the language model's positions: it trains, the caption read
        at positions the model was never trained at (a rotary model has no table to run out of)."""
        if self.positions is None or length < self.positions or self._warned:
            return
        self._warned = True
        log.warning("model.prompt: with a %d x %d picture the prompt is %d tokens, at or past the language model's "
                    "max_position_embeddings (%d): its captions are read at positions it was not trained on; "
                    "shorten model.prompt", size[1], size[0], length, self.positions)

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
