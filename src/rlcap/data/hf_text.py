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

import copy
import functools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from rlcap.data.vocab import BOS, EOS, PAD, UNK, Vocab
from rlcap.errors import DataError, RlcapError
from rlcap.transformers_io import import_transformers

KIND = "hf_tokenizer"  # vocab.json's "kind" for this interface


class TokenIds:
    """rlcap's ids <-> the model's: PAD, BOS, EOS, UNK at 0-3 as its pad, start, end and unknown tokens (-1 where
    it has none: never written, never read), its other ids in their order after them."""

    def __init__(self, start: int, end: int, pad: int | None, unk: int | None, hf_size: int,
                 other_ends: Sequence[int] = ()):
        self.start, self.end, self.pad, self.unk, self.hf_size = int(start), int(end), pad, unk, int(hf_size)
        self.other_ends = tuple(int(i) for i in other_ends if int(i) != self.end)
        special = {PAD: pad, BOS: start, EOS: end, UNK: unk}
        others = [i for i in range(hf_size) if i not in set(special.values())]
        self.to_hf = torch.tensor([-1 if special[k] is None else special[k] for k in (PAD, BOS, EOS, UNK)] + others)
        self.from_hf: dict[int, int] = {}  # each model id's rlcap id: EOS first where ids are shared (GPT-2's)
        for rl in (EOS, UNK, BOS, PAD, *range(4, len(self.to_hf))):
            self.from_hf.setdefault(int(self.to_hf[rl]), rl)
        self.from_hf.pop(-1, None)
        self.size = len(self.to_hf)  # rlcap's vocabulary size
        # columns that are not the model's: a token it lacks, or a second copy of a shared id (start = end = pad):
        # -inf, so that every distribution rlcap computes is over the model's own vocabulary
        self.dead = torch.tensor([hf < 0 or self.from_hf[hf] != rl for rl, hf in enumerate(self.to_hf.tolist())])
        self.lacks = bool(self.dead.any())
        self._on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # (to_hf, dead) on each device used
        self.forbid(self.other_ends)  # (from_config: the end tokens rlcap does not end on)

    @classmethod
    def from_config(cls, config: Any, hf_size: int, tokenizer: Any = None) -> "TokenIds":
        """Each special token read as transformers reads it: the top-level config, then the text decoder's, then
        the tokenizer's (the unknown token: the configs'). The start token is the one the model begins a caption
        with (``decoder_start_token_id``, else ``bos_token_id``); the end token is a BERT-style decoder's
        ``sep_token_id`` when a config declares one (BLIP ends captions with [SEP], as its ``generate`` does),
        else ``eos_token_id``. A model without a pad token gets none (rlcap's PAD is then never written nor
        read: a column of its own, -inf).

        A config may declare a list of end tokens (GLM-4.1V's ``[<|endoftext|>, <|user|>, <|observation|>]``,
        Gemma 3's): ``generate()`` stops on any. rlcap's decoding ends on one, so its EOS is the tokenizer's own
        ``eos_token_id`` where the list holds it, else the list's first; the others are ``other_ends``, tokens
        rlcap never writes (-inf, and suppressed in an export whose ``generate()`` then ends on rlcap's EOS alone,
        as rlcap's decoding does), so that a caption has one end and its probability is not split between two."""
        text = config.get_text_config()

        def values(name: str, sources: tuple[Any, ...]) -> list[Any]:
            return [v for v in (getattr(source, name, None) for source in sources if source is not None)
                    if v is not None]

        def read(name: str, sources: tuple[Any, ...] = (config, text, tokenizer)) -> int | None:
            return next((int(v) for v in values(name, sources)), None)

        start = read("decoder_start_token_id", (config, text))
        start = start if start is not None else read("bos_token_id")
        end, other_ends = read("sep_token_id", (config, text)), []
        if end is None:
            declared = next(iter(values("eos_token_id", (config, text, tokenizer))), None)
            ends = [int(i) for i in declared] if isinstance(declared, (list, tuple)) else \
                [] if declared is None else [int(declared)]
            own = tokenizer.eos_token_id if tokenizer is not None else None
            end = own if own in ends else next(iter(ends), None)
            other_ends = [i for i in ends if i != end]
        if start is None:  # a model that answers after a prompt (Qwen2-VL): rlcap's BOS stands for the prompt's end
            start = read("pad_token_id")
        if start is None or end is None:
            raise RlcapError(f"{type(config).__name__}: no start or end token in its config or tokenizer "
                             "(decoder_start_token_id / bos_token_id, sep_token_id / eos_token_id)")
        # (unk from the configs only, as rlcap always read it: a checkpoint's ids stay the ones it was trained with)
        return cls(start, end, read("pad_token_id"), read("unk_token_id", (config, text)), hf_size, other_ends)

    def forbid(self, hf_ids: Iterable[int]) -> None:
        """Never write these model tokens (-inf: a vision-language model's image placeholder, which its forward
        replaces by image features wherever it stands)."""
        for hf in hf_ids:
            if hf in self.from_hf:
                self.dead[self.from_hf[hf]] = True
        self.lacks = bool(self.dead.any())
        self._on.clear()

    def _index(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._on:
            self._on[device] = (self.to_hf.to(device), self.dead.to(device))
        return self._on[device]

    def hf_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """rlcap ids -> the model's (a token it lacks becomes its end token: never a real input)."""
        out = self._index(ids.device)[0][ids]
        return torch.where(out < 0, self.end, out) if self.lacks else out

    def rlcap_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V_hf) -> (..., V) in rlcap's order; -inf for a token the model lacks and for the second copy of
        a shared id, so that each of the model's tokens is counted once."""
        index, dead = self._index(logits.device)
        out = logits.index_select(-1, index.clamp(min=0))
        return out.masked_fill(dead, float("-inf")) if self.lacks else out

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "pad": self.pad, "unk": self.unk, "hf_size": self.hf_size,
                "other_ends": list(self.other_ends)}


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
        config, _ = captioner_config(folder)
        tokenizer, ids = tokenizer_ids(folder, config, config.get_text_config().vocab_size)  # (its LM head's size)
        return cls(tokenizer.backend_tokenizer.to_str(), ids, tokenizer.all_special_ids)

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


def captioner_config(folder: str | Path) -> tuple[Any, Any]:
    """The config and the model class of the transformers captioner saved in ``folder``; a folder that is not
    there, or holds no captioner (a vision-only or text-only model writes no text), refused in one line. Read once
    per config.json (its path, size and time): building a policy asks it several times (which kind of policy, its
    tokenizer's ids, its codec); each caller gets its own copy of the config."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise RlcapError(f"{folder}: no such folder; model.arch=hf reads a captioner from a local folder that "
                         "save_pretrained wrote (nothing is downloaded)")
    path = folder.resolve() / "config.json"
    try:
        stat = path.stat()
        key: tuple[Any, ...] = (str(path), stat.st_size, stat.st_mtime_ns)
    except OSError:
        key = (str(path),)  # (no config.json: _read_config says so)
    config, model_class = _read_config(folder, key)
    return copy.deepcopy(config), model_class


@functools.lru_cache(maxsize=16)
def _read_config(folder: Path, key: tuple[Any, ...]) -> tuple[Any, Any]:
    """:func:`captioner_config`'s read (``key``: config.json's path, size and time, what the cache is keyed on)."""
    transformers = import_transformers("model.arch=hf")
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        architecture = config.architectures[0]
        model_class = getattr(transformers, architecture)
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise RlcapError(f"{folder}: not a transformers model folder with a config.json naming its architecture "
                         f"({exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not model_class.can_generate():
        raise RlcapError(f"{folder}: a {architecture} is not a captioner, it writes no text; model.arch=hf takes a "
                         "captioner (VisionEncoderDecoder, BLIP, GIT) or a vision-language model (Qwen2-VL, ...)")
    return config, model_class


def tokenizer_ids(folder: str | Path, config: Any, hf_size: int) -> tuple[Any, TokenIds]:
    """The fast tokenizer saved in ``folder`` and the model's token ids (:meth:`TokenIds.from_config`), refused in
    one line when the tokenizer is not the model's: missing (transformers then builds an empty BertTokenizer),
    of another size than the output layer, or without the config's special tokens among its own."""
    transformers = import_transformers("model.arch=hf")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise RlcapError(f"{folder}: cannot load its tokenizer ({str(exc).splitlines()[0]})") from None
    if not tokenizer.is_fast:
        raise RlcapError(f"{folder}: its tokenizer has no fast (tokenizers) version, which rlcap reads")
    ids = TokenIds.from_config(config, hf_size, tokenizer)
    size = len(tokenizer)
    # (an output layer may be padded past its tokenizer, by a few rows: a tokenizer a tenth smaller is another's)
    if size > hf_size or size < 0.9 * hf_size:
        raise RlcapError(f"{folder}: its tokenizer has {size} tokens and the model's output layer {hf_size}: the "
                         "folder lacks the model's own tokenizer files (tokenizer.json, vocab.txt or vocab.json "
                         "with its tokenizer_config.json); copy them from where the model came from")
    specials = set(tokenizer.all_special_ids)
    for name, token in (("start", ids.start), ("end", ids.end), ("pad", ids.pad)):
        if token is not None and token not in specials:
            word = tokenizer.convert_ids_to_tokens(token)
            raise RlcapError(f"{folder}: the config's {name} token {token} is {word!r} in its tokenizer, not one of "
                             f"its special tokens {sorted(specials)}: the tokenizer is not this model's")
    return tokenizer, ids


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
