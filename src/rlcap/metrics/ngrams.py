"""N-gram counting shared by BLEU, CIDEr-D and the diversity metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

Ngram = tuple[str, ...]


def ngram_counts(tokens: Sequence[str], max_n: int = 4) -> Counter[Ngram]:
    """Counts of every n-gram of ``tokens`` for n = 1..max_n (pycocoevalcap's ``precook``)."""
    counts: Counter[Ngram] = Counter()
    for n in range(1, max_n + 1):
        for i in range(len(tokens) - n + 1):
            counts[tuple(tokens[i : i + n])] += 1
    return counts
