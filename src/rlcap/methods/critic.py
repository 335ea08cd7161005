"""[Wang18]'s internal critic ([Wang18], eq. 9-10), trained before the
HRL captioner: a GRU over the words of a caption that says, after each word, whether its segment
has ended.

The targets are the chunk boundaries of the training captions (:mod:`rlcap.data.chunker`, [Wang18 sec. 4.1]):
z*_t = 1 at the last word of each chunk. The critic reads ``BOS w_1 .. w_T`` as the HRL
captioner's critic does while decoding (the BOS position has no target); its loss is eq. 10. Each
epoch it is validated by the precision, recall and F1 of the boundaries it predicts (p > 0.5) on
the validation captions, and the best epoch by F1 is kept in ``best/``. The checkpoint's only part
is ``critic``; ``model.critic_from`` of an ``arch: hrl`` run loads it (the vocabularies must match).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.chunker import chunk_starts
from rlcap.data.vocab import BOS, PAD
from rlcap.metrics import tokenize
from rlcap.models.hrl import InternalCritic
from rlcap.rl.hrl import critic_loss, segment_end_targets
from rlcap.run_config import RunConfig, algorithm_field, check_min
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import (TrainResult, add_part, finish_run, finish_step, open_session, resume_or_start,
                                 train_batches)

log = logging.getLogger(__name__)

CRITIC = "critic"


@dataclass
class CriticConfig:
    """algorithm=critic: [Wang18]'s internal critic (eq. 9-10), trained on the training captions' chunk
    boundaries (``rlcap.data.chunker``) before the HRL captioner, which loads it (``model.critic_from``)."""

    epochs: int = help_field(5, "training epochs")
    batch_size: int = help_field(128, "captions per batch")

    def validate(self) -> None:
        check_min("critic.epochs", self.epochs, 1)
        check_min("critic.batch_size", self.batch_size, 1)


@dataclass
class CriticRunConfig(RunConfig):
    """``algorithm: critic``: the internal critic of HRL, trained before it [Wang18]."""

    # sized by model.embed_dim and model.hidden_dim, it decodes no caption and keeps best/ by its own F1
    UNREAD: ClassVar[tuple[str, ...]] = ("model.arch", "model.att_hidden_dim", "model.dropout", "model.grid_boxes",
                                         "val.max_images", "val.batch_size", "decode.", "val.metric")
    CAPTIONS_PER_IMAGE: ClassVar[bool] = False

    algorithm: str = algorithm_field("critic")
    critic: CriticConfig = help_field(CriticConfig, "the internal critic of HRL, trained before it [Wang18]")


def critic_data(split, vocab, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every caption of a split as (tokens (C, 1+T): BOS then words, PAD after; targets (C, 1+T))."""
    words = [tokenize(caption)[:max_len] for refs in split.refs for caption in refs]
    starts = chunk_starts(words)
    width = 1 + max((len(caption_words) for caption_words in words), default=1)
    tokens = torch.full((len(words), width), PAD, dtype=torch.long)  # cpu: the run moves them to its device
    targets = torch.zeros(len(words), width)  # cpu: as the tokens
    for i, (caption_words, caption_starts) in enumerate(zip(words, starts)):
        n = len(caption_words)
        tokens[i, 0] = BOS
        if caption_words:
            tokens[i, 1:1 + n] = torch.tensor(vocab.encode(caption_words))  # cpu: a row of the tokens above
            targets[i, 1:1 + n] = segment_end_targets([caption_starts], n)[0]
    return tokens, targets


def boundary_scores(critic: InternalCritic, tokens: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """Precision, recall and F1 of the predicted segment ends (p > 0.5) at the words (not BOS, not the last word)."""
    with torch.no_grad():
        predicted = torch.cat([critic(tokens[i:i + 512]) for i in range(0, len(tokens), 512)]) > 0
    words = tokens != PAD
    last = words.cumsum(1) == words.sum(1, keepdim=True)  # a caption's last word always ends a segment
    scored = words & ~last
    scored[:, 0] = False
    truth = (targets > 0.5) & scored
    guess = predicted & scored
    tp = float((truth & guess).sum())
    precision, recall = tp / max(float(guess.sum()), 1.0), tp / max(float(truth.sum()), 1.0)
    return {"precision": precision, "recall": recall,
            "F1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0}


def train_critic(cfg: CriticRunConfig) -> TrainResult:
    session = open_session(cfg, splits=("train", cfg.val.split), policy=False)
    vocab = session.data.vocab
    critic = InternalCritic(len(vocab), session.cfg.model.embed_dim, session.cfg.model.hidden_dim)
    add_part(session, CRITIC, critic, cfg.optim)
    resume_or_start(session, selects_by="F1")
    train_split, val_split = session.data.splits["train"], session.data.splits[cfg.val.split]
    tokens, targets = (t.to(session.device) for t in critic_data(train_split, vocab, cfg.data.max_len))
    val = tuple(t.to(session.device) for t in critic_data(val_split, vocab, cfg.data.max_len))
    log.info("internal critic: %d training captions, %.2f segments each", len(tokens),
             float(targets[:, 1:].sum(1).mean()))
    section = cfg.critic
    critic.train()

    def batches(epoch: int, start: int) -> list[torch.Tensor]:  # the captions' rows, shuffled per epoch
        # cpu: the order, seeded as on any device
        order = torch.randperm(len(tokens), generator=torch.Generator().manual_seed(cfg.seed + epoch))
        return list(order.split(section.batch_size))[start:]

    for batch in train_batches(session, section.epochs, section.batch_size,
                               validate=lambda _: boundary_scores(critic, *val), batches=batches,
                               steps_per_epoch=math.ceil(len(tokens) / section.batch_size)):
        logits = session.module(CRITIC)(tokens[batch])  # (b, 1+T): after each token, has the segment ended?
        mask = tokens[batch] != PAD
        mask[:, 0] = False  # BOS ends nothing
        loss = critic_loss(logits, targets[batch], mask)  # eq. 10
        optimizer_step(session, loss, part=CRITIC)
        if finish_step(session, {"loss": loss.detach()}):
            break
    return finish_run(session)


register(Method("critic", train_critic, CriticRunConfig, "the internal critic of HRL, trained before it [Wang18]"))
