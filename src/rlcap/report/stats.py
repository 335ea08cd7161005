"""The report's figures computed from captions: diversity at a glance, the gallery's sample, the best cells."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Sequence

from rlcap.metrics.diversity import template, vocabulary_size
from rlcap.report.collect import System

# Columns where lower is better (retrieval ranks, Self-BLEU, mBLEU-4: the sets' sameness; the template share;
# hallucination: CHAIR, the colour error)
LOWER_IS_BETTER = {"Self-BLEU", "rs mBLEU-4", "bs mBLEU-4", "MedR", "Template", "CHAIR_i", "CHAIR_s", "Colour-err"}


def diversity(captions: Sequence[str], top: int = 5, n: int = 4) -> dict[str, Any]:
    """Distinct captions, vocabulary used, the most frequent captions, the most repeated ``n``-grams across
    captions, the share of captions that repeat a word pair within themselves ("a red circle and a red"), and the
    template share: the share of captions that hold the most held 4-gram (:func:`rlcap.metrics.diversity.template`,
    the `Template` metric, on the captions' words as written)."""
    words = [c.split() for c in captions]
    gram, share = template(words, n)
    grams = Counter(tuple(w[i:i + n]) for w in words for i in range(len(w) - n + 1))
    inner = sum(1 for w in words if len(set(zip(w, w[1:]))) < max(len(w) - 1, 0))
    return {
        "captions": len(captions),
        "distinct": len(set(captions)),
        "vocabulary": vocabulary_size(words),
        "mean_words": sum(map(len, words)) / max(len(words), 1),
        "frequent": Counter(captions).most_common(top),
        "ngrams": [(" ".join(g), k) for g, k in grams.most_common(top)],
        "self_repeating": inner / max(len(words), 1),
        "template": " ".join(gram) if gram is not None else "",
        "template_share": share if words else 0.0,
    }


def best_cells(systems: list[System], columns: list[str], source: str = "metrics") -> dict[str, str]:
    """Column -> the name of the trained system best in it (reference captioners are not candidates)."""
    out = {}
    for col in columns:
        scored = [(getattr(s, source)[col], s.name) for s in systems if not s.reference and col in getattr(s, source)]
        if len(scored) > 1:
            out[col] = (min if col in LOWER_IS_BETTER else max)(scored)[1]
    return out


def gallery_ids(ids: Sequence[str], systems: list[System], sample: int, seed: int, everything: bool,
                extremes: int = 6, metric: str = "CIDEr") -> tuple[list[str], dict[str, str]]:
    """The images the gallery shows, and why each is there.

    All ``ids`` with ``everything``; otherwise a seeded sample of ``sample`` plus, for the first trained system
    against each other one, the ``extremes`` images where the other gained most and lost most in per-caption
    ``metric`` (so that "where SCST beat XE most" sorts real extremes, not a sample's)."""
    if everything:
        return list(ids), {i: "all" for i in ids}
    chosen = random.Random(seed).sample(list(ids), min(sample, len(ids)))
    why = {i: "sample" for i in chosen}
    trained = [s for s in systems if not s.reference and s.per_image]
    for other in trained[1:]:
        base = trained[0]
        both = [i for i in ids if metric in base.per_image.get(i, {}) and metric in other.per_image.get(i, {})]
        gain = sorted(both, key=lambda i: other.per_image[i][metric] - base.per_image[i][metric])
        for i in gain[-extremes:][::-1]:
            why.setdefault(i, f"{other.name} gained most over {base.name}")
        for i in gain[:extremes]:
            why.setdefault(i, f"{other.name} lost most against {base.name}")
    return list(why), why
