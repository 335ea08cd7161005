"""CIDEr-D (or plain CIDEr) scored from sampled token ids on their device, with no host synchronisation.

:class:`CiderDDeviceReward` gives the scores of :class:`rlcap.rewards.metric_rewards.CiderDReward` on
the strings ``vocab.decode(ids)``, without making those strings: the references' tables live on the
device (:class:`rlcap.rewards.cider_tensors.CiderDTensors`) and the token ids are turned into the
scorer's words there, by tables built once from the vocabulary (:class:`CaptionWords`).

Reproducing decode + tokenize on ids, word by word (:func:`caption_words`):

- ``Vocab.decode`` stops at the first EOS or PAD, skips BOS and joins the other words with spaces;
  UNK is the word ``<unk>``, which :func:`rlcap.metrics.tokenize.tokenize` reads as three tokens
  ``< unk >``.
- ``tokenize`` works on each whitespace-separated chunk, so a vocabulary word gives the tokens that
  tokenize gives it alone: zero ("-", punctuation), one, or several ("cannot" -> "can not"). Each
  word's tokens are taken from ``tokenize`` itself when the vocabulary is read.
- a chunk's tokens also depend on the chunk after it (PTBLexer looks ahead): "no." keeps its period
  only before a number, a single letter "n." loses it before a sentence starter ("The"), and the
  caption's last chunk is followed by tokenize's default next line "A", a sentence starter. So each
  word has its tokens for each of the three kinds of follower, and the kind of the next word (or of
  the end) picks them. A word with no characters that tokenize reads (empty, or only characters
  outside the Basic Multilingual Plane) makes no chunk: it is skipped, like BOS.

With ``eos_counts``, the end token follows the caption's last token, as :func:`rewards.batch.with_eos`
appends it. Scores are computed in float64, as the CPU reward computes them, and returned as float32.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from rlcap.data.vocab import BOS, EOS, PAD, Vocab
from rlcap.errors import ConfigError, DataError
from rlcap.host_sync import to_device
from rlcap.rewards.cider_tensors import CiderDTensors
from rlcap.metrics.tokenize import tokenize
from rlcap.rewards.batch import EOS_TOKEN, RewardBatch, TrainRefs
from rlcap.rewards.context import RewardContext
from rlcap.rewards.metric_rewards import CiderDReward, cider_cache

log = logging.getLogger(__name__)

# What tokenize reads in the chunk after a word: a plain word, a number, or a sentence starter
# ("The"; also the end of the caption, where tokenize's default next line "A" follows).
PLAIN, DIGIT, STARTER = 0, 1, 2
_FOLLOWER_TEXT = ("x", "1", "A")  # a next line of each kind, for tokenize(word, next_line=...)
_KEPT_IMAGE_LISTS = 4


@dataclass(frozen=True)
class CaptionWords:
    """What decode + tokenize make of each vocabulary id, as tensors indexed by that id (V words).

    Scorer word ids: a token known to the references has its id there; any other token an id
    >= the scorer's vocabulary size, one per distinct token.
    """

    tokens: torch.Tensor  # (V, 3, K) long: scorer ids of the word's tokens before each kind of follower
    counts: torch.Tensor  # (V, 3) long: how many of those K slots are tokens
    kind: torch.Tensor  # (V,) long: PLAIN, DIGIT or STARTER, what the word is to the word before it
    skipped: torch.Tensor  # (V,) bool: BOS and blank words: no token, and the next word follows instead
    stop: torch.Tensor  # (V,) bool: EOS and PAD, where decode ends the caption
    end_word: int  # scorer id of the end token appended after the caption; -1: none is appended
    names: tuple[str, ...]  # the token of each scorer id: the references' words, then the vocabulary's others

    @classmethod
    def build(cls, vocab: Vocab, scorer_words: Sequence[str], eos_counts: bool) -> CaptionWords:
        """The tables for ``vocab`` against a scorer whose word ``i`` is ``scorer_words[i]``."""
        index = {w: i for i, w in enumerate(scorer_words)}

        def word_id(token: str) -> int:  # tokens absent from the references: fresh ids, one per token
            return index.setdefault(token, len(index))

        size = len(vocab)
        per_word = [[[] for _ in _FOLLOWER_TEXT] for _ in range(size)]
        kind = np.full(size, PLAIN, dtype=np.int64)
        skipped = np.zeros(size, dtype=bool)
        for i, word in enumerate(vocab.itos):
            if i in (PAD, BOS, EOS):
                skipped[i] = i == BOS
                continue
            if _is_blank(word):
                skipped[i] = True
                continue
            per_word[i] = [[word_id(t) for t in tokenize(word, follower)] for follower in _FOLLOWER_TEXT]
            kind[i] = _follower_kind(word)
        width = max(1, max(len(t) for word in per_word for t in word))
        tokens = np.zeros((size, len(_FOLLOWER_TEXT), width), dtype=np.int64)
        counts = np.zeros((size, len(_FOLLOWER_TEXT)), dtype=np.int64)
        for i, word in enumerate(per_word):
            for k, toks in enumerate(word):
                tokens[i, k, : len(toks)] = toks
                counts[i, k] = len(toks)
        stop = np.zeros(size, dtype=bool)
        stop[[PAD, EOS]] = True
        end_word = word_id(EOS_TOKEN) if eos_counts else -1
        return cls(torch.as_tensor(tokens), torch.as_tensor(counts), torch.as_tensor(kind),
                   torch.as_tensor(skipped), torch.as_tensor(stop), end_word, tuple(index))

    def to(self, device: torch.device) -> CaptionWords:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return CaptionWords(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in moved.items()})


def _is_blank(word: str) -> bool:
    """True when tokenize sees no chunk in ``word``: it drops characters outside the Basic Multilingual
    Plane (as PTBLexer does) and splits on whitespace."""
    return not "".join(c for c in word if ord(c) < 0x10000).split()


def _follower_kind(word: str) -> int:
    """How ``word`` reads to tokenize as the chunk after another: found by asking tokenize, on the two
    chunks whose tokens depend on it ("no." keeps its period before a number; "n." loses it before a
    sentence starter)."""
    if tokenize("no. " + word)[0] == "no.":
        return DIGIT
    if tokenize("n. " + word)[0] == "n":
        return STARTER
    return PLAIN


def caption_words(tokens: torch.Tensor, table: CaptionWords) -> tuple[torch.Tensor, torch.Tensor]:
    """The scorer words of each caption, as ``with_eos(tokenize(vocab.decode(ids)))`` gives them.

    tokens: (N, T) long vocabulary ids, each in [0, V) of the vocabulary ``table`` was built from.
    Returns words (N, T * K + 1) long scorer word ids (those past a caption's length are meaningless;
    K: the most tokens one word gives) and lengths (N,) long. Fixed shapes: no host synchronisation.
    """
    if tokens.shape[1] == 0:
        tokens = tokens.new_full((tokens.shape[0], 1), EOS)  # no ids: an empty caption
    batch, steps = tokens.shape
    width = table.tokens.shape[2]
    position = torch.arange(steps, device=tokens.device)
    alive = torch.cumsum(table.stop[tokens].long(), dim=1) == 0  # (N, T) before the first EOS or PAD
    real = alive & ~table.skipped[tokens]  # (N, T) words that make chunks
    # the kind of chunk after each position: the next real word's, or the end's (a sentence starter)
    kinds = torch.cat([torch.where(real, table.kind[tokens], STARTER),
                       tokens.new_full((batch, 1), STARTER)], dim=1)  # (N, T + 1)
    marks = torch.where(real | ~alive, position, steps)  # (N, T): where a next chunk, or the end, is
    after = torch.cat([marks[:, 1:], marks.new_full((batch, 1), steps)], dim=1)
    follower = after.flip(1).cummin(dim=1).values.flip(1)  # (N, T) first mark after each position
    context = tokens * len(_FOLLOWER_TEXT) + kinds.gather(1, follower)  # (N, T) row of (word, follower)
    counts = table.counts.view(-1)[context] * real  # (N, T) tokens each position gives
    slots = table.tokens.view(-1, width)[context].view(batch, steps * width)  # (N, T * K)
    # compact: output place p holds slot p - start of the position t whose tokens cover p
    ends = torch.cumsum(counts, dim=1)  # (N, T)
    lengths = ends[:, -1]
    place = torch.arange(steps * width + 1, device=tokens.device).expand(batch, -1).contiguous()  # (N, T*K+1)
    owner = torch.searchsorted(ends, place, right=True).clamp(max=steps - 1)  # (N, T * K + 1)
    within = (place - ends.gather(1, owner) + counts.gather(1, owner)).clamp(0, width - 1)
    out = slots.gather(1, owner * width + within)
    if table.end_word >= 0:
        out = torch.where(place == lengths[:, None], table.end_word, out)
        lengths = lengths + 1
    return out, lengths


class CiderDDeviceReward:
    """CIDEr-D against the training references, scored from token ids on their device.

    Builds the CPU scorer as :class:`CiderDReward` does (same tokenized references, same cache
    file), then its tables on ``device`` and the vocabulary's word tables. :meth:`score_tokens`
    scores sampled ids with no host synchronisation; calling the reward on strings scores them
    with the CPU scorer, so that it is also an ordinary reward. ``plain``: plain CIDEr.
    """

    def __init__(self, train_refs: TrainRefs, vocab: Vocab, eos_counts: bool, cache: Path | None = None,
                 plain: bool = False, device: torch.device | str = "cpu"):
        if not isinstance(vocab, Vocab):
            raise ConfigError(f"CIDEr-D on the device reads rlcap's word vocabulary (rlcap.data.vocab.Vocab), "
                              f"got {type(vocab).__name__}: use the CPU reward for this captioner")
        self.device = torch.empty(0, device=device).device  # "cuda" -> "cuda:0", as tensors report it
        if self.device.type == "mps":
            raise ConfigError("CIDEr-D on the device computes in float64, which mps does not have: "
                              "score CIDEr-D on the CPU there")
        self.eos_counts, self.plain = eos_counts, plain
        self.cpu = CiderDReward(train_refs, eos_counts, cache=cache, plain=plain)
        self.tables = CiderDTensors.from_scorer(self.cpu.scorer, self.device)
        scorer_words = [str(w) for w in self.cpu.scorer.arrays["vocab"]]
        self.word_table = CaptionWords.build(vocab, scorer_words, eos_counts).to(self.device)
        self._row_of = {image_id: row for row, image_id in enumerate(self.cpu.scorer.image_ids)}
        self._rows: dict[tuple[str, ...], torch.Tensor] = {}

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        return self.cpu(captions, batch)

    def score_tokens(self, tokens: torch.Tensor, image_ids: Sequence[str]) -> torch.Tensor:
        """(N,) float32 scores on ``tokens``' device of the captions ``tokens`` (N, T) (vocabulary ids,
        each caption ending at its first EOS or PAD, if any), caption i against ``image_ids[i]``'s
        references."""
        if tokens.dim() != 2 or tokens.shape[0] != len(image_ids):
            raise ValueError(f"score_tokens: tokens of shape {tuple(tokens.shape)} for {len(image_ids)} "
                             "image ids (expected (len(image_ids), T))")
        if tokens.device != self.device:
            raise ValueError(f"score_tokens: tokens on {tokens.device}, the reward's tables on {self.device}")
        words, lengths = caption_words(tokens.long(), self.word_table)
        scores = self.tables.score(words, lengths, self._image_rows(image_ids), plain=self.plain)
        return scores.to(torch.float32)

    def _image_rows(self, image_ids: Sequence[str]) -> torch.Tensor:
        """(N,) long rows of the images in the scorer, on the device. The last few lists are kept: a
        step scores its samples, and often a baseline's captions, against the same images every call."""
        key = tuple(str(i) for i in image_ids)
        if key not in self._rows:
            try:
                rows = np.fromiter((self._row_of[i] for i in key), dtype=np.int64, count=len(key))
            except KeyError as exc:
                raise DataError(f"image id {exc.args[0]!r} has no references in the CIDEr-D scorer") from None
            if len(self._rows) >= _KEPT_IMAGE_LISTS:
                self._rows.clear()
            self._rows[key] = to_device(torch.from_numpy(rows), self.device)
        return self._rows[key]


def make_cider_d(ctx: RewardContext, plain: bool = False):
    """CIDEr-D against the training references: on the CPU, or from the token ids on the run's GPU
    (on a CUDA run; rlcap.rewards.cider_device: the same values, no transfer of the tokens)."""
    device = ctx.cider_device()
    if device != "cpu":
        if isinstance(ctx.vocab, Vocab) or ctx.metric_device == "cuda":  # (a transformers tokenizer: refused there)
            return CiderDDeviceReward(ctx.train_refs, ctx.vocab, ctx.eos_counts, cache=cider_cache(ctx), plain=plain,
                                      device=device)
        log.info("the CIDEr-D reward stays on the CPU (it reads words of a word vocabulary, "
                 "and this run's is a transformers tokenizer's)")
    return CiderDReward(ctx.train_refs, ctx.eos_counts, cache=cider_cache(ctx), plain=plain)


def make_cider(ctx: RewardContext):
    """Plain CIDEr: the CIDEr-D scorer's tables (and cache file), scored without clipping or length penalty."""
    return make_cider_d(ctx, plain=True)
