"""Multiple-choice questions about pictures, keyed by image id: what the ``qa_utility`` reward and the QA-acc
metric ask a text-only reader about a caption ([Xing26]).

Two file formats are read (:func:`load_qa`):

- rlcap's own JSON, ``{"format": "rlcap-qa", "images": {image_id: [{"question", "options", "answer",
  "kind"}]}}``, ``answer`` the index of the right option (what ``rlcap data shapes`` writes, :func:`write_qa`);
- CapRL's (InternLM/CapRL, its Prism evaluation's input): a JSON list, or JSON lines, of samples with ``image``
  (a path, or Qwen-VL messages whose content holds ``{"image": path}``), ``prompt`` (a Qwen chat prompt whose
  user turn starts with the picture's placeholder and holds the question, its options one a line as ``A. text``
  or ``(A) text``) and ``answer`` (the right option's letter, or its text). A sample's image id is its
  ``image_id`` (or ``id``) when it has one, else the picture's file name without suffix. A sample whose prompt
  holds fewer than two lettered options, or whose answer names none of them, is an open question that one
  forward pass over the option letters cannot score: it is left out and counted (:attr:`QASet.skipped`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rlcap.errors import DataError
from rlcap.files import write_json

FORMAT = "rlcap-qa"
LETTERS = "ABCDEFGHIJ"  # option letters: at most ten options a question
# the option [Xing26]'s reward offers after a question's own, in their words (InternLM/CapRL, the reward server):
# the reader's way to say that the caption does not state the answer, which scores as a wrong answer
ABSTAIN = "Can not answer based on the caption"
_OPTION = re.compile(r"^\s*\(?([A-J])[.):]\s+(.+?)\s*$")
_USER_START = re.compile(r"<\|im_start\|>user\s*")
_TURN_END = "<|im_end|>"
_VISION = re.compile(r"<\|vision_start\|>.*?<\|vision_end\|>|<image>", re.S)


class Question(NamedTuple):
    """One multiple-choice question: ``options`` in their file order, ``answer`` the right one's index;
    ``kind``: what it asks about (shapes: kind, colour, count, position, relation; '' when unknown)."""

    question: str
    options: tuple[str, ...]
    answer: int
    kind: str = ""


@dataclass
class QASet:
    """Image id -> its questions; ``skipped``: samples of a CapRL file that were not multiple choice."""

    questions: dict[str, list[Question]] = field(default_factory=dict)
    skipped: int = 0

    def of(self, image_id: str) -> list[Question]:
        """The questions about ``image_id`` (none: an empty list)."""
        return self.questions.get(image_id, [])

    def __len__(self) -> int:
        return sum(len(qs) for qs in self.questions.values())


def check_question(q: Question, where: str) -> None:
    if not 2 <= len(q.options) <= len(LETTERS):
        raise DataError(f"{where}: a question needs 2 to {len(LETTERS)} options, got {len(q.options)}")
    if not 0 <= q.answer < len(q.options):
        raise DataError(f"{where}: answer index {q.answer} is not one of the {len(q.options)} options")


def write_qa(path: str | Path, questions: Mapping[str, Sequence[Question]]) -> Path:
    """Write rlcap's QA JSON to ``path``; returns it."""
    images = {str(i): [q._asdict() for q in qs] for i, qs in questions.items()}
    write_json(Path(path), {"format": FORMAT, "images": images})
    return Path(path)


def load_qa(path: str | Path) -> QASet:
    """The questions of an rlcap QA JSON or of a CapRL file (JSON list or JSON lines); DataError with one line
    when it is neither."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(f"cannot read the QA file {path}: {exc}") from None
    try:
        data: Any = json.loads(text)
    except ValueError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise DataError(f"{path}: neither JSON nor JSON lines ({exc})") from None
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return _read_rlcap(data, path)
    if isinstance(data, list):
        return _read_caprl(data, path)
    raise DataError(f"{path}: expected rlcap's QA JSON ({{'format': '{FORMAT}', 'images': ...}}) or CapRL's "
                    "(a list of {'image', 'prompt', 'answer'} samples)")


def _read_rlcap(data: dict, path: Path) -> QASet:
    out = QASet()
    for image_id, items in data.get("images", {}).items():
        for k, item in enumerate(items):
            try:
                q = Question(str(item["question"]), tuple(str(o) for o in item["options"]), int(item["answer"]),
                             str(item.get("kind", "")))
            except (KeyError, TypeError, ValueError) as exc:
                raise DataError(f"{path}: image {image_id!r} question {k}: expected question, options, answer "
                                f"({exc!r})") from None
            check_question(q, f"{path}: image {image_id!r} question {k}")
            out.questions.setdefault(str(image_id), []).append(q)
    return out


def _read_caprl(samples: list, path: Path) -> QASet:
    out = QASet()
    for k, sample in enumerate(samples):
        if not isinstance(sample, dict) or "prompt" not in sample or "answer" not in sample:
            raise DataError(f"{path}: sample {k}: expected a CapRL sample with 'image', 'prompt' and 'answer'")
        question = caprl_question(str(sample["prompt"]), str(sample["answer"]))
        if question is None:
            out.skipped += 1
            continue
        out.questions.setdefault(caprl_image_id(sample, f"{path}: sample {k}"), []).append(question)
    return out


def caprl_image_id(sample: dict, where: str) -> str:
    """A CapRL sample's image id: its ``image_id`` or ``id``, else its picture's file name without suffix."""
    for key in ("image_id", "id"):
        if key in sample:
            return str(sample[key])
    image = _image_path(sample.get("image"))
    if image is None:
        raise DataError(f"{where}: no image_id and no image path to take one from")
    return Path(image).stem


def _image_path(image: Any) -> str | None:
    """The first picture path in a sample's ``image``: a path, or Qwen-VL messages (content items with 'image')."""
    if isinstance(image, str):
        return image
    if isinstance(image, dict):
        if isinstance(image.get("image"), str):
            return image["image"]
        return _image_path(image.get("content"))
    if isinstance(image, list):
        for item in image:
            found = _image_path(item)
            if found is not None:
                return found
    return None


def caprl_question(prompt: str, answer: str) -> Question | None:
    """The question of a CapRL prompt and its answer; None when it is not multiple choice."""
    user = _USER_START.split(prompt)
    text = user[-1] if len(user) > 1 else prompt
    text = _VISION.sub("", text.split(_TURN_END)[0]).strip()
    stem, options, letters = [], [], []
    for line in text.splitlines():
        match = _OPTION.match(line)
        if match and match.group(1) == LETTERS[len(options)]:
            letters.append(match.group(1))
            options.append(match.group(2))
        elif not options:
            stem.append(line)
    if len(options) < 2:
        return None
    right = _answer_index(answer, options)
    if right is None:
        return None
    return Question(" ".join(s.strip() for s in stem if s.strip()), tuple(options), right)


def _answer_index(answer: str, options: list[str]) -> int | None:
    """The option ``answer`` names: its letter ('B', '(B)', 'B. text') or its text."""
    text = answer.strip()
    match = re.fullmatch(r"\(?([A-J])\)?(?:[.):]\s*.*)?", text, re.S)
    if match and LETTERS.index(match.group(1)) < len(options):
        return LETTERS.index(match.group(1))
    lowered = [o.strip().lower() for o in options]
    return lowered.index(text.lower()) if text.lower() in lowered else None
