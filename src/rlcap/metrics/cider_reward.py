"""Fast CIDEr-D for training rewards: references prepared once, batches scored with numpy.

Same values as :func:`rlcap.metrics.cider.cider_d` (pycocoevalcap's CIDEr-D) given the same
document frequencies: here they come from the training references, one document per image.
``score(..., plain=True)`` gives plain CIDEr (:func:`rlcap.metrics.cider.cider`) from the same tables.

How it is fast:
- every n-gram gets an integer id. Order 1 is the word id; an n-gram of order n is the pair
  (id of its first n-1 words, id of its last word) packed into one int64, and the sorted array
  of the references' packed keys turns it into an id with ``np.searchsorted``. A whole batch
  is hashed at once, with no Python loop over n-grams.
- the references are a sorted array of ``image * G + ngram_id`` keys (one row per distinct
  n-gram of an image) with the term frequency of each reference caption in that row, so one
  more ``searchsorted`` finds every candidate n-gram in its image's references.
- reference norms and lengths are precomputed; sums per caption are ``np.bincount``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlcap.errors import DataError

log = logging.getLogger(__name__)

MAX_N = 4
SIGMA = 6.0
_WORD_BITS = 23  # word ids < 2**23; n-gram ids < 2**40 so (prefix << 23 | word) fits int64
_CACHE_VERSION = 1


@dataclass(frozen=True)
class _Ngrams:
    """Distinct n-grams of a batch of captions, one row per (caption, n-gram)."""

    caption: np.ndarray  # (M,) int64 caption index
    order: np.ndarray  # (M,) int64, 0..3 for 1..4-grams
    gid: np.ndarray  # (M,) int64 global n-gram id, -1 when absent from the references
    tf: np.ndarray  # (M,) int64 term frequency in the caption


class CiderD:
    """CIDEr-D scorer with document frequencies and reference vectors prepared once.

    >>> scorer = CiderD.from_references({"1": [["a", "dog"], ["a", "cat"]]})
    >>> scorer.score([["a", "dog"]], ["1"]).shape
    (1,)
    """

    def __init__(self, arrays: dict[str, np.ndarray], fingerprint: str) -> None:
        self.arrays = arrays
        self.fingerprint = fingerprint
        self.image_ids: list[str] = [str(i) for i in arrays["image_ids"]]
        self._image_index = {image_id: i for i, image_id in enumerate(self.image_ids)}
        self._vocab = {str(w): i for i, w in enumerate(arrays["vocab"])}
        self._level_keys = [arrays[f"keys_{n}"] for n in range(2, MAX_N + 1)]
        self.log_num_docs = float(arrays["log_num_docs"])

    # ---------------------------------------------------------------- building and caching
    @classmethod
    def from_references(
        cls, refs: Mapping[str, Sequence[Sequence[str]]], cache: Path | None = None
    ) -> CiderD:
        """Scorer for ``refs`` ({image id: tokenized reference captions}).

        With ``cache``, a cache built from the same references is loaded instead of rebuilt,
        and a new one is written there otherwise.
        """
        fingerprint = references_fingerprint(refs)
        if cache is not None and Path(cache).exists():
            scorer = cls.load(Path(cache))
            if scorer.fingerprint == fingerprint:
                return scorer
            log.warning("CIDEr-D cache %s was built from other references; rebuilding", cache)
        scorer = cls(_build_arrays(refs), fingerprint)
        if cache is not None:
            scorer.save(Path(cache))
        return scorer

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = json.dumps({"version": _CACHE_VERSION, "fingerprint": self.fingerprint})
        with open(path, "wb") as f:  # a file object: np.savez would append ".npz" to a name
            np.savez(f, meta=np.array(meta), **self.arrays)
        log.info("saved CIDEr-D cache for %d images to %s", len(self.image_ids), path)

    @classmethod
    def load(cls, path: Path) -> CiderD:
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (OSError, ValueError) as exc:
            raise DataError(f"CIDEr-D cache {path}: not a readable .npz file ({exc})") from exc
        meta = json.loads(str(arrays.pop("meta")))
        if meta["version"] != _CACHE_VERSION:
            raise DataError(f"CIDEr-D cache {path}: version {meta['version']}, expected {_CACHE_VERSION}")
        return cls(arrays, meta["fingerprint"])

    def document_frequency(self, ngram: Sequence[str]) -> int:
        """Number of reference images whose captions contain ``ngram`` (0 if none)."""
        grams = _ngrams_of(self, [list(ngram)], np.zeros(1, dtype=np.int64))
        hit = (grams.order == len(ngram) - 1) & (grams.gid >= 0)
        return int(self.arrays["df"][grams.gid[hit]][0]) if hit.any() else 0

    # ---------------------------------------------------------------- scoring
    def score(self, candidates: Sequence[Sequence[str] | str], image_ids: Sequence[str],
              plain: bool = False) -> np.ndarray:
        """CIDEr-D of each candidate against its image's references, shape (B,) float64.

        ``candidates`` are token lists, or strings of space-separated tokens (already
        tokenized, as decoded from a vocabulary). ``image_ids`` may repeat (several samples
        per image). An empty candidate scores 0.

        ``plain``: Vedantam et al.'s CIDEr instead, with the same document frequencies: the
        mean over references of the cosine of the tf-idf vectors, averaged over n = 1..4,
        with no clipping of the candidate's values and no length penalty (the x10 is kept, so
        that the two read on one scale; :func:`rlcap.metrics.cider.cider` is its reference).
        """
        if len(candidates) != len(image_ids):
            raise DataError(f"{len(candidates)} candidates but {len(image_ids)} image ids")
        batch = len(candidates)
        images = self._image_indices(image_ids)
        tokens = [c.split() if isinstance(c, str) else c for c in candidates]
        grams = _ngrams_of(self, tokens, np.arange(batch, dtype=np.int64))
        a = self.arrays
        idf = np.full(len(grams.gid), self.log_num_docs)
        known = grams.gid >= 0
        idf[known] = a["idf"][grams.gid[known]]
        vec = grams.tf * idf  # (M,) candidate tf-idf values
        slot = grams.caption * MAX_N + grams.order
        norm = np.sqrt(np.bincount(slot, vec * vec, minlength=batch * MAX_N)).reshape(batch, MAX_N)
        numerator = self._dot(grams, vec, idf, images, batch, clip=not plain)  # (B, R, 4)

        ref_norm = a["ref_norms"][images]  # (B, R, 4)
        denom = norm[:, None, :] * ref_norm
        safe = np.where(denom != 0, denom, 1.0)
        sims = numerator / safe  # pycocoevalcap divides only when both norms are non-zero
        lengths = np.array([max(len(t) - 1, 0) for t in tokens], dtype=np.float64)  # bigrams
        delta = lengths[:, None] - a["ref_lengths"][images]  # (B, R)
        gauss = np.ones_like(delta) if plain else np.exp(-(delta**2) / (2 * SIGMA**2))
        penalty = gauss * a["ref_mask"][images]  # (B, R), 0 at missing references
        per_ref = sims.sum(axis=2) / MAX_N * penalty  # (B, R)
        return per_ref.sum(axis=1) / a["num_refs"][images] * 10.0

    def _image_indices(self, image_ids: Sequence[str]) -> np.ndarray:
        index = self._image_index
        try:
            return np.fromiter((index[str(i)] for i in image_ids), dtype=np.int64, count=len(image_ids))
        except KeyError as exc:
            raise DataError(f"image id {exc.args[0]!r} has no references in the CIDEr-D scorer") from None

    def _dot(
        self, grams: _Ngrams, vec: np.ndarray, idf: np.ndarray, images: np.ndarray, batch: int, clip: bool
    ) -> np.ndarray:
        """sum_g min(cand_g, ref_g) * ref_g (``clip``; else sum_g cand_g * ref_g) for every
        (caption, reference, order): (B, R, 4)."""
        a = self.arrays
        table_keys, table_tf = a["table_keys"], a["table_tf"]
        num_refs_max = table_tf.shape[1]
        known = np.flatnonzero(grams.gid >= 0)
        keys = images[grams.caption[known]] * len(a["idf"]) + grams.gid[known]
        rows = _search_sorted(table_keys, keys)
        hit = table_keys[rows] == keys
        known, rows = known[hit], rows[hit]
        ref_vec = table_tf[rows].astype(np.float64) * idf[known, None]  # (F, R)
        clipped = (np.minimum(vec[known, None], ref_vec) if clip else vec[known, None]) * ref_vec
        slot = (grams.caption[known] * MAX_N + grams.order[known])[:, None] * num_refs_max
        flat = (slot + np.arange(num_refs_max)).ravel()
        sums = np.bincount(flat, clipped.ravel(), minlength=batch * MAX_N * num_refs_max)
        return sums.reshape(batch, MAX_N, num_refs_max).transpose(0, 2, 1)


def references_fingerprint(refs: Mapping[str, Sequence[Sequence[str]]]) -> str:
    """A hash of the references, to tell whether a cache was built from them."""
    digest = hashlib.sha1()
    for image_id, captions in refs.items():
        digest.update(str(image_id).encode() + b"\x1e")
        digest.update("\x1f".join(" ".join(c) for c in captions).encode() + b"\x1d")
    return digest.hexdigest()


def _word_ids(scorer_vocab: dict[str, int], tokens: Sequence[Sequence[str]]) -> np.ndarray:
    """Word ids of all tokens, flattened; words unknown to the references get fresh ids."""
    get = scorer_vocab.get
    ids = [get(w, -1) for caption in tokens for w in caption]
    words = np.array(ids, dtype=np.int64)
    unknown = np.flatnonzero(words < 0)
    if len(unknown):
        flat = [w for caption in tokens for w in caption]
        fresh: dict[str, int] = {}
        for i in unknown:
            words[i] = len(scorer_vocab) + fresh.setdefault(flat[i], len(fresh))
    if len(words) and words.max() >= 1 << _WORD_BITS:
        raise DataError(f"more than {1 << _WORD_BITS} distinct words: too many for CIDEr-D ids")
    return words


def _ngrams_of(scorer: CiderD, tokens: Sequence[Sequence[str]], caption_ids: np.ndarray) -> _Ngrams:
    """Distinct n-grams of each caption, with ids looked up in the scorer's references."""
    words = _word_ids(scorer._vocab, tokens)
    lookup = [None, *scorer._level_keys]
    return _count_ngrams(words, tokens, caption_ids, lookup, np.asarray(scorer.arrays["offsets"]))


def _count_ngrams(
    words: np.ndarray,
    tokens: Sequence[Sequence[str]],
    caption_ids: np.ndarray,
    level_keys: Sequence[np.ndarray | None],
    offsets: np.ndarray,
) -> _Ngrams:
    """Per-caption n-gram counts of a flattened batch (see the module docstring)."""
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    caption = np.repeat(caption_ids, lengths)  # (T,)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)  # (T,) start of each token's caption
    remaining = np.repeat(lengths, lengths) - (np.arange(len(words)) - starts)  # tokens left from here
    parts: list[tuple[np.ndarray, ...]] = []
    local = words  # order-1 ids are word ids; those >= the references' vocabulary are unknown
    num_known = int(offsets[1])
    for n in range(1, MAX_N + 1):
        if n > 1:
            count = max(len(words) - n + 1, 0)
            valid = np.flatnonzero(remaining[:count] >= n)
            keys = (local[valid] << _WORD_BITS) | words[valid + n - 1]
            local = np.full(count, -1, dtype=np.int64)
            local[valid], num_known = _lookup(keys, level_keys[n - 1])
        else:
            valid = np.arange(len(words))
        ids = local[valid]
        span = int(ids.max()) + 1 if len(ids) else 1
        pairs, tf = np.unique(caption[valid] * span + ids, return_counts=True)
        cap, lid = np.divmod(pairs, span)
        gid = np.where(lid < num_known, offsets[n - 1] + lid, -1)
        parts.append((cap, np.full(len(cap), n - 1), gid, tf))
    return _Ngrams(*(np.concatenate(column) for column in zip(*parts)))


def _lookup(keys: np.ndarray, known_keys: np.ndarray | None) -> tuple[np.ndarray, int]:
    """Ids of packed n-gram keys: their index among ``known_keys``, or fresh ids above them.

    With ``known_keys=None`` (building from references) every key is new.
    """
    if known_keys is None:
        uniq, inverse = np.unique(keys, return_inverse=True)
        return inverse.astype(np.int64), len(uniq)
    ids = _search_sorted(known_keys, keys)
    found = known_keys[ids] == keys if len(known_keys) else np.zeros(len(keys), dtype=bool)
    if not np.all(found):
        _, inverse = np.unique(keys[~found], return_inverse=True)
        ids[~found] = len(known_keys) + inverse
    return ids, len(known_keys)


def _search_sorted(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """``np.searchsorted`` with the needles sorted first (about twice as fast: numpy narrows
    each search with the previous answer), positions past the end set to 0."""
    order = np.argsort(needles)
    pos = np.empty(len(needles), dtype=np.int64)
    pos[order] = np.searchsorted(haystack, needles[order])
    pos[pos == len(haystack)] = 0
    return pos


def _build_arrays(refs: Mapping[str, Sequence[Sequence[str]]]) -> dict[str, np.ndarray]:
    """Vocabulary, n-gram ids, document frequencies and reference vectors of ``refs``."""
    image_ids = [str(i) for i in refs]
    if not image_ids:
        raise DataError("no references to build CIDEr-D document frequencies from")
    for image_id, captions in refs.items():
        if len(captions) == 0:
            raise DataError(f"image {image_id!r} has no reference captions")
    captions = [c for image_id in refs for c in refs[image_id]]
    image_of = np.repeat(np.arange(len(image_ids)), [len(refs[i]) for i in refs])
    slot_of = np.concatenate([np.arange(len(refs[i])) for i in refs]) if captions else np.zeros(0, np.int64)
    vocab: dict[str, int] = {}
    for caption in captions:
        for w in caption:
            vocab.setdefault(w, len(vocab))
    words = _word_ids(vocab, captions)
    keys_by_level, offsets = _reference_ngram_ids(words, captions)
    grams = _count_ngrams(words, captions, np.arange(len(captions)), [None, *keys_by_level], offsets)
    return _reference_tables(refs, image_ids, vocab, keys_by_level, offsets, grams, image_of, slot_of, captions)


def _reference_ngram_ids(words: np.ndarray, captions: Sequence[Sequence[str]]) -> tuple[list[np.ndarray], np.ndarray]:
    """Sorted packed keys of the references' 2..4-grams, and the id offset of each order."""
    lengths = np.fromiter((len(t) for t in captions), dtype=np.int64, count=len(captions))
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    remaining = np.repeat(lengths, lengths) - (np.arange(len(words)) - starts)
    keys_by_level: list[np.ndarray] = []
    sizes = [int(words.max()) + 1 if len(words) else 0]
    local = words
    for n in range(2, MAX_N + 1):
        count = max(len(words) - n + 1, 0)
        valid = np.flatnonzero(remaining[:count] >= n)
        keys = (local[valid] << _WORD_BITS) | words[valid + n - 1]
        uniq, inverse = np.unique(keys, return_inverse=True)
        local = np.full(count, -1, dtype=np.int64)
        local[valid] = inverse
        keys_by_level.append(uniq)
        sizes.append(len(uniq))
    return keys_by_level, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _reference_tables(
    refs: Mapping[str, Sequence[Sequence[str]]],
    image_ids: list[str],
    vocab: dict[str, int],
    keys_by_level: list[np.ndarray],
    offsets: np.ndarray,
    grams: _Ngrams,
    image_of: np.ndarray,
    slot_of: np.ndarray,
    captions: Sequence[Sequence[str]],
) -> dict[str, np.ndarray]:
    num_images, num_grams = len(image_ids), int(offsets[-1])
    num_refs_max = max((len(c) for c in refs.values()), default=1)
    if len(grams.tf) and grams.tf.max() > 255:
        raise DataError("a reference caption repeats one n-gram more than 255 times")
    table, inverse = np.unique(image_of[grams.caption] * num_grams + grams.gid, return_inverse=True)
    table_tf = np.zeros((len(table), num_refs_max), dtype=np.uint8)
    table_tf[inverse, slot_of[grams.caption]] = grams.tf
    df = np.bincount(table % max(num_grams, 1), minlength=num_grams)  # images per n-gram
    log_num_docs = np.log(float(num_images))
    idf = log_num_docs - np.log(np.maximum(1.0, df))
    vec = grams.tf * idf[grams.gid]
    slot = (image_of[grams.caption] * num_refs_max + slot_of[grams.caption]) * MAX_N + grams.order
    norms = np.bincount(slot, vec * vec, minlength=num_images * num_refs_max * MAX_N)
    norms = norms.reshape(num_images, num_refs_max, MAX_N)
    ref_lengths = np.zeros((num_images, num_refs_max))
    ref_lengths[image_of, slot_of] = [max(len(c) - 1, 0) for c in captions]
    mask = np.zeros((num_images, num_refs_max))
    mask[image_of, slot_of] = 1.0
    return {
        "image_ids": np.array(image_ids, dtype=str),
        "vocab": np.array(list(vocab), dtype=str),
        **{f"keys_{n}": keys_by_level[n - 2] for n in range(2, MAX_N + 1)},
        "offsets": offsets,
        "df": df,
        "idf": idf,
        "log_num_docs": np.array(log_num_docs),
        "table_keys": table,
        "table_tf": table_tf,
        "ref_norms": np.sqrt(norms),
        "ref_lengths": ref_lengths,
        "ref_mask": mask,
        "num_refs": mask.sum(axis=1),
    }
