"""Cross-entropy (XE) training with teacher forcing: the pretraining step of every paper."""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from rlcap.data.vocab import PAD
from rlcap.rl.losses import xe_loss
from rlcap.train.config import RunConfig
from rlcap.train.session import Session, end_epoch, save, start_session

log = logging.getLogger(__name__)


class XEResult(NamedTuple):
    out_dir: str
    best_score: float
    steps: int
    stopped_early: bool   # max_steps reached before the last epoch ended


def xe_step(session: Session, tokens: torch.Tensor, feats) -> float:
    """One teacher-forced update on captions ``tokens`` (B*S, T+2) of images ``feats`` (B)."""
    s = session
    seq_per_img = tokens.shape[0] // feats.fc.shape[0]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]                  # (N, T+1) each
    logits = s.model(feats, inputs, seq_per_img=seq_per_img)        # (N, T+1, V), each image encoded once
    mask = targets != PAD                                           # (N, T+1) words and EOS
    loss = xe_loss(logits, targets, mask, label_smoothing=s.cfg.xe.label_smoothing)
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if s.cfg.optim.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), s.cfg.optim.grad_clip)
    s.optimizer.step()
    return loss.item()


def train_xe(cfg: RunConfig) -> XEResult:
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
            if not math.isfinite(loss):
                raise FloatingPointError(f"XE loss became {loss} at step {p.step + 1}")
            p.step += 1
            p.step_in_epoch += 1
            bar.set_postfix(loss=f"{loss:.3f}")
            # 2. log and checkpoint
            if p.step % cfg.log_every == 0 or p.step_in_epoch == 1:
                s.logger.write(p.step, "train", {"loss": loss, "lr": s.optimizer.param_groups[0]["lr"],
                                                 "epoch": p.epoch})
            if cfg.save_every and p.step % cfg.save_every == 0:
                save(s, "last")
            if cfg.max_steps and p.step >= cfg.max_steps:
                save(s, "last")
                s.logger.close()
                return XEResult(str(s.out_dir), p.best_score, p.step, True)
        # 3. end of epoch: learning-rate decay, validation, best and last checkpoints
        end_epoch(s)
    s.logger.close()
    return XEResult(str(s.out_dir), p.best_score, p.step, False)
