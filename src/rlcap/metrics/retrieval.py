"""Cross-modal retrieval metrics from an image-text similarity matrix (numpy only), ties shared fairly.

``similarity`` is (I, C): image i against caption c. ``caption_image`` (C,) gives the image
index of each caption, so an image may have several captions. Text-to-image: each caption
retrieves its image among all images. Image-to-text: each image retrieves its best-ranked
caption among all captions (as VSE++ and CLIP evaluations do); images without a caption are
skipped.

**Ties.** Two items tie for a query when their scores are exactly equal (compared as float64; a
float32 matrix converts exactly, so it is compared as it is, without a copy). A caption written
word for word like another gets an identical embedding row, hence identical scores, so a captioner
that repeats itself makes ties in image-to-text retrieval. The rank is the one the right item takes
when every group of tied items is put in a uniformly random order, and R@k is the *probability*
that it lands in the top k, not a 0/1 count. For a query, let

- h   = the wrong items scored strictly above the best right score,
- m_w = the wrong items scored exactly the best right score,
- m_r = the right items scored exactly the best right score (at least 1; right items scored
  lower never come first).

The first right item in the shuffled tied block of m_w + m_r sits at position J, negative
hypergeometric: J > j when the first j positions all hold wrong items, so with j = k - h free
places in the top k,

    P(rank <= k) = 0                                   if j <= 0
                 = 1 - C(m_w, j) / C(m_w + m_r, j)     otherwise (1 once j > m_w).

The expected rank is 1 + h + m_w / (m_r + 1); the median rank (``MedR``) is the median over the
queries of their expected ranks and ``MRR`` the mean of their reciprocals (1 / E[rank], not
E[1 / rank]). Text-to-image has one right item (m_r = 1, m = m_w): P(rank <= k) =
clip((k - h) / (m + 1), 0, 1), the rank uniform on h + 1 .. h + 1 + m, expected 1 + h + m / 2.
Without ties (m_w = 0) every query's R@k is 0 or 1 and its rank 1 + h, the strict rule.

Why: [Chaffin24 sec. 4.1] reads R@k as the distinctiveness of the generated captions. Counting only the
items scored strictly higher resolved every tie in the query's favour, so a captioner that wrote
one caption for all N images had image-to-text R@1 = 100; under this rule it has 100 / N.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rlcap.errors import DataError

RECALL_AT = (1, 5, 10)
BLOCK_ROWS = 256  # image rows compared at a time: (256, C) boolean temporaries, not (I, C)


class Ties(NamedTuple):
    """Per query (Q,): the counts that set its rank's distribution (module docstring)."""

    higher: np.ndarray  # (Q,) h: wrong items scored strictly above the best right score
    wrong_tied: np.ndarray  # (Q,) m_w: wrong items scored exactly the best right score
    right_tied: np.ndarray  # (Q,) m_r >= 1: right items scored exactly the best right score


def retrieval_metrics(similarity: np.ndarray, caption_image: np.ndarray) -> dict[str, float]:
    """R@1, R@5, R@10 (in %), median rank and MRR, for "t2i" and "i2t", ties shared fairly
    (module docstring). ``similarity`` (I, C), ``caption_image`` (C,) image index of each caption."""
    sim = np.asarray(similarity)
    if sim.dtype.kind != "f":
        sim = sim.astype(np.float64)
    owner = np.asarray(caption_image, dtype=np.int64)  # (C,)
    if sim.ndim != 2 or owner.shape != (sim.shape[1],):
        raise DataError(f"similarity must be (images, captions) with one image index per caption; got {sim.shape} and {owner.shape}")
    if owner.size == 0:
        raise DataError("similarity has no caption columns: nothing to retrieve")
    if owner.min() < 0 or owner.max() >= sim.shape[0]:
        raise DataError(f"caption_image holds indices outside 0..{sim.shape[0] - 1}")
    if not (np.isfinite(sim.min()) and np.isfinite(sim.max())):  # min and max carry any NaN, no (I, C) temporary
        raise DataError("similarity holds NaN or infinite scores; expected finite numbers")
    out: dict[str, float] = {}
    for name, ties in (("t2i", text_to_image_ties(sim, owner)), ("i2t", image_to_text_ties(sim, owner))):
        for k in RECALL_AT:
            out[f"{name}_R@{k}"] = float(100.0 * np.mean(recall_probability(ties, k)))
        ranks = expected_rank(ties)
        out[f"{name}_MedR"] = float(np.median(ranks))
        out[f"{name}_MRR"] = float(np.mean(1.0 / ranks))
    return out


def expected_ranks(similarity: np.ndarray) -> dict[str, np.ndarray]:
    """Each query's expected rank (ties shared, module docstring) when caption k belongs to image k (one
    generated caption per image): ``"t2i"`` (C,) the rank of caption k's image, ``"i2t"`` (I,) the rank of
    image k's caption. The per-caption view of :func:`retrieval_metrics` (``rlcap report``'s gallery)."""
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
        raise DataError(f"expected_ranks needs one caption per image, a square matrix; got {sim.shape}")
    owner = np.arange(sim.shape[1])
    return {"t2i": expected_rank(text_to_image_ties(sim, owner)), "i2t": expected_rank(image_to_text_ties(sim, owner))}


def text_to_image_ties(sim: np.ndarray, owner: np.ndarray) -> Ties:
    """Each caption (C queries) against all images; its own image is the one right item."""
    right = sim[owner, np.arange(sim.shape[1])]  # (C,) score of each caption's own image
    higher = np.zeros(sim.shape[1], dtype=np.int64)
    equal = np.zeros(sim.shape[1], dtype=np.int64)
    for start in range(0, sim.shape[0], BLOCK_ROWS):
        block = sim[start:start + BLOCK_ROWS]  # (b, C)
        higher += np.count_nonzero(block > right, axis=0)
        equal += np.count_nonzero(block == right, axis=0)
    return Ties(higher, equal - 1, np.ones_like(higher))  # the own image is among the equal ones


def image_to_text_ties(sim: np.ndarray, owner: np.ndarray) -> Ties:
    """Each image that owns a caption (Q queries, in image order) against all captions; its own
    captions are the right items, and only those at its best own score can come first."""
    right = sim[owner, np.arange(sim.shape[1])]  # (C,)
    best = np.full(sim.shape[0], -np.inf)
    np.maximum.at(best, owner, right)  # (I,) each image's best own-caption score
    images = np.unique(owner)  # (Q,) the images that own a caption
    right_tied = np.bincount(owner[right == best[owner]], minlength=sim.shape[0])[images]
    best = best[images]
    higher = np.empty(len(images), dtype=np.int64)
    equal = np.empty(len(images), dtype=np.int64)
    for start in range(0, len(images), BLOCK_ROWS):
        rows = slice(start, start + BLOCK_ROWS)
        block = sim[images[rows]]  # (b, C)
        higher[rows] = np.count_nonzero(block > best[rows, None], axis=1)
        equal[rows] = np.count_nonzero(block == best[rows, None], axis=1)
    return Ties(higher, equal - right_tied, right_tied)


def recall_probability(ties: Ties, k: int) -> np.ndarray:
    """(Q,) P(rank <= k): with j = k - h free places, 1 - C(m_w, j) / C(m_w + m_r, j), the chance
    that the first right item of the shuffled tied block is among its first j (0 when j <= 0)."""
    free = k - ties.higher  # (Q,) j
    total = ties.wrong_tied + ties.right_tied  # (Q,) size of the tied block
    all_wrong = np.ones(len(free))  # (Q,) P(the first min(j, t) places of the block are all wrong)
    for t in range(k):
        # the (t+1)-th place is wrong given the first t were: (m_w - t) / (m_w + m_r - t); 0 once t >= m_w
        step = np.maximum(ties.wrong_tied - t, 0) / np.maximum(total - t, 1)
        all_wrong = np.where(t < free, all_wrong * step, all_wrong)
    return np.where(free > 0, 1.0 - all_wrong, 0.0)


def expected_rank(ties: Ties) -> np.ndarray:
    """(Q,) E[rank] = 1 + h + m_w / (m_r + 1): m_r right items split the m_w wrong ones into
    m_r + 1 gaps of equal expected size, and the first gap comes before the first right item."""
    return 1.0 + ties.higher + ties.wrong_tied / (ties.right_tied + 1.0)
