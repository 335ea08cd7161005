"""Validation during training: the beam-search captions of the validation split scored by CIDEr-D and by
the run's ``val.metric`` (one of score_captions' metrics, or one that rlcap.metrics.combined combines from
them). A split's captions scored (:func:`score_predictions`) are also what ``rlcap eval`` and the benchmarks report.

With them, the caption table a run sends its trackers at each validation (``track.captions``, :func:`caption_rows`):
the first N pictures of the validation split, each with its greedy caption, that caption's scores against the
picture's references and one reference, so that a template or a hallucination shows at the epoch it starts, beside
the curves."""

from __future__ import annotations

import functools
import io
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, NamedTuple, Protocol

import torch

from rlcap.data.hf_datasets import Columns
from rlcap.data.loader import CaptionData, SplitData
from rlcap.data.vocab import Vocab
from rlcap.decoding.options import Decoding
from rlcap.decoding.split import decode_split
from rlcap.devices import Precision
from rlcap.distributed import Ranks, whole_weights
from rlcap.metrics.combined import with_combined
from rlcap.metrics.hallucination import ObjectTruth
from rlcap.metrics.scoring import score_captions
from rlcap.run_config import RunConfig, ValConfig
from rlcap.track.base import CaptionRow
from rlcap.train.checkpoint import POLICY

log = logging.getLogger(__name__)


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


TABLE_METRICS = ("CIDEr", "Bleu_4")  # per caption: CIDEr-D, and BLEU-4 (no Java, no spaCy)


class Captioning(Protocol):
    """What the table reads of a run's session (rlcap.train.session.Session)."""

    parts: dict[str, Any]
    data: CaptionData
    cfg: RunConfig
    decoding: Decoding
    precision: Precision


def caption_table(session: Captioning) -> Callable[[], list[CaptionRow]]:
    """:func:`caption_rows` for the run's logger, built when it asks (rank 0, ``track.captions`` on and a tracker
    open); built now on every process where the policy is sharded (FSDP2: its decoding gathers the weights, a
    collective every process takes part in) and the run's settings ask for a table."""
    if POLICY in session.parts and session.parts[POLICY].sharded and session.cfg.track.captions \
            and session.cfg.track.to:
        rows = caption_rows(session)
        return lambda: rows
    return lambda: caption_rows(session)


def caption_rows(session: Captioning) -> list[CaptionRow]:
    """The table's rows: the first ``track.captions`` images of ``val.split``, captioned greedily by the policy (one
    process; none for a session without a policy).
    Scores are CIDEr-D and BLEU-4 of each caption against its picture's references, the document frequencies those
    of the N pictures' references (so a CIDEr-D here is not the validation's: it compares epochs, not runs)."""
    if POLICY not in session.parts:
        return []
    model, data, cfg = session.parts[POLICY].module, session.data, session.cfg
    split = data.splits[cfg.val.split]
    count = min(cfg.track.captions, len(split.ids))
    predictions = decode_split(model, split, data.vocab, session.decoding.as_greedy(), batch_size=cfg.val.batch_size,
                               limit=count, precision=session.precision)
    ids = list(split.ids[:count])
    refs = {i: list(r) for i, r in zip(ids, split.refs[:count])}
    per_image = score_captions(refs, {i: [predictions[i]] for i in ids}, list(TABLE_METRICS)).per_image
    d = cfg.data
    pictures = _pictures(d.dataset, d.format, d.coco_splits, d.columns(), cfg.val.split, tuple(ids))
    return [CaptionRow(i, pictures.get(i), predictions[i],
                       {("CIDEr-D" if k == "CIDEr" else k): float(per_image[i][k]) for k in TABLE_METRICS},
                       refs[i][0] if refs[i] else "") for i in ids]


@functools.lru_cache(maxsize=4)
def _pictures(dataset: str, fmt: str, coco_splits: str | None, columns: Columns, split: str,
              ids: tuple[str, ...]) -> dict:
    """id -> the picture (a PIL image, 256 pixels at most a side) of each of ``ids`` the dataset holds a readable one
    for; read once per run (the same pictures at every validation)."""
    from PIL import Image

    from rlcap.data.embedded import read_picture_bytes
    from rlcap.data.media import frame_strip, is_video
    from rlcap.data.readers import raw_captions, read_dataset

    path = Path(dataset)
    with raw_captions():
        records = {r.id: r for r in read_dataset(path, fmt, coco_splits, columns)
                   if r.split == split and r.id in ids}
    folder = path if path.is_dir() else path.parent
    found = {}
    for i, record in records.items():
        source = record.image if record.image is not None else (folder / record.filename if record.filename else None)
        if source is None:
            continue
        try:
            if is_video(source):  # a clip: four of its frames side by side
                found[i] = frame_strip(source, height=128)
                found[i].thumbnail((256, 256))
                continue
            with Image.open(io.BytesIO(read_picture_bytes(source))) as image:
                image.thumbnail((256, 256))
                found[i] = image.convert("RGB")
        except (OSError, ValueError) as exc:  # a missing or unreadable picture or clip: a row without one
            log.warning("caption table: no picture for %s (%s)", i, exc)
    return found
