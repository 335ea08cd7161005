"""BLEU-1..4 as pycocoevalcap computes it (``Bleu(4)``, effective reference length "closest").

Corpus BLEU sums clipped matches and lengths over all captions before the geometric mean;
per-caption BLEU uses the same formula on one caption, with pycocoevalcap's smoothing
constants (``tiny = 1e-15`` added to matches, ``small = 1e-9`` to guesses), so a caption with
no match scores about 0 rather than raising.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from rlcap.metrics.ngrams import Ngram, ngram_counts

MAX_N = 4
_TINY = 1e-15
_SMALL = 1e-9


class BleuStats(NamedTuple):
    """Sufficient statistics of one caption against its references."""

    testlen: int
    reflen: int  # the reference length closest to testlen (the shorter one on ties)
    guess: tuple[int, ...]  # (4,) number of candidate n-grams
    correct: tuple[int, ...]  # (4,) clipped matches


def closest_length(testlen: int, ref_lengths: Sequence[int]) -> int:
    return min((abs(length - testlen), length) for length in ref_lengths)[1]


def bleu_stats_from_counts(
    cand: Sequence[str], cand_counts: Counter[Ngram], max_ref_counts: dict[Ngram, int], reflen: int
) -> BleuStats:
    correct = [0] * MAX_N
    for ngram, count in cand_counts.items():
        correct[len(ngram) - 1] += min(max_ref_counts.get(ngram, 0), count)
    guess = tuple(max(0, len(cand) - k + 1) for k in range(1, MAX_N + 1))
    return BleuStats(len(cand), reflen, guess, tuple(correct))


def bleu_stats(cand: Sequence[str], refs: Sequence[Sequence[str]]) -> BleuStats:
    """Statistics of ``cand`` (tokens) against ``refs`` (token lists, at least one)."""
    max_counts: dict[Ngram, int] = {}
    for ref in refs:
        for ngram, count in ngram_counts(ref, MAX_N).items():
            max_counts[ngram] = max(max_counts.get(ngram, 0), count)
    reflen = closest_length(len(cand), [len(r) for r in refs])
    return bleu_stats_from_counts(cand, ngram_counts(cand, MAX_N), max_counts, reflen)


def _bleu_from_totals(
    testlen: float, reflen: float, guess: Sequence[float], correct: Sequence[float]
) -> list[float]:
    scores = []
    product = 1.0
    for k in range(MAX_N):
        product *= (correct[k] + _TINY) / (guess[k] + _SMALL)
        scores.append(product ** (1.0 / (k + 1)))
    ratio = (testlen + _TINY) / (reflen + _SMALL)
    if ratio < 1:  # brevity penalty
        scores = [s * math.exp(1 - 1 / ratio) for s in scores]
    return scores


def sentence_bleu(stats: BleuStats) -> list[float]:
    """BLEU-1..4 of one caption (pycocoevalcap's per-image scores)."""
    return _bleu_from_totals(stats.testlen, stats.reflen, stats.guess, stats.correct)


def corpus_bleu(all_stats: Sequence[BleuStats]) -> list[float]:
    """BLEU-1..4 of a corpus: matches and lengths summed over captions first."""
    guess = [sum(s.guess[k] for s in all_stats) for k in range(MAX_N)]
    correct = [sum(s.correct[k] for s in all_stats) for k in range(MAX_N)]
    testlen = sum(s.testlen for s in all_stats)
    reflen = sum(s.reflen for s in all_stats)
    return _bleu_from_totals(testlen, reflen, guess, correct)


def bleu(
    cands: Sequence[Sequence[str]], refs: Sequence[Sequence[Sequence[str]]]
) -> tuple[list[float], list[list[float]]]:
    """Corpus BLEU-1..4 and per-caption BLEU-1..4 of tokenized captions.

    Returns ``(corpus (4,), per_caption (N, 4))``; ``cands[i]`` is scored against ``refs[i]``.
    """
    stats = [bleu_stats(c, r) for c, r in zip(cands, refs, strict=True)]
    return corpus_bleu(stats), [sentence_bleu(s) for s in stats]
