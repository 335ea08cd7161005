"""Concept regions as feature vectors, and back.

A region is its concept's GloVe vector (50-d) followed by a one-hot of its part of speech (noun,
verb, adjective): 53 numbers. The pooled vector ``fc`` is the mean of the image's regions, as
``rlcap features`` takes the mean of its grid. :func:`nearest_concepts` inverts the encoding,
which lets a reference captioner read the scene from the feature store alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlcap.data.concepts.extract import POS_TAGS, Concept
from rlcap.data.concepts.glove import GLOVE_DIM, Glove

FEATURE_DIM = GLOVE_DIM + len(POS_TAGS)


def region_features(regions: Sequence[Concept], glove: Glove) -> np.ndarray:
    """(n, 53) float32: each region's word vector and part-of-speech one-hot."""
    att = np.zeros((len(regions), FEATURE_DIM), dtype=np.float32)
    for i, c in enumerate(regions):
        att[i, :GLOVE_DIM] = glove[c.word]
        att[i, GLOVE_DIM + POS_TAGS.index(c.pos)] = 1.0
    return att


def nearest_concepts(att: np.ndarray, words: Sequence[str], vectors: np.ndarray, chunk: int = 256) -> list[Concept]:
    """The concept of each region ``att`` (n, 53): the word of ``words`` whose vector (``vectors``,
    (V, 50)) has the highest cosine with the region's, and the part of speech of its one-hot
    (``chunk`` regions at a time, bounding the (chunk, V) similarity matrix)."""
    att = np.asarray(att, dtype=np.float32)
    if not len(att):
        return []
    table = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-8)  # (V, 50)
    query = att[:, :GLOVE_DIM]
    query = query / np.maximum(np.linalg.norm(query, axis=1, keepdims=True), 1e-8)       # (n, 50)
    best = np.concatenate([(query[i:i + chunk] @ table.T).argmax(axis=1)                 # (n,)
                           for i in range(0, len(query), chunk)])
    pos = att[:, GLOVE_DIM:].argmax(axis=1)                                               # (n,)
    return [Concept(words[b], POS_TAGS[p]) for b, p in zip(best.tolist(), pos.tolist())]
