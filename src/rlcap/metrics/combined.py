"""Corpus scores combined from :func:`~rlcap.metrics.scoring.score_captions`' corpus scores: SPIDEr and
BCMR, which a run can keep best/ by (``val.metric``).

SPIDEr is (CIDEr-D + SPICE) / 2 ([Liu17]), what score_captions' SPIDEr is. BCMR is [Liu17]'s weighted sum of
BLEU-4, CIDEr-D, METEOR and ROUGE-L with :data:`BCMR_WEIGHTS` (the bcmr reward's weights too, over its per
caption scores), here of their corpus scores with pycocoevalcap's conventions (corpus BLEU-4, CIDEr-D without
the end token)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from rlcap.metrics.spider import spider

# BCMR's parts (score_captions' names) and their weights. The summary of [Liu17] we hold names the four metrics
# but not their weights: equal weights, the simplest choice that favours no metric by design.
BCMR_WEIGHTS: dict[str, float] = {"Bleu_4": 1.0, "CIDEr": 1.0, "METEOR": 1.0, "ROUGE_L": 1.0}


class Combined(NamedTuple):
    parts: tuple[str, ...]                          # the score_captions metrics it is computed from
    combine: Callable[[Mapping[str, float]], float]  # their corpus scores -> the combined score
    help: str                                        # what it is, for val.metric's help


def _spider(corpus: Mapping[str, float]) -> float:
    return spider(corpus["CIDEr"], corpus["SPICE"])


def _bcmr(corpus: Mapping[str, float]) -> float:
    return math.fsum(weight * corpus[name] for name, weight in BCMR_WEIGHTS.items())


COMBINED: dict[str, Combined] = {
    "SPIDEr": Combined(("CIDEr", "SPICE"), _spider, "(CIDEr + SPICE) / 2"),
    "BCMR": Combined(tuple(BCMR_WEIGHTS), _bcmr, " + ".join(BCMR_WEIGHTS) + ", the corpus scores summed"),
}


def parts_of(metric: str) -> tuple[str, ...]:
    """The score_captions metrics ``metric`` is computed from: its parts when it is combined, else itself (what a
    run validating by it needs: METEOR's Java for BCMR too)."""
    return COMBINED[metric].parts if metric in COMBINED else (metric,)


def with_combined(corpus_of: Callable[[list[str]], dict[str, float]], names: Sequence[str]) -> dict[str, float]:
    """The corpus scores ``names``, each one of score_captions' metrics or of :data:`COMBINED` (computed from its
    parts, which are returned too). ``corpus_of(metrics)`` scores the captions by score_captions' ``metrics``,
    called once with each metric asked for once, in the order first named."""
    asked = [part for name in names for part in parts_of(name)]
    scores = corpus_of(list(dict.fromkeys(asked)))
    for name in names:
        if name in COMBINED:
            scores[name] = COMBINED[name].combine(scores)
    return scores
