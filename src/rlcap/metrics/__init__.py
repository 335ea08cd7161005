"""Caption metrics: pycocoevalcap's tokenizer, BLEU, METEOR, ROUGE-L, CIDEr-D, SPICE (Python port or official jar), SPIDEr,
diversity and retrieval metrics, and the fast CIDEr-D reward scorer. No torch in here."""

from rlcap.metrics.cider_reward import CiderD
from rlcap.metrics.scoring import (
    DEFAULT_METRICS,
    METRIC_NAMES,
    METRICS,
    PYCOCOEVALCAP_METRICS,
    ScoreReport,
    default_metrics,
    score_captions,
)
from rlcap.metrics.retrieval import retrieval_metrics
from rlcap.metrics.tokenize import tokenize, tokenize_lines

__all__ = [
    "CiderD",
    "DEFAULT_METRICS",
    "METRICS",
    "METRIC_NAMES",
    "PYCOCOEVALCAP_METRICS",
    "ScoreReport",
    "default_metrics",
    "retrieval_metrics",
    "score_captions",
    "tokenize",
    "tokenize_lines",
]
