"""Validation during training: the beam-search captions of the validation split scored by CIDEr-D and by
the run's ``val.metric`` (one of score_captions' metrics, or one that rlcap.metrics.combined combines from
them). A split's captions scored (:func:`score_predictions`) are also what ``rlcap eval`` and the benchmarks report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, NamedTuple

import torch

from rlcap.data.loader import CaptionData, SplitData
from rlcap.data.vocab import Vocab
from rlcap.decoding.options import Decoding
from rlcap.decoding.split import decode_split
from rlcap.devices import Precision
from rlcap.distributed import Ranks, whole_weights
from rlcap.metrics.combined import with_combined
from rlcap.metrics.hallucination import ObjectTruth
from rlcap.metrics.scoring import score_captions
from rlcap.run_config import ValConfig


class Evaluation(NamedTuple):
    predictions: dict[str, str]          # image id -> caption
    corpus: dict[str, float]             # metric -> corpus score
    per_image: dict[str, dict[str, float]]


def score_predictions(split: SplitData, predictions: dict[str, str], metrics: Sequence[str],
                      objects: ObjectTruth | None = None) -> Evaluation:
    """Score predictions against the split's raw references (pycocoevalcap conventions); ``objects``: the
    pictures' objects, for CHAIR and coverage (:mod:`rlcap.metrics.hallucination`)."""
    refs = {i: r for i, r in zip(split.ids, split.refs) if i in predictions}
    report = score_captions(refs, {i: [c] for i, c in predictions.items()}, list(metrics), objects=objects)
    return Evaluation(predictions, dict(report.corpus), dict(report.per_image))


def evaluate_split(model: torch.nn.Module, split: SplitData, vocab: Vocab, decoding: Decoding,
                   metrics: Sequence[str], batch_size: int = 100, limit: int = 0, progress: bool = False) -> Evaluation:
    predictions = decode_split(model, split, vocab, decoding, batch_size, limit, progress)
    return score_predictions(split, predictions, metrics)


def validation_scores(corpus_of: Callable[[list[str]], dict[str, float]], metric: str) -> dict[str, float]:
    """CIDEr-D (always: the logs and tables read it) and ``metric``, with the parts of a combined one
    (:data:`rlcap.metrics.combined.COMBINED`). ``corpus_of(names)`` scores the validation captions by
    score_captions' metrics ``names``."""
    return with_combined(corpus_of, list(dict.fromkeys(("CIDEr", metric))))


def validate(model: torch.nn.Module, data: CaptionData, v: ValConfig, decoding: Decoding,
             ranks: Ranks = Ranks(), precision: Precision = Precision()) -> dict[str, float] | None:
    """Validation scores of the beam-search captions of ``v.split``: CIDEr-D (pycocoevalcap's,
    document frequencies from the validation references) and ``v.metric``, decoded by ``decoding`` (the run's:
    ``session.decoding``) in the run's ``precision`` (as ``rlcap eval`` decodes its checkpoints).

    Under torchrun every rank decodes its share of the batches and rank 0 scores them all (the other
    ranks get None: the session sends them rank 0's scores)."""
    split = data.splits[v.split]
    with whole_weights(model):  # (FSDP2: each rank decodes batches of its own, as many as it has)
        predictions = decode_split(model, split, data.vocab, decoding, batch_size=v.batch_size, limit=v.max_images,
                                   ranks=ranks, precision=precision)
    if not ranks.main:
        return None
    return validation_scores(lambda names: dict(score_predictions(split, predictions, names).corpus), v.metric)
