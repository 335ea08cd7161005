"""The caption metrics as rewards: CIDEr-D, CIDEr, BLEU-n, ROUGE-L and METEOR (SPICE and SPIDEr: spice_rewards.py).

Each reward tokenizes the captions with :func:`rlcap.metrics.tokenize.tokenize` (the
pycocoevalcap tokenization the vocabulary also uses) and returns per-caption scores on the
metric's own scale (CIDEr-D as pycocoevalcap, x10 included, and plain CIDEr on that scale; the
others in [0, 1]).

EOS convention (``RewardConfig.eos_counts``, docs/RL.md): when set, :data:`EOS_TOKEN` is
appended to the candidate's tokens and to every reference's tokens before CIDEr-D and BLEU
score them, as self-critical.pytorch scores its id strings with the trailing 0 (it computes
exactly these two). The end then forms n-grams ("dog <eos>") that a caption cut short
("a dog on a") does not match. ROUGE-L, METEOR and SPICE score the plain words: their
alignments would count the lone end token of an empty caption as a match (ROUGE-L would give
"" about 0.36 against a three-word reference). An empty caption (EOS first) scores as the
metric scores ``[]`` (or ``[EOS_TOKEN]``): 0 for CIDEr-D (the end token is in every
reference, so its idf is 0), 0 for ROUGE-L, METEOR and SPICE.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from rlcap.errors import ConfigError, DataError, RlcapError
from rlcap.metrics.bleu import bleu_stats, sentence_bleu
from rlcap.metrics.cider_reward import CiderD
from rlcap.metrics.meteor import Meteor
from rlcap.metrics.rouge import rouge_l
from rlcap.metrics.tokenize import tokenize
from rlcap.rewards.batch import RewardBatch, TrainRefs, check_batch, with_eos
from rlcap.rewards.context import RewardContext



class _RefTokens:
    """Tokenized references, memoised by their text (a batch repeats each image n times)."""

    def __init__(self, eos_counts: bool):
        self.eos_counts = eos_counts
        self._memo: dict[tuple[str, ...], list[list[str]]] = {}

    def __call__(self, refs: Sequence[str]) -> list[list[str]]:
        key = tuple(refs)
        if key not in self._memo:
            self._memo[key] = [with_eos(tokenize(r), self.eos_counts) for r in refs]
        return self._memo[key]


def _tensor(values: Sequence[float] | np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, dtype=np.float32))


def tokenize_references(train_refs: TrainRefs, eos_counts: bool) -> dict[str, list[list[str]]]:
    """Image id -> tokenized reference captions (plus the end token when EOS counts)."""
    out = {}
    for image_id, captions in train_refs.items():
        if isinstance(captions, str) or not all(isinstance(c, str) for c in captions):
            raise DataError(f"references of image {image_id!r}: expected a list of caption strings, "
                            f"got {captions!r:.80}")
        out[str(image_id)] = [with_eos(tokenize(c), eos_counts) for c in captions]
    return out


class CiderDReward:
    """CIDEr-D against the training references, document frequencies computed once.

    ``train_refs`` maps each training image id to its raw reference captions; they are
    tokenized here. Scores each caption against the references of ``batch.image_ids[i]`` in
    that set (an id without references raises DataError); ``batch.refs`` is not used.
    ``plain``: plain CIDEr instead (reward ``cider``: no clipping, no length penalty, the same
    document frequencies and x10 scale; :meth:`rlcap.metrics.CiderD.score`).
    """

    def __init__(self, train_refs: TrainRefs, eos_counts: bool, cache: Path | None = None, plain: bool = False):
        self.eos_counts, self.plain = eos_counts, plain
        self.scorer = CiderD.from_references(tokenize_references(train_refs, eos_counts), cache=cache)

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        tokens = [with_eos(tokenize(c), self.eos_counts) for c in captions]
        return _tensor(self.scorer.score(tokens, batch.image_ids, plain=self.plain))


class BleuReward:
    """Per-caption BLEU-n as pycocoevalcap computes it (``bleu_list[n-1]``, closest ref length)."""

    def __init__(self, n: int, eos_counts: bool):
        if n not in (1, 2, 3, 4):
            raise ValueError(f"BleuReward: n must be 1..4, got {n}")
        self.n = n
        self.eos_counts = eos_counts
        self._refs = _RefTokens(eos_counts)

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        return _tensor([
            sentence_bleu(bleu_stats(with_eos(tokenize(c), self.eos_counts), self._refs(refs)))[self.n - 1]
            for c, refs in zip(captions, batch.refs)
        ])


class RougeLReward:
    """Per-caption ROUGE-L (LCS F-measure, beta 1.2) as pycocoevalcap computes it; plain words."""

    def __init__(self) -> None:
        self._refs = _RefTokens(eos_counts=False)

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        return _tensor([rouge_l(tokenize(c), self._refs(refs)) for c, refs in zip(captions, batch.refs)])


class MeteorReward:
    """Per-caption METEOR 1.5 from one long-lived Java process (:class:`rlcap.metrics.meteor.Meteor`).

    Scores the plain tokenized words: METEOR aligns words (stems, synonyms), and an artificial
    end token would only be an unmatched word. Call :meth:`close` to stop the process.
    """

    def __init__(self) -> None:
        self.meteor = Meteor()
        self._refs = _RefTokens(eos_counts=False)

    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        cands = [" ".join(tokenize(c)) for c in captions]
        refs = [[" ".join(r) for r in self._refs(refs)] for refs in batch.refs]
        _, per_caption = self.meteor.score(cands, refs)
        return _tensor(per_caption)

    def close(self) -> None:
        self.meteor.close()


def cider_cache(ctx: RewardContext) -> Path | None:
    if ctx.cache_dir is None:
        return None
    # One file per EOS convention: the two reference sets have different n-grams.
    return Path(ctx.cache_dir) / ("cider_d_eos.npz" if ctx.eos_counts else "cider_d.npz")


def make_bleu(ctx: RewardContext, n: int) -> BleuReward:
    return BleuReward(n, ctx.eos_counts)


def make_bleu_1(ctx: RewardContext) -> BleuReward:
    return make_bleu(ctx, 1)


def make_bleu_2(ctx: RewardContext) -> BleuReward:
    return make_bleu(ctx, 2)


def make_bleu_3(ctx: RewardContext) -> BleuReward:
    return make_bleu(ctx, 3)


def make_bleu_4(ctx: RewardContext) -> BleuReward:
    return make_bleu(ctx, 4)


def make_meteor(ctx: RewardContext) -> MeteorReward:
    try:
        return MeteorReward()
    except RlcapError as exc:
        raise ConfigError(f"reward 'meteor' is not available: {exc}") from exc


def make_rouge_l(ctx: RewardContext) -> RougeLReward:
    return RougeLReward()
