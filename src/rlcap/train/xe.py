"""Cross-entropy (XE) training with teacher forcing: the pretraining step of every paper."""

from __future__ import annotations

import logging
import math
import torch
from tqdm.auto import tqdm

from rlcap.data.vocab import PAD
from rlcap.rl.losses import xe_loss
from rlcap.train.config import RunConfig
from rlcap.train.session import (Session, TrainResult, end_epoch, finish_run, finish_step, optimizer_step,
                                 start_session)

log = logging.getLogger(__name__)


def xe_step(session: Session, tokens: torch.Tensor, feats) -> float:
    """One teacher-forced update on captions ``tokens`` (B*S, T+2) of images ``feats`` (B)."""
    s = session
    seq_per_img = tokens.shape[0] // feats.fc.shape[0]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]                  # (N, T+1) each
    logits = s.model(feats, inputs, seq_per_img=seq_per_img)        # (N, T+1, V), each image encoded once
    mask = targets != PAD                                           # (N, T+1) words and EOS
    loss = xe_loss(logits, targets, mask, label_smoothing=s.cfg.xe.label_smoothing)
    optimizer_step(s, loss)
    return loss.item()


def train_xe(cfg: RunConfig) -> TrainResult:
    s = start_session(cfg, splits=("train", cfg.val.split))
    train = s.data.splits["train"]
    p = s.progress
    steps_per_epoch = math.ceil(len(train) / cfg.xe.batch_size)
    s.model.train()
    while p.epoch < cfg.xe.epochs:
        batches = train.batches(cfg.xe.batch_size, cfg.data.seq_per_img, cfg.seed, p.epoch, p.step_in_epoch)
        bar = tqdm(batches, total=steps_per_epoch, initial=p.step_in_epoch, desc=f"xe epoch {p.epoch + 1}",
                   leave=False, disable=None)
        for batch in bar:
            # 1. teacher-forced cross-entropy and an optimizer step
            loss = xe_step(s, batch.tokens, batch.feats)
            bar.set_postfix(loss=f"{loss:.3f}")
            # 2. count, log and checkpoint the step
            if finish_step(s, {"loss": loss}):
                return finish_run(s, stopped_early=True)
        # 3. end of epoch: learning-rate decay, validation, best and last checkpoints
        end_epoch(s)
    return finish_run(s, stopped_early=False)
