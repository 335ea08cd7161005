"""``score_captions``: raw strings in, pycocoevalcap-named scores out.

Conventions (docs/METRICS.md): captions are tokenized with :func:`rlcap.metrics.tokenize`;
only the images of ``preds`` are scored and CIDEr-D's document frequencies come from their
references (as pycocoevalcap). With several predictions per image, the caption metrics use
the first one and the diversity metrics use all. An empty caption (or one of punctuation
only) scores 0.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import rlcap.metrics.diversity as diversity
from rlcap.errors import DataError, RlcapError
from rlcap.metrics.bleu import bleu
from rlcap.metrics.cider import cider_d
from rlcap.metrics.hallucination import ObjectTruth, caption_scores, corpus_scores, judge_caption
from rlcap.metrics.java import java_executable, packaged_jar
from rlcap.metrics.meteor import meteor
from rlcap.metrics.rouge import rouge_l
from rlcap.metrics.spice import SPICE_IMPLEMENTATIONS, SpiceScorer, spice
from rlcap.metrics.spider import spider
from rlcap.metrics.tokenize import tokenize, tokenize_lines

log = logging.getLogger(__name__)
Tokens = list[str]


class ScoreReport(NamedTuple):
    corpus: dict[str, float]
    per_image: dict[str, dict[str, float]]
    spice_impl: str | None = None  # "python" | "official-jar" when SPICE or SPIDEr was computed


@dataclass(frozen=True)
class ScoreInputs:
    """Tokenized captions, one entry per scored image (in the order of ``preds``)."""

    image_ids: list[str]
    refs: list[list[Tokens]]
    preds: list[list[Tokens]]  # at least one per image
    corenlp_dir: Path | None
    training_captions: list[Tokens] | None
    spice_impl: str
    objects: ObjectTruth | None = None  # the pictures' objects, for CHAIR and coverage

    @property
    def first(self) -> list[Tokens]:
        return [p[0] for p in self.preds]


class MetricResult(NamedTuple):
    corpus: dict[str, float]
    per_image: dict[str, list[float | None]]  # name -> one value per image (None: not defined)


def _bleu(x: ScoreInputs) -> MetricResult:
    corpus, per = bleu(x.first, x.refs)
    names = [f"Bleu_{k}" for k in range(1, 5)]
    return MetricResult(dict(zip(names, corpus)), {n: [p[k] for p in per] for k, n in enumerate(names)})


def _rouge(x: ScoreInputs) -> MetricResult:
    per = [rouge_l(c, r) for c, r in zip(x.first, x.refs)]
    return MetricResult({"ROUGE_L": sum(per) / len(per)}, {"ROUGE_L": list(per)})


def _cider(x: ScoreInputs) -> MetricResult:
    per = cider_d(x.first, x.refs)
    return MetricResult({"CIDEr": math.fsum(per) / len(per)}, {"CIDEr": list(per)})


def _meteor(x: ScoreInputs) -> MetricResult:
    corpus, per = meteor([" ".join(c) for c in x.first], [[" ".join(r) for r in rs] for rs in x.refs])
    return MetricResult({"METEOR": corpus}, {"METEOR": list(per)})


def _spice(x: ScoreInputs) -> MetricResult:
    cands, refs = [" ".join(c) for c in x.first], [[" ".join(r) for r in rs] for rs in x.refs]
    if x.spice_impl == "official-jar":
        corpus, per = spice(cands, refs, x.corenlp_dir)
        return MetricResult({"SPICE": corpus}, {"SPICE": list(per)})
    # The captions are already pycocoevalcap's tokens; SpiceScorer's own preparation leaves them as they are.
    scorer = SpiceScorer(dict(zip(x.image_ids, refs)))
    values = scorer.score(cands, x.image_ids)
    return MetricResult({"SPICE": math.fsum(values) / len(values)}, {"SPICE": list(values)})


def _spider(x: ScoreInputs) -> MetricResult:
    cider, spice_result = _cider(x), _spice(x)
    per = [spider(c, s) for c, s in zip(cider.per_image["CIDEr"], spice_result.per_image["SPICE"])]  # type: ignore[arg-type]
    return MetricResult({"SPIDEr": spider(cider.corpus["CIDEr"], spice_result.corpus["SPICE"])}, {"SPIDEr": per})


def _div(x: ScoreInputs) -> MetricResult:
    per: dict[str, list[float | None]] = {
        f"Div-{n}": [diversity.distinct_n(p, n) for p in x.preds] for n in (1, 2)
    }
    corpus = {name: sum(v) / len(v) for name, v in per.items()}  # type: ignore[arg-type]
    return MetricResult(corpus, per)


def _mbleu(x: ScoreInputs) -> MetricResult:
    per = [diversity.mbleu4(p) if len(p) > 1 else None for p in x.preds]
    defined = [v for v in per if v is not None]
    if not defined:
        raise DataError("mBLEU-4 needs several predicted captions for at least one image")
    return MetricResult({"mBLEU-4": sum(defined) / len(defined)}, {"mBLEU-4": per})


def _self_bleu(x: ScoreInputs) -> MetricResult:
    captions = [c for p in x.preds for c in p]
    if len(captions) < 2:
        raise DataError("Self-BLEU needs at least two predicted captions")
    return MetricResult({"Self-BLEU": diversity.self_bleu(captions)}, {})


def _template(x: ScoreInputs) -> MetricResult:
    """The template share of every predicted caption (:func:`rlcap.metrics.diversity.template`), and per image the
    share of its captions that hold that 4-gram."""
    gram, share = diversity.template([c for p in x.preds for c in p])
    per = [sum(gram is not None and _holds(c, gram) for c in p) / len(p) for p in x.preds]
    return MetricResult({"Template": share}, {"Template": list(per)})


def _holds(caption: Tokens, gram: tuple[str, ...]) -> bool:
    n = len(gram)
    return any(tuple(caption[i : i + n]) == gram for i in range(len(caption) - n + 1))


def _objects(x: ScoreInputs) -> MetricResult:
    """CHAIR_i, CHAIR_s, Coverage and Colour-err of the first caption of each image
    (:mod:`rlcap.metrics.hallucination`)."""
    truth = x.objects
    if truth is None:
        raise DataError("CHAIR_i, CHAIR_s, Coverage and Colour-err need each picture's objects (--objects FILE: "
                        "a shapes dataset or COCO instance annotations)")
    missing = [i for i in x.image_ids if i not in truth.objects]
    if missing:
        raise DataError(f"image {missing[0]!r} has no ground-truth objects in the objects file "
                        f"({len(missing)} of {len(x.image_ids)} images lack them)")
    counts = [judge_caption(c, truth.objects_of(i, r), None if truth.pairs is None else truth.pairs[i],
                            truth.vocabulary) for i, c, r in zip(x.image_ids, x.first, x.refs)]
    per = [caption_scores(c) for c in counts]
    corpus = corpus_scores(counts)
    if truth.pairs is None:
        del corpus["Colour-err"]  # (no attribute truth: not defined)
    return MetricResult(corpus, {name: [p[name] for p in per] for name in corpus})


def _vocab(x: ScoreInputs) -> MetricResult:
    return MetricResult({"Vocab": float(diversity.vocabulary_size(c for p in x.preds for c in p))}, {})


def _novelty(x: ScoreInputs) -> MetricResult:
    if x.training_captions is None:
        raise DataError("Novelty needs the training captions (--train-refs FILE)")
    captions = [c for p in x.preds for c in p]
    return MetricResult({"Novelty": diversity.novelty(captions, x.training_captions)}, {})


# Metric name -> the function computing it (functions that give several names appear once per name).
METRICS: dict[str, Callable[[ScoreInputs], MetricResult]] = {
    **{f"Bleu_{k}": _bleu for k in range(1, 5)},
    "METEOR": _meteor,
    "ROUGE_L": _rouge,
    "CIDEr": _cider,
    "SPICE": _spice,
    "SPIDEr": _spider,
    "Div-1": _div,
    "Div-2": _div,
    "mBLEU-4": _mbleu,
    "Template": _template,
    "Self-BLEU": _self_bleu,
    "Vocab": _vocab,
    "Novelty": _novelty,
    **{name: _objects for name in ("CHAIR_i", "CHAIR_s", "Coverage", "Colour-err")},
}
# What --objects FILE adds ([Rohrbach18]'s CHAIR and coverage; Colour-err needs each object's colour: shapes).
OBJECT_METRICS: tuple[str, ...] = ("CHAIR_i", "CHAIR_s", "Coverage", "Colour-err")
METRIC_NAMES: tuple[str, ...] = tuple(METRICS)
# pycocoevalcap's own set (COCOEvalCap.evaluate), SPICE by the Python port; METEOR needs Java, see
# default_metrics().
PYCOCOEVALCAP_METRICS: tuple[str, ...] = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE")
# Needs no Java, no CoreNLP, no training captions.
DEFAULT_METRICS: tuple[str, ...] = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L", "CIDEr", "SPICE")


def default_metrics() -> tuple[str, ...]:
    """pycocoevalcap's default set, less METEOR when Java or its jar is missing (logged)."""
    try:
        java_executable()
        packaged_jar("meteor/meteor-1.5.jar")
    except RlcapError as exc:
        log.warning("METEOR left out: %s", exc)
        return DEFAULT_METRICS
    return PYCOCOEVALCAP_METRICS


def object_metrics(objects: ObjectTruth) -> tuple[str, ...]:
    """The metrics ``objects`` can score: :data:`OBJECT_METRICS`, less Colour-err without colours."""
    return tuple(m for m in OBJECT_METRICS if m != "Colour-err" or objects.pairs is not None)


def check_metric_names(metrics: Sequence[str]) -> None:
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise DataError(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(METRIC_NAMES)}")


def score_captions(
    refs: Mapping[str, Sequence[str]],
    preds: Mapping[str, Sequence[str]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    corenlp_dir: Path | None = None,
    training_captions: Iterable[str] | None = None,
    spice_impl: str = "python",
    objects: ObjectTruth | None = None,
) -> ScoreReport:
    """Score raw predicted captions against raw references, image by image.

    ``refs``/``preds`` map image id -> captions; every image of ``preds`` must have references.
    ``spice_impl``: "python" (the port, rlcap.metrics.spice) or "official-jar" (needs CoreNLP 3.6.0).
    ``objects``: the pictures' ground-truth objects, which CHAIR_i, CHAIR_s, Coverage and Colour-err read.
    """
    check_metric_names(metrics)
    if "Colour-err" in metrics and objects is not None and objects.pairs is None:
        raise DataError("Colour-err needs each object's colour in the ground truth (a shapes dataset); COCO "
                        "instances have none")
    if spice_impl not in SPICE_IMPLEMENTATIONS:
        raise DataError(f"unknown SPICE implementation {spice_impl!r}; choose from {', '.join(SPICE_IMPLEMENTATIONS)}")
    inputs = _prepare(refs, preds, corenlp_dir, training_captions, spice_impl, objects)
    corpus: dict[str, float] = {}
    per_image: dict[str, dict[str, float]] = {i: {} for i in inputs.image_ids}
    done: dict[Callable[[ScoreInputs], MetricResult], MetricResult] = {}
    for name in metrics:
        fn = METRICS[name]
        if fn not in done:
            done[fn] = fn(inputs)
        result = done[fn]
        corpus[name] = result.corpus[name]
        for image_id, value in zip(inputs.image_ids, result.per_image.get(name, [])):
            if value is not None:
                per_image[image_id][name] = value
    uses_spice = any(name in ("SPICE", "SPIDEr") for name in metrics)
    return ScoreReport(corpus, per_image, spice_impl if uses_spice else None)


def _prepare(
    refs: Mapping[str, Sequence[str]],
    preds: Mapping[str, Sequence[str]],
    corenlp_dir: Path | None,
    training_captions: Iterable[str] | None,
    spice_impl: str,
    objects: ObjectTruth | None = None,
) -> ScoreInputs:
    if not preds:
        raise DataError("no predictions to score")
    str_preds = {str(k): v for k, v in preds.items()}
    image_ids = list(str_preds)
    str_refs = {str(k): v for k, v in refs.items()}
    for image_id in image_ids:
        if image_id not in str_refs:
            raise DataError(f"image {image_id!r} of the predictions has no references")
        if len(str_refs[image_id]) == 0:
            raise DataError(f"image {image_id!r} has no reference captions")
        if len(str_preds[image_id]) == 0:
            raise DataError(f"image {image_id!r} has an empty list of predicted captions")
    # pycocoevalcap tokenizes all references in one file and all (first) predictions in another, one
    # caption a line in image order; the line after a caption can change its last token (tokenize_lines).
    flat_refs = tokenize_lines([c for i in image_ids for c in str_refs[i]])
    firsts = tokenize_lines([str_preds[i][0] for i in image_ids])
    refs_tokens, start = [], 0
    for i in image_ids:
        refs_tokens.append(flat_refs[start : start + len(str_refs[i])])
        start += len(str_refs[i])
    return ScoreInputs(
        image_ids=image_ids,
        refs=refs_tokens,
        preds=[[first, *(tokenize(c) for c in str_preds[i][1:])] for first, i in zip(firsts, image_ids)],
        corenlp_dir=corenlp_dir,
        training_captions=None if training_captions is None else [tokenize(c) for c in training_captions],
        spice_impl=spice_impl,
        objects=objects,
    )
