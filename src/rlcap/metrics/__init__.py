"""Caption metrics: pycocoevalcap's tokenizer, BLEU, METEOR, ROUGE-L, CIDEr-D, SPICE, SPIDEr,
diversity and retrieval metrics, and the fast CIDEr-D reward scorer. No torch in here."""

from rlcap.metrics.cider_reward import CiderD
from rlcap.metrics.evaluate import DEFAULT_METRICS, METRIC_NAMES, METRICS, ScoreReport, score_captions
from rlcap.metrics.retrieval import retrieval_metrics
from rlcap.metrics.tokenize import tokenize

__all__ = [
    "CiderD",
    "DEFAULT_METRICS",
    "METRICS",
    "METRIC_NAMES",
    "ScoreReport",
    "retrieval_metrics",
    "score_captions",
    "tokenize",
]
