"""Cross-entropy (XE) training with teacher forcing: the pretraining step of every paper."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.feats import Feats
from rlcap.data.vocab import PAD
from rlcap.errors import ConfigError
from rlcap.rl.losses import xe_loss
from rlcap.distributed import total, word_share
from rlcap.run_config import RunConfig, algorithm_field, check_min
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, start_session, train_batches


@dataclass
class XEConfig:
    epochs: int = help_field(10, "training epochs")
    batch_size: int = help_field(50, "images per batch (each with data.seq_per_img captions)")
    label_smoothing: float = help_field(0.0, "label smoothing of the cross-entropy (0: none)")

    def validate(self) -> None:
        check_min("xe.epochs", self.epochs, 1)
        check_min("xe.batch_size", self.batch_size, 1)
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"xe.label_smoothing: expected a number in [0, 1), got {self.label_smoothing}")


@dataclass
class XeRunConfig(RunConfig):
    """``algorithm: xe``: cross-entropy training (teacher forcing)."""

    UNREAD: ClassVar[tuple[str, ...]] = ("decode.temperature",)  # it samples no caption
    BATCH_KEY: ClassVar[str | None] = "xe.batch_size"

    algorithm: str = algorithm_field("xe")
    xe: XEConfig = help_field(XEConfig, "cross-entropy training (teacher forcing)")


def xe_step(session: Session, tokens: torch.Tensor, feats: Feats) -> torch.Tensor:
    """One teacher-forced update on captions ``tokens`` (B*S, T+2: T the batch's longest caption, BOS and EOS
    around it) of images ``feats`` (B); the loss, a 0-d tensor left on the device (read at log lines only)."""
    seq_per_img = tokens.shape[0] // feats.fc.shape[0]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]                     # (N, T+1) each
    logits = session.model(feats, inputs, seq_per_img=seq_per_img)  # (N, T+1, V), each image encoded once
    mask = targets != PAD                                              # (N, T+1) words and EOS
    loss = xe_loss(logits, targets, mask, label_smoothing=session.cfg.xe.label_smoothing)
    # under torchrun each rank has its share of the batch's words: weigh its mean by that share so that
    # the averaged gradients are the whole batch's (one process: a factor of exactly 1)
    share = word_share(mask, session.ranks)
    optimizer_step(session, loss * share)
    return total((loss * share).detach(), session.ranks) / session.ranks.world


def train_xe(cfg: XeRunConfig) -> TrainResult:
    session = start_session(cfg, splits=("train", cfg.val.split))
    session.model.train()
    # train_batches validates and checkpoints at the end of every epoch (session.end_epoch)
    for batch in train_batches(session, cfg.xe.epochs, cfg.xe.batch_size, cfg.data.seq_per_img):
        # 1. teacher-forced cross-entropy and an optimizer step
        loss = xe_step(session, batch.tokens, batch.feats)
        # 2. count, log and checkpoint the step
        if finish_step(session, {"loss": loss}):
            break
    return finish_run(session)


register(Method("xe", train_xe, XeRunConfig, "cross-entropy training (teacher forcing)"))
