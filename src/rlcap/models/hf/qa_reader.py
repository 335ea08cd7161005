"""A text-only reader of captions ([Xing26]): a causal language model from a local folder (any
``AutoModelForCausalLM`` with its tokenizer and chat template) reads a caption and a multiple-choice question, and
its probability of each option letter is read at the next token, from one forward pass (no generation).

The prompt is one user turn, rendered by the reader's own chat template with the assistant's turn opened::

    Caption: <caption>
    Question: <question>
    A. <option>
    B. <option>
    ...
    Answer with the letter of the right option.

A batch of prompts is left-padded (position ids counted from each row's first real token, as ``generate`` counts
them), so the last position of every row is its next token; the model returns the logits of that position only
(``logits_to_keep=1``). Only the forward pass runs in the caller's precision (autocast, as the engine's forward
passes); the softmax over the vocabulary is taken in fp32 outside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlcap.data.qa import LETTERS
from rlcap.devices import PRECISIONS, autocast, check_precision
from rlcap.errors import DataError

INSTRUCTION = "Answer with the letter of the right option."


def reader_prompt_text(caption: str, question: str, options: tuple[str, ...] | list[str]) -> str:
    """The user turn's text for ``caption`` and one question with its options in this order."""
    lines = [f"Caption: {caption.strip()}", f"Question: {question}"]
    lines += [f"{LETTERS[k]}. {option}" for k, option in enumerate(options)]
    return "\n".join([*lines, INSTRUCTION])


class QAReader:
    """A frozen causal LM and its tokenizer that answer multiple-choice questions from a caption.

    ``precision``: fp32, bf16 or fp16, the forward passes' (autocast); ``batch_size``: prompts per forward pass.
    """

    def __init__(self, model: Any, tokenizer: Any, precision: str = "fp32", batch_size: int = 256):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.precision, self.batch_size = precision, batch_size
        self.device = next(model.parameters()).device
        if tokenizer.chat_template is None:
            raise DataError("the QA reader's tokenizer has no chat template; the reader reads a chat turn")
        self.letter_ids = torch.tensor([self._letter_id(letter) for letter in LETTERS], device=self.device)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.pad_id is None:
            raise DataError("the QA reader's tokenizer has neither a pad token nor an end token to pad with")
        self._around = self._template_around()

    @classmethod
    def load(cls, folder: str | Path, device: str | torch.device = "cpu", precision: str = "fp32",
             batch_size: int = 256) -> "QAReader":
        """The reader saved in ``folder`` (``save_pretrained``'s files) on ``device``, its weights in
        ``precision``'s dtype (a frozen 3B reader takes 6 GB in bf16, 12 in fp32), its forward passes under it."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from rlcap.transformers_io import no_bars
        import transformers

        check_precision(precision)
        path = Path(folder)
        if not (path / "config.json").is_file():
            raise DataError(f"{folder}: the QA reader is a local transformers folder (config.json, weights, "
                            "tokenizer with a chat template); none is there")
        with no_bars(transformers):
            model = AutoModelForCausalLM.from_pretrained(path, dtype=PRECISIONS[precision] or torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model.requires_grad_(False)
        return cls(model.to(device), tokenizer, precision, batch_size)

    def _letter_id(self, letter: str) -> int:
        ids = self.tokenizer.encode(letter, add_special_tokens=False)
        if len(ids) != 1:
            raise DataError(f"the QA reader's tokenizer writes the option letter {letter!r} as {len(ids)} tokens; "
                            "the reward reads one token per letter")
        return ids[0]

    def _template_around(self) -> tuple[str, str]:
        """What the chat template writes before and after a user turn's text (the assistant's turn opened):
        rendered once around a marker, as a call renders thousands of prompts."""
        marker = "\x00QA\x00"
        text = self.tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                                  add_generation_prompt=True)
        if text.count(marker) != 1:
            raise DataError("the QA reader's chat template does not write a user turn's text as it is")
        before, _, after = text.partition(marker)
        return before, after

    def render(self, caption: str, question: str, options: tuple[str, ...] | list[str]) -> str:
        """The whole prompt: the user turn as the chat template writes it, the assistant's turn opened."""
        before, after = self._around
        return before + reader_prompt_text(caption, question, options) + after

    @torch.no_grad()
    def option_probs(self, prompts: list[str], n_options: int, temperature: float = 1.0) -> torch.Tensor:
        """(P, n_options) float32 on the reader's device: the probability the reader gives each option letter
        as its next token after each of ``prompts`` (softmax over the whole vocabulary of the logits divided by
        ``temperature``: what a reader sampling its answer at that temperature would pick)."""
        rows = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        out = torch.empty(len(rows), n_options, device=self.device)
        order = sorted(range(len(rows)), key=lambda k: len(rows[k]))  # similar lengths together: less padding
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            logits = self.last_logits([rows[k] for k in chunk])  # (b, V)
            probs = (logits.float() / temperature).softmax(dim=-1)  # (b, V), fp32 outside autocast
            out[torch.tensor(chunk, device=self.device)] = probs[:, self.letter_ids[:n_options]]
        return out

    def last_logits(self, rows: list[list[int]]) -> torch.Tensor:
        """(b, V): the logits at the last position of each row of token ids, the rows left-padded."""
        width = max(len(r) for r in rows)
        # cpu: the token ids are laid out on the host, then moved in one copy each
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # cpu: (above)
        mask = torch.zeros(len(rows), width, dtype=torch.long)  # cpu: (above)
        for k, r in enumerate(rows):
            ids[k, width - len(r):] = torch.tensor(r, dtype=torch.long)  # cpu: (above)
            mask[k, width - len(r):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # (b, T): each row counts from its first real token
        with autocast(self.device, self.precision):
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1).logits
        return logits[:, -1]  # (b, V)
