"""QA-acc: the share of its picture's multiple-choice questions a held-out text-only reader answers right from a
caption alone ([Xing26]'s utility as a metric), averaged over the questions and the orders of their options
(:func:`rlcap.models.qa_scoring.qa_scores`, score ``accuracy``: the same code as the ``qa_utility`` reward).
The reader that judges is not the one a run learned from, so that a caption cannot score by the learned
reader's quirks alone. ``rlcap score --reader DIR --qa FILE`` and ``rlcap eval --reader DIR --qa FILE``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rlcap.data.qa import QASet, load_qa
from rlcap.errors import ConfigError, DataError
from rlcap.models.hf.qa_reader import QAReader
from rlcap.models.qa_scoring import ask, likeliest, qa_scores

METRIC = "QA-acc"
SHUFFLES = 4  # each question under four orders of its options: with four options the right one once at each letter


def load_judge(reader: str | Path | None, qa: str | Path | None, device: str = "cpu") -> tuple[QAReader, QASet]:
    """The judging reader (fp32) and the questions; one line when either is missing or empty."""
    if reader is None or qa is None:
        raise ConfigError("reader and qa go together: QA-acc asks the reader the file's questions")
    questions = load_qa(qa)
    if not len(questions):
        raise DataError(f"{qa}: no multiple-choice question to ask ({questions.skipped} open questions left out)")
    return QAReader.load(reader, device), questions


def qa_accuracy(reader: QAReader, qa: QASet, captions: Mapping[str, str], shuffles: int = SHUFFLES,
                abstain: bool = False) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """QA-acc of one caption per image (``captions``: id -> caption): ``({"QA-acc": corpus}, {id: {"QA-acc":
    value}})``, over the images that have questions (the corpus value: their mean; nan when none has); with
    ``abstain`` every prompt offers :data:`rlcap.data.qa.ABSTAIN` last, which counts as wrong."""
    ids = [i for i in captions if qa.of(i)]
    if not ids:
        return {METRIC: float("nan")}, {}
    values, _ = qa_scores(reader, qa, [captions[i] for i in ids], ids, shuffles, "accuracy", abstain=abstain)
    per_image = {i: {METRIC: float(v)} for i, v in zip(ids, values.tolist())}
    return {METRIC: float(values.mean())}, per_image


def add_qa_scores(result: Any, reader: QAReader, qa: QASet) -> None:
    """Add QA-acc to an evaluation (:class:`rlcap.train.validation.Evaluation`: its corpus and per-image scores)."""
    corpus, per_image = qa_accuracy(reader, qa, result.predictions)
    result.corpus.update(corpus)
    for i, values in per_image.items():
        result.per_image.setdefault(i, {}).update(values)


def abstained(reader: QAReader, qa: QASet, captions: Mapping[str, str], shuffles: int = SHUFFLES) -> float:
    """The share of the (caption, question, order) prompts of ``captions`` (id -> caption) on which the reader's
    likeliest letter is the abstain option's (:data:`rlcap.data.qa.ABSTAIN`, offered last); nan when no image of
    ``captions`` has questions."""
    ids = [i for i in captions if qa.of(i)]
    asked = ask(reader, qa, [captions[i] for i in ids], ids, shuffles, abstain=True)
    if not asked.prompts:
        return float("nan")
    probs = reader.option_probs(asked.prompts, max(asked.n_options))  # (P, K)
    last = torch.tensor(asked.n_options, device=probs.device) - 1  # (P,) the abstain letter's index
    return float((likeliest(probs, asked.n_options) == last).float().mean())


def reader_card(reader: QAReader, qa: QASet, references: Mapping[str, Sequence[str]],
                negatives: Mapping[str, Sequence[str]] | None = None) -> dict[str, float]:
    """How well a reader reads, on the images of ``references`` (id -> reference captions) that have questions:
    its QA-acc from each image's first reference, from an empty caption, and chance (the mean of 1 / options);
    ``by_kind``: the two QA-accs on each kind of question alone (when the questions have kinds). With
    ``negatives`` (id -> for each of its questions, a caption that does not state that question's answer), for a
    reader trained to abstain, ``abstain``: the QA-accs with the abstain option offered, and how often the reader
    abstains from a reference, from an empty caption and from each question's negative."""
    ids = [i for i in references if qa.of(i) and references[i]]
    if not ids:
        raise DataError("no image with both references and questions to judge the reader on")
    first, empty = {i: references[i][0] for i in ids}, {i: "" for i in ids}
    from_reference, _ = qa_accuracy(reader, qa, first)
    from_empty, _ = qa_accuracy(reader, qa, empty)
    chance = sum(1 / len(q.options) for i in ids for q in qa.of(i)) / sum(len(qa.of(i)) for i in ids)
    card = {"from_reference": from_reference[METRIC], "from_empty": from_empty[METRIC], "chance": chance,
            "images": len(ids), "questions": sum(len(qa.of(i)) for i in ids)}
    kinds = sorted({q.kind for i in ids for q in qa.of(i) if q.kind})
    if kinds:
        card["by_kind"] = {kind: _kind_card(reader, qa, references, ids, kind) for kind in kinds}
    if negatives is not None:
        card["abstain"] = {"from_reference": qa_accuracy(reader, qa, first, abstain=True)[0][METRIC],
                           "from_empty": qa_accuracy(reader, qa, empty, abstain=True)[0][METRIC],
                           "abstains_from_reference": abstained(reader, qa, first),
                           "abstains_from_empty": abstained(reader, qa, empty),
                           "abstains_from_negative": abstained(reader, *_one_a_caption(qa, negatives, ids))}
    return card


def _one_a_caption(qa: QASet, captions: Mapping[str, Sequence[str]], ids: Sequence[str]
                   ) -> tuple[QASet, dict[str, str]]:
    """Each question of ``ids`` that ``captions`` has a caption for (id -> one caption per question, in order) as
    an image of its own ("id#k"), with that caption."""
    keys = [(i, k) for i in ids if i in captions for k in range(len(qa.of(i)))]
    return (QASet({f"{i}#{k}": [qa.of(i)[k]] for i, k in keys}),
            {f"{i}#{k}": captions[i][k] for i, k in keys})


def of_kind(qa: QASet, ids: Sequence[str], kind: str) -> QASet:
    """The questions of one ``kind`` alone about the images ``ids`` (their option orders are then drawn anew)."""
    return QASet({i: [q for q in qa.of(i) if q.kind == kind] for i in ids})


def _kind_card(reader: QAReader, qa: QASet, references: Mapping[str, Sequence[str]], ids: list[str],
               kind: str) -> dict[str, float]:
    """QA-acc from the first reference and from an empty caption on the questions of one ``kind`` alone (each
    image's questions of that kind, so their option orders are drawn anew), and how many questions."""
    only = of_kind(qa, ids, kind)
    asked = [i for i in ids if only.of(i)]
    from_reference, _ = qa_accuracy(reader, only, {i: references[i][0] for i in asked})
    from_empty, _ = qa_accuracy(reader, only, {i: "" for i in asked})
    return {"from_reference": from_reference[METRIC], "from_empty": from_empty[METRIC],
            "questions": sum(len(only.of(i)) for i in asked)}
