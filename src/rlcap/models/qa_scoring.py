"""A caption's QA utility ([Xing26]): a text-only reader answers its picture's multiple-choice questions from the
caption alone, each question asked under several orders of its options; what the ``qa_utility`` reward and the
QA-acc metric compute (one implementation).

Option orders. [Xing26] shuffle the options against the reader's preference for some letters. Here the orders of
one question are fixed, not drawn anew at each call: a base order drawn from (seed, image id, question index) and
its rotations, order k putting the option at base position (p + k) mod K at letter p. With ``shuffles`` equal to
the number of options K the right answer stands once at each letter, so a reader's bias toward a letter adds the
same to every caption of the picture; and a caption's score does not depend on which batch it came in, nor on a
run's history (a resumed run scores the same).

Abstaining. With ``abstain`` every prompt offers one more option after the question's own, in whichever order:
[Xing26]'s "Can not answer based on the caption" (:data:`rlcap.data.qa.ABSTAIN`), as their reward server appends it
after shuffling. It is never the right answer: the reader's probability on it counts as wrong.

Scores of one (caption, question, order): ``probability``, the reader's probability of the right letter as its
next token (softmax over the whole vocabulary at ``temperature``): the expected accuracy of a reader that samples
its answer at that temperature, as [Xing26]'s reader answers (their training reward samples at 0.6, their
evaluation at 1.0; docs/RL.md); ``accuracy``, 1 when the right letter is the likeliest of the option
letters, else 0. A caption's score is the mean over its picture's questions and their orders. A prompt is read
once per call however many times it is asked (RL samples of one picture often repeat a caption).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Literal, NamedTuple

import torch

from rlcap.data.qa import ABSTAIN, LETTERS, QASet
from rlcap.models.hf.qa_reader import QAReader

SCORES = ("probability", "accuracy")
Score = Literal["probability", "accuracy"]


def option_order(seed: int, image_id: str, index: int, k: int, n_options: int) -> list[int]:
    """Order ``k`` of question ``index`` of ``image_id``: the option (file index) at each letter."""
    base = random.Random(f"qa-order/{seed}/{image_id}/{index}").sample(range(n_options), n_options)
    shift = k % n_options
    return base[shift:] + base[:shift]


class Asked(NamedTuple):
    """The prompts of one call: ``owner`` (P,) the caption each belongs to, ``right`` (P,) the right letter's
    index, ``n_options`` (P,) how many letters each offers."""

    prompts: list[str]
    owner: list[int]
    right: list[int]
    n_options: list[int]


def ask(reader: QAReader, qa: QASet, captions: Sequence[str], image_ids: Sequence[str], shuffles: int,
        seed: int = 0, abstain: bool = False) -> Asked:
    """Every (caption, question, order) prompt of ``captions``, each caption asked its image's questions (with
    ``abstain``, :data:`ABSTAIN` offered last)."""
    asked = Asked([], [], [], [])
    extra = [ABSTAIN] if abstain else []
    for c, (caption, image_id) in enumerate(zip(captions, image_ids)):
        for index, q in enumerate(qa.of(image_id)):
            if len(q.options) + len(extra) > len(LETTERS):
                raise ValueError(f"image {image_id!r}, question {index}: {len(q.options)} options and the abstain "
                                 f"option are more than the {len(LETTERS)} letters a reader answers with")
            for k in range(shuffles):
                order = option_order(seed, image_id, index, k, len(q.options))
                asked.prompts.append(reader.render(caption, q.question, [q.options[j] for j in order] + extra))
                asked.owner.append(c)
                asked.right.append(order.index(q.answer))
                asked.n_options.append(len(q.options) + len(extra))
    return asked


def likeliest(probs: torch.Tensor, n_options: Sequence[int]) -> torch.Tensor:
    """(P,) the index of each prompt's likeliest offered letter, ``probs`` (P, K) and ``n_options`` (P,) how many
    of the K letters each prompt offers."""
    offered = torch.arange(probs.shape[1], device=probs.device) < torch.tensor(n_options, device=probs.device)[:, None]
    return probs.masked_fill(~offered, -1.0).argmax(dim=1)


def qa_scores(reader: QAReader, qa: QASet, captions: Sequence[str], image_ids: Sequence[str], shuffles: int = 4,
              score: Score = "probability", seed: int = 0, temperature: float = 1.0, abstain: bool = False
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) float32 scores of ``captions`` on the reader's device and (N,) bool, whether each caption's image has
    questions (a caption whose image has none scores 0). ``temperature`` changes ``probability`` only (the
    likeliest letter is the same at every temperature); ``abstain``: the prompts offer :data:`ABSTAIN` last."""
    if score not in SCORES:
        raise ValueError(f"QA score {score!r}: expected one of {', '.join(SCORES)}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"QA reader temperature: expected a number > 0, got {temperature}")
    if shuffles < 1:
        raise ValueError(f"QA shuffles: expected an integer >= 1, got {shuffles}")
    n = len(captions)
    asked = ask(reader, qa, captions, image_ids, shuffles, seed, abstain)
    device = reader.device
    sums, counts = torch.zeros(n, device=device), torch.zeros(n, device=device)
    if asked.prompts:
        width = max(asked.n_options)
        distinct: dict[str, int] = {}  # a prompt asked twice (a caption sampled twice for its picture) is read once
        rows = torch.tensor([distinct.setdefault(p, len(distinct)) for p in asked.prompts], device=device)
        probs = reader.option_probs(list(distinct), width, temperature)[rows]  # (P, K)
        right = torch.tensor(asked.right, device=device)  # (P,)
        if score == "probability":
            values = probs.gather(1, right[:, None]).squeeze(1)  # (P,)
        else:
            values = (likeliest(probs, asked.n_options) == right).float()  # (P,)
        owner = torch.tensor(asked.owner, device=device)
        sums.index_add_(0, owner, values)
        counts.index_add_(0, owner, torch.ones_like(values))
    return sums / counts.clamp(min=1), counts > 0
