"""CIDEr-D of captions given as word ids, computed with torch on the ids' device.

The numpy scorer :class:`rlcap.metrics.cider_reward.CiderD` needs the captions on the host; a
training step on a GPU would then wait for the sampled tokens every step. :class:`CiderDTensors`
holds the same reference tables on the device and scores a batch there with fixed-shape tensor
operations only: no value is read back on the host (no ``.item()``, ``nonzero``, boolean-mask
indexing or ``unique``), so the step's kernels keep being queued while it runs.

What changes against the numpy code, for fixed shapes:
- the distinct n-grams of a caption are found by sorting each caption's n-grams in its own row
  (``torch.sort`` along the caption: an (N, L) result, whatever the values), where the numpy code
  sorts the whole batch's into one array of value-dependent size (``np.unique``). An n-gram is
  packed into one int64 from the ranks of its words within the caption (< L, so four of them fit
  in 60 bits), equal n-grams become runs, and each run is counted once with its length as term
  frequency. (Comparing all pairs of n-grams, an (N, L, L) test per order, gives the same with
  about L / log L times the work and L times the memory.)
- an n-gram unknown to the references has no id here (the numpy code numbers them afresh): its
  packed ranks tell it apart within its caption, which is all that its term frequency needs. It
  takes idf ``log(num images)`` and counts in the candidate's norm, as in the numpy code, and
  matches no reference.
- the sorted key arrays end with a sentinel larger than any key, so that ``torch.searchsorted``
  always lands on a readable row.

Sums run in float64, as in the numpy code: the scores differ from its only by the rounding of sums
taken in another order.
This module is the only one in :mod:`rlcap.metrics` that imports torch; the package does not
import it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rlcap.metrics.cider_reward import _WORD_BITS, MAX_N, SIGMA, CiderD

_SENTINEL = torch.iinfo(torch.int64).max  # packed keys stay below 2**63 - 1: prefix ids < 2**40


@dataclass(frozen=True)
class CiderDTensors:
    """A :class:`CiderD` scorer's reference tables on one device.

    Words are the scorer's word ids (``scorer.arrays["vocab"]``); a word absent from the
    references has an id >= ``num_words``, and two different absent words have different ids.
    """

    num_words: int  # words with ids below are known to the references
    level_keys: tuple[torch.Tensor, ...]  # orders 2..4: (K_n + 1,) int64, sorted packed keys, sentinel last
    offsets: torch.Tensor  # (MAX_N + 1,) int64: global id of each order's first n-gram
    num_grams: int  # G, the references' distinct n-grams of all orders
    idf: torch.Tensor  # (G + 1,) float64, per global n-gram id; a last 0 that unknown n-grams index
    log_num_docs: float  # idf of an n-gram absent from the references
    table_keys: torch.Tensor  # (F + 1,) int64 sorted ``image * G + id`` of each image's n-grams, sentinel last
    table_tf: torch.Tensor  # (F + 1, R) uint8 term frequency in each reference caption; last row 0
    ref_norms: torch.Tensor  # (I, R, MAX_N) float64 norms of the references' tf-idf vectors
    ref_lengths: torch.Tensor  # (I, R) float64 reference lengths (tokens - 1)
    ref_mask: torch.Tensor  # (I, R) float64, 1 where the image has that reference
    num_refs: torch.Tensor  # (I,) float64

    @classmethod
    def from_scorer(cls, scorer: CiderD, device: torch.device | str) -> CiderDTensors:
        """The tables of ``scorer`` copied once to ``device`` (which must compute in float64)."""
        a = scorer.arrays

        def put(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
            return torch.as_tensor(np.ascontiguousarray(array)).to(device=device, dtype=dtype)

        def with_sentinel(keys: np.ndarray) -> torch.Tensor:
            return put(np.append(keys.astype(np.int64), np.int64(_SENTINEL)), torch.int64)

        table_tf = np.concatenate([a["table_tf"], np.zeros((1, a["table_tf"].shape[1]), np.uint8)])
        return cls(
            num_words=len(a["vocab"]),
            level_keys=tuple(with_sentinel(a[f"keys_{n}"]) for n in range(2, MAX_N + 1)),
            offsets=put(a["offsets"], torch.int64),
            num_grams=len(a["idf"]),
            idf=put(np.append(a["idf"], 0.0), torch.float64),
            log_num_docs=float(a["log_num_docs"]),
            table_keys=with_sentinel(a["table_keys"]),
            table_tf=put(table_tf, torch.uint8),
            ref_norms=put(a["ref_norms"], torch.float64),
            ref_lengths=put(a["ref_lengths"], torch.float64),
            ref_mask=put(a["ref_mask"], torch.float64),
            num_refs=put(a["num_refs"], torch.float64),
        )

    def score(self, words: torch.Tensor, lengths: torch.Tensor, image_rows: torch.Tensor,
              plain: bool = False) -> torch.Tensor:
        """CIDEr-D of each caption against its image's references: (N,) float64 on the words' device.

        words: (N, L) long scorer word ids; only the first ``lengths[i]`` of row i are read.
        lengths: (N,) long number of words of each caption (0: an empty caption, which scores 0).
        image_rows: (N,) long row of each caption's image in the scorer (``scorer.image_ids``).
        plain: plain CIDEr (no clipping, no length penalty), as :meth:`CiderD.score`.
        """
        batch, width = words.shape
        lengths, image_rows = lengths.long(), image_rows.long()
        numerator = words.new_zeros((batch, self.table_tf.shape[1], MAX_N), dtype=torch.float64)  # (N, R, 4)
        norm = words.new_zeros((batch, MAX_N), dtype=torch.float64)  # (N, 4)
        ranks = word_ranks(words)  # (N, L)
        bits = max(width.bit_length(), 1)  # ranks < 2**bits
        if MAX_N * bits > 62:
            raise ValueError(f"CIDEr-D on tensors: captions of {width} words, more than 2**15 - 1")
        packed = ranks  # (N, C) the n-gram starting at each position, packed from its words' ranks
        ids = torch.where((words >= 0) & (words < self.num_words), words, -1)  # order-1 ids are word ids
        for n in range(1, min(MAX_N, width) + 1):
            count = width - n + 1  # n-grams starting at 0..count-1
            if n > 1:
                packed = (packed[:, :count] << bits) | ranks[:, n - 1:]
                ids = self._ngram_ids(ids[:, :count], words[:, n - 1:], n)
            exists = torch.arange(count, device=words.device) + n <= lengths[:, None]  # (N, C)
            order, tf, keep = distinct_ngrams(torch.where(exists, packed, -1))
            local = ids.gather(1, order)  # (N, C) in sorted order from here on: the sums ignore order
            known = local >= 0
            gid = torch.where(known, self.offsets[n - 1] + local, self.num_grams)  # (N, C) global ids
            idf = torch.where(known, self.idf[gid], self.log_num_docs)
            vec = tf * idf * keep  # (N, C) tf-idf of each distinct n-gram, 0 elsewhere
            norm[:, n - 1] = (vec * vec).sum(dim=1).sqrt()
            numerator[:, :, n - 1] = self._dot(vec, idf, gid, known & keep, image_rows, clip=not plain)
        return self._combine(numerator, norm, lengths, image_rows, plain)

    def _ngram_ids(self, prefix: torch.Tensor, last: torch.Tensor, n: int) -> torch.Tensor:
        """Ids among the references' n-grams of (prefix id, last word) pairs, -1 where unknown.

        prefix: (N, C) ids of the first n-1 words at order n-1 (-1: unknown); last: (N, C) word ids.
        Packed as the numpy code packs them: ``prefix << 23 | last``.
        """
        known = (prefix >= 0) & (last >= 0) & (last < self.num_words)
        keys = (prefix.clamp(min=0) << _WORD_BITS) | last.clamp(min=0)
        table = self.level_keys[n - 2]
        pos = torch.searchsorted(table, keys)  # (N, C), at most the sentinel's index
        return torch.where(known & (table[pos] == keys), pos, -1)

    def _dot(self, vec: torch.Tensor, idf: torch.Tensor, gid: torch.Tensor, known: torch.Tensor,
             image_rows: torch.Tensor, clip: bool) -> torch.Tensor:
        """sum_g min(cand_g, ref_g) * ref_g (``clip``; else sum_g cand_g * ref_g) per caption and
        reference at one order: (N, R). vec, idf, gid, known: (N, C)."""
        keys = image_rows[:, None] * self.num_grams + gid  # (N, C)
        rows = torch.searchsorted(self.table_keys, keys)
        hit = known & (self.table_keys[rows] == keys)  # the n-gram is in some reference of the image
        ref_idf = torch.where(hit, idf, 0.0)  # a zero reference value adds nothing: cand, ref >= 0
        ref_vec = self.table_tf[rows] * ref_idf[:, :, None]  # (N, C, R) float64
        cand = vec[:, :, None]
        matched = torch.minimum(cand, ref_vec) if clip else cand
        return (matched * ref_vec).sum(dim=1)

    def _combine(self, numerator: torch.Tensor, norm: torch.Tensor, lengths: torch.Tensor,
                 image_rows: torch.Tensor, plain: bool) -> torch.Tensor:
        """Cosines, length penalty and the mean over references, as :meth:`CiderD.score`: (N,)."""
        denom = norm[:, None, :] * self.ref_norms[image_rows]  # (N, R, 4)
        sims = numerator / torch.where(denom != 0, denom, 1.0)  # pycocoevalcap divides only when both are non-zero
        delta = (lengths - 1).clamp(min=0).to(torch.float64)[:, None] - self.ref_lengths[image_rows]  # (N, R)
        gauss = torch.ones_like(delta) if plain else torch.exp(-(delta**2) / (2 * SIGMA**2))
        per_ref = sims.sum(dim=2) / MAX_N * gauss * self.ref_mask[image_rows]  # (N, R)
        return per_ref.sum(dim=1) / self.num_refs[image_rows] * 10.0


def word_ranks(words: torch.Tensor) -> torch.Tensor:
    """(N, L) long: each word's rank among the distinct words of its row (equal words, equal ranks; < L).

    words: (N, L) long. Small numbers that tell the words of one caption apart, so that four of
    them pack into one int64 whatever the word ids are.
    """
    ordered, order = torch.sort(words, dim=1, stable=True)
    new = torch.ones_like(ordered, dtype=torch.bool)
    new[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    rank = torch.cumsum(new, dim=1) - 1  # (N, L) dense rank in sorted order
    return torch.empty_like(rank).scatter_(1, order, rank)  # back to the words' places (a permutation)


def distinct_ngrams(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's distinct keys and how often each occurs, with fixed shapes.

    keys: (N, C) long, one packed n-gram per position, -1 where no n-gram exists.
    Returns order (N, C) long, the positions in sorted order (stable: equal keys keep their order);
    and, in that sorted order, tf (N, C) long, the number of equal keys (read where ``keep``), and
    keep (N, C) bool, the first of each run of equal existing keys: summing over ``keep`` visits
    each distinct n-gram once.
    """
    ordered, order = torch.sort(keys, dim=1, stable=True)
    count = keys.shape[1]
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    place = torch.arange(count, device=keys.device).expand_as(ordered)
    marks = torch.where(starts, place, count)  # (N, C) where runs start
    after = torch.cat([marks[:, 1:], marks.new_full((marks.shape[0], 1), count)], dim=1)
    next_start = after.flip(1).cummin(dim=1).values.flip(1)  # (N, C) start of the next run
    return order, next_start - place, starts & (ordered >= 0)
