"""The text interface of a transformers captioner (``model.arch: hf``): its tokenizer behind what rlcap's word
vocabulary offers (``len``, ``encode(words)``, ``decode(ids)``, ``to_json``), so the data, the decoders, the
rewards and the metrics run unchanged.

rlcap's ids keep PAD, BOS, EOS and UNK at 0-3 (:mod:`rlcap.data.vocab`); the model's own start, end, pad and
unknown tokens take those places and its other tokens follow in their order (:class:`TokenIds`). Captions are
encoded into the model's subwords from their words (the tokenized text rlcap's metrics see, joined by spaces),
and decoded back to text by its tokenizer, which rewards and metrics read as they read any caption. A
checkpoint's ``vocab.json`` holds the whole tokenizer, so a checkpoint needs no other file to be read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from rlcap.data.vocab import BOS, EOS, PAD, UNK, Vocab
from rlcap.errors import DataError, RlcapError

KIND = "hf_tokenizer"  # vocab.json's "kind" for this interface


class TokenIds:
    """rlcap's ids <-> the model's: PAD, BOS, EOS, UNK at 0-3 as its pad, start, end and unknown tokens (-1 where
    it has none: never written, never read), its other ids in their order after them."""

    def __init__(self, start: int, end: int, pad: int | None, unk: int | None, hf_size: int):
        self.start, self.end, self.pad, self.unk, self.hf_size = int(start), int(end), pad, unk, int(hf_size)
        special = {PAD: pad, BOS: start, EOS: end, UNK: unk}
        others = [i for i in range(hf_size) if i not in set(special.values())]
        self.to_hf = torch.tensor([-1 if special[k] is None else special[k] for k in (PAD, BOS, EOS, UNK)] + others)
        self.from_hf = {hf: rl for rl, hf in enumerate(self.to_hf.tolist()) if hf >= 0}  # (start = end: EOS)
        self.size = len(self.to_hf)  # rlcap's vocabulary size
        self.lacks = bool((self.to_hf < 0).any())  # some of PAD/UNK without a token of the model's
        self._on: dict[torch.device, torch.Tensor] = {}  # to_hf on each device it is used on (once, not every step)

    @classmethod
    def from_config(cls, config: Any, hf_size: int) -> "TokenIds":
        """The start token is the one the model begins a caption with (``decoder_start_token_id``, else the text
        config's ``bos_token_id``); the end token is a BERT-style decoder's ``sep_token_id`` when its text config
        declares one (BLIP ends captions with [SEP], as its ``generate`` does), else ``eos_token_id``."""
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        start = getattr(config, "decoder_start_token_id", None)
        start = start if start is not None else text.bos_token_id
        end = getattr(text, "sep_token_id", None)
        end = end if end is not None else text.eos_token_id
        if start is None or end is None:
            raise RlcapError(f"{type(config).__name__}: no start or end token in its config "
                             "(decoder_start_token_id / bos_token_id, sep_token_id / eos_token_id)")
        return cls(start, end, text.pad_token_id, getattr(text, "unk_token_id", None), hf_size)

    def _index(self, device: torch.device) -> torch.Tensor:
        if device not in self._on:
            self._on[device] = self.to_hf.to(device)
        return self._on[device]

    def hf_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """rlcap ids -> the model's (a token it lacks becomes its end token: never a real input)."""
        out = self._index(ids.device)[ids]
        return torch.where(out < 0, self.end, out) if self.lacks else out

    def rlcap_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V_hf) -> (..., V) in rlcap's order; -inf for a token the model lacks."""
        index = self._index(logits.device)
        out = logits.index_select(-1, index.clamp(min=0))
        return out.masked_fill(index < 0, float("-inf")) if self.lacks else out

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "pad": self.pad, "unk": self.unk, "hf_size": self.hf_size}


class TokenizerVocab:
    """A transformers tokenizer with rlcap's vocabulary interface (module docstring)."""

    def __init__(self, tokenizer_json: str, ids: TokenIds, special: Sequence[int]):
        from tokenizers import Tokenizer

        self.tokenizer_json = tokenizer_json
        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.ids = ids
        self.special = sorted(set(special))  # the tokenizer's special tokens: never part of a caption's text
        self._skip = set(self.special)

    @classmethod
    def from_folder(cls, folder: str | Path) -> "TokenizerVocab":
        """The tokenizer and the token conventions of the captioner saved in ``folder``."""
        from rlcap.encoders.hf import _import_transformers

        transformers = _import_transformers()
        try:
            config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
            tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise RlcapError(f"{folder}: cannot load its config and tokenizer ({str(exc).splitlines()[0]})") from None
        if not getattr(tokenizer, "is_fast", False):
            raise RlcapError(f"{folder}: its tokenizer has no fast (tokenizers) version, which rlcap reads")
        hf_size = config.get_text_config().vocab_size  # the decoder's output size (its LM head's)
        return cls(tokenizer.backend_tokenizer.to_str(), TokenIds.from_config(config, hf_size), tokenizer.all_special_ids)

    def __len__(self) -> int:
        return self.ids.size

    @property
    def itos(self) -> list[str]:
        """Each rlcap id's token (its subword), for messages and comparisons."""
        return ["<pad>", "<bos>", "<eos>", "<unk>"] + [self.tokenizer.id_to_token(int(i)) or ""
                                                       for i in self.ids.to_hf[4:].tolist()]

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """A caption's words -> rlcap ids of the model's subwords (no BOS/EOS added)."""
        hf = self.tokenizer.encode(" ".join(tokens), add_special_tokens=False).ids
        return [self.ids.from_hf.get(i, UNK) for i in hf]

    def decode(self, ids: Iterable[int]) -> str:
        """rlcap ids -> the caption's text, cut at the first EOS (or PAD); BOS and special tokens skipped."""
        hf = []
        for i in ids:
            i = int(i)
            if i in (EOS, PAD):
                break
            if i in (BOS, UNK):
                continue
            token = int(self.ids.to_hf[i])
            if token not in self._skip:
                hf.append(token)
        return self.tokenizer.decode(hf, skip_special_tokens=True).strip()

    def to_json(self) -> str:
        return json.dumps({"kind": KIND, "ids": self.ids.to_dict(), "special": self.special,
                           "tokenizer": json.loads(self.tokenizer_json)})

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TokenizerVocab":
        try:
            return cls(json.dumps(data["tokenizer"]), TokenIds(**data["ids"]), data["special"])
        except Exception as exc:  # (the tokenizers library reports a bad tokenizer as a plain Exception)
            raise DataError(f"a {KIND} vocabulary that cannot be read ({exc.__class__.__name__}: {exc})") from None


def load_vocab(path: str | Path) -> "Vocab | Any":
    """A checkpoint's ``vocab.json``: rlcap's word vocabulary, or a transformers captioner's tokenizer
    (:class:`rlcap.data.hf_text.TokenizerVocab`, ``"kind": "hf_tokenizer"``)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read vocabulary {path}: {exc}") from exc
    if isinstance(data, dict) and data.get("kind") == "hf_tokenizer":
        return TokenizerVocab.from_dict(data)
    return Vocab.load(path)
