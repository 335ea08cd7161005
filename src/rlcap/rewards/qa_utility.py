"""``qa_utility``: a caption's utility to a text-only reader ([Xing26]): the reader, which never sees the picture,
answers the picture's multiple-choice questions from the caption alone; the reward is its mean score over the
questions and several orders of their options (:mod:`rlcap.models.qa_scoring`: ``reward.qa_score`` probability
or accuracy, ``reward.qa_shuffles`` orders, ``reward.qa_temperature`` the reader's sampling temperature,
``reward.qa_abstain`` [Xing26]'s "Can not answer based on the caption" offered last).

``reward.paths.qa_utility``: the reader, a local causal LM folder (tokenizer with a chat template);
``reward.paths.qa_file``: the questions keyed by image id (rlcap's QA JSON, as ``rlcap data shapes`` writes
``questions.json``, or CapRL's file). The reader is loaded once, frozen, on the run's device; each call asks all
of its captions' (caption, question, order) prompts in padded batches under no_grad, its weights and forward
passes in ``reward.qa_precision`` (by default the run's precision). A caption whose image has no questions scores
0 (a warning says how many images had none).
"""

from __future__ import annotations

import logging

import torch

from rlcap.data.qa import QASet, load_qa
from rlcap.models.hf.qa_reader import QAReader
from rlcap.models.qa_scoring import Score, qa_scores
from rlcap.rewards.batch import RewardBatch, check_batch
from rlcap.rewards.context import RewardContext

logger = logging.getLogger(__name__)

# the reward.* keys it reads beside its weight
QA_SETTINGS = ("paths", "qa_shuffles", "qa_score", "qa_batch", "qa_temperature", "qa_abstain", "qa_precision")


class QAUtilityReward:
    """``(captions, batch) -> (N,)`` float32 on the CPU: each caption's QA utility to ``reader``."""

    def __init__(self, reader: QAReader, qa: QASet, shuffles: int = 4, score: Score = "probability", seed: int = 0,
                 temperature: float = 1.0, abstain: bool = False):
        self.reader, self.qa, self.shuffles, self.score, self.seed = reader, qa, shuffles, score, seed
        self.temperature, self.abstain = temperature, abstain
        self._warned: set[str] = set()

    @torch.no_grad()
    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        values, asked = qa_scores(self.reader, self.qa, captions, batch.image_ids, self.shuffles, self.score,
                                  self.seed, self.temperature, self.abstain)
        missing = {i for i, has in zip(batch.image_ids, asked.tolist()) if not has} - self._warned
        if missing:
            self._warned |= missing
            logger.warning("qa_utility: %d images have no questions in the QA file (their captions score 0), "
                           "e.g. %r", len(missing), sorted(missing)[0])
        return values.float().cpu()


def make_qa_utility(ctx: RewardContext) -> QAUtilityReward:
    reader = QAReader.load(ctx.path("qa_utility"), ctx.device, ctx.qa_reader_precision(), ctx.qa_batch)
    return QAUtilityReward(reader, load_qa(ctx.path("qa_file")), ctx.qa_shuffles, ctx.qa_score,
                           temperature=ctx.qa_temperature, abstain=ctx.qa_abstain)
