"""CIDEr-D as pycocoevalcap's ``Cider`` computes it (the evaluation version, plain Python).

Vedantam et al. 2015 with the "D" changes: tf-idf vectors of 1..4-grams, the candidate's
values clipped to the reference's (``min(cand, ref)``), a Gaussian length penalty
``exp(-delta^2 / (2 sigma^2))`` with sigma = 6, the mean over n and references, times 10.
Document frequencies come from the references being evaluated, one document per image, and
``log(number of images)`` plays the role of the log document count.

pycocoevalcap measures "length" as the number of bigrams (``max(len - 1, 0)``): its
``counts2vec`` adds term frequencies ``if n == 1`` with n the 0-based order. Kept for parity.
This module is the readable reference; :mod:`rlcap.metrics.cider_reward` is the fast scorer
and is tested against it.

:func:`cider` is Vedantam et al.'s original CIDEr with the same tf-idf vectors: CIDEr_n is the
mean over references of the plain cosine (no clipping), averaged over n = 1..4, with no length
penalty. pycocoevalcap's x10 is kept so that CIDEr and CIDEr-D read on one scale.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from rlcap.metrics.ngrams import Ngram, ngram_counts

MAX_N = 4
SIGMA = 6.0


class TfIdf(NamedTuple):
    vec: list[dict[Ngram, float]]  # (4,) one dict of tf-idf values per order
    norm: list[float]  # (4,)
    length: int  # number of bigrams, as pycocoevalcap


def document_frequencies(refs: Sequence[Sequence[Sequence[str]]]) -> Counter[Ngram]:
    """In how many images' references each n-gram appears (one document per image)."""
    df: Counter[Ngram] = Counter()
    for image_refs in refs:
        df.update({g for ref in image_refs for g in ngram_counts(ref, MAX_N)})
    return df


def tfidf(counts: Counter[Ngram], df: Counter[Ngram], log_num_docs: float) -> TfIdf:
    vec: list[dict[Ngram, float]] = [{} for _ in range(MAX_N)]
    norm = [0.0] * MAX_N
    length = 0
    for ngram, tf in counts.items():
        n = len(ngram) - 1
        value = float(tf) * (log_num_docs - math.log(max(1.0, df[ngram])))
        vec[n][ngram] = value
        norm[n] += value * value
        if n == 1:
            length += tf
    return TfIdf(vec, [math.sqrt(x) for x in norm], length)


def similarity(cand: TfIdf, ref: TfIdf, sigma: float = SIGMA, plain: bool = False) -> list[float]:
    """Clipped cosine similarity per order, times the length penalty (``plain``: the plain
    cosine, no penalty)."""
    penalty = 1.0 if plain else math.exp(-((cand.length - ref.length) ** 2) / (2 * sigma**2))
    out = []
    for n in range(MAX_N):
        val = 0.0
        for ngram, value in cand.vec[n].items():
            ref_value = ref.vec[n].get(ngram, 0.0)
            val += (value if plain else min(value, ref_value)) * ref_value
        if cand.norm[n] != 0 and ref.norm[n] != 0:
            val /= cand.norm[n] * ref.norm[n]
        out.append(val * penalty)
    return out


def cider_d(
    cands: Sequence[Sequence[str]],
    refs: Sequence[Sequence[Sequence[str]]],
    df: Counter[Ngram] | None = None,
    log_num_docs: float | None = None,
) -> list[float]:
    """CIDEr-D of each tokenized caption against its references (an empty caption scores 0).

    ``df``/``log_num_docs`` default to those of ``refs`` itself, as pycocoevalcap does.
    """
    return _mean_similarity(cands, refs, df, log_num_docs, plain=False)


def cider(
    cands: Sequence[Sequence[str]],
    refs: Sequence[Sequence[Sequence[str]]],
    df: Counter[Ngram] | None = None,
    log_num_docs: float | None = None,
) -> list[float]:
    """Plain CIDEr (Vedantam et al. 2015: no clipping, no length penalty; x10 as CIDEr-D) of each
    tokenized caption against its references; ``df``/``log_num_docs`` as in :func:`cider_d`."""
    return _mean_similarity(cands, refs, df, log_num_docs, plain=True)


def _mean_similarity(cands: Sequence[Sequence[str]], refs: Sequence[Sequence[Sequence[str]]],
                     df: Counter[Ngram] | None, log_num_docs: float | None, plain: bool) -> list[float]:
    """10 * mean over references and orders of :func:`similarity`, per caption."""
    if df is None:
        df = document_frequencies(refs)
    if log_num_docs is None:
        log_num_docs = math.log(float(len(refs)))
    scores = []
    for cand, image_refs in zip(cands, refs, strict=True):
        cand_vec = tfidf(ngram_counts(cand, MAX_N), df, log_num_docs)
        total = [0.0] * MAX_N
        for ref in image_refs:
            sims = similarity(cand_vec, tfidf(ngram_counts(ref, MAX_N), df, log_num_docs), plain=plain)
            total = [t + s for t, s in zip(total, sims)]
        scores.append(sum(total) / MAX_N / len(image_refs) * 10.0)
    return scores
