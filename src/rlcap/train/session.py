"""What every training loop shares: set-up, resume, optimizer, and checkpoint writing.

Loops share these functions, not a base class. A :class:`Session` holds the live objects of a
run; :class:`Progress` is the part of it that goes into a checkpoint.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from rlcap.config import from_dict, to_dict
from rlcap.data.loader import CaptionData, load_data
from rlcap.models import build_model
from rlcap.models.config import ModelConfig
from rlcap.train.checkpoint import is_complete, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rlcap.train.config import OptimConfig, RunConfig
from rlcap.train.evaluate import evaluate_split
from rlcap.train.logger import RunLogger

log = logging.getLogger(__name__)


@dataclass
class Progress:
    epoch: int = 0              # epochs completed
    step_in_epoch: int = 0      # batches done in the current epoch
    step: int = 0               # optimizer steps in total
    best_score: float = float("-inf")
    history: list[dict[str, Any]] = field(default_factory=list)  # validation results per epoch


@dataclass
class Session:
    cfg: RunConfig
    data: CaptionData
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    logger: RunLogger
    progress: Progress
    out_dir: Path


def build_optimizer(params: Any, cfg: OptimConfig) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """Adam or AdamW, with step decay every ``lr_decay_every`` epochs (the scheduler steps per epoch)."""
    opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[cfg.name]
    optimizer = opt_cls(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.lr_decay_every > 0:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, cfg.lr_decay_every, gamma=cfg.lr_decay_rate)
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0)
    return optimizer, scheduler


def _model_for(cfg: RunConfig, data: CaptionData) -> torch.nn.Module:
    split = next(iter(data.splits.values()))
    return build_model(cfg.model, len(data.vocab), split.fc_dim, split.att_dim)


def start_session(cfg: RunConfig, splits: tuple[str, ...] = ("train", "val")) -> Session:
    """Build data, model and optimizer; resume from ``out_dir/last`` or start from ``init_from``."""
    torch.set_num_threads(cfg.threads)
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    resume = cfg.resume and is_complete(out_dir / "last")
    if cfg.resume and not resume:
        log.info("resume=true but %s holds no checkpoint yet: starting fresh", out_dir / "last")
    ckpt = load_checkpoint(out_dir / "last") if resume else None
    init = load_checkpoint(cfg.init_from, with_trainer=False) if (cfg.init_from and not resume) else None
    source = ckpt or init
    if source is not None:
        # The model must be the one whose weights we load: take its architecture from that checkpoint
        # (an RL run's config names only init_from, so on resume the run's own checkpoint is the source).
        cfg.model = from_dict(ModelConfig, source.config["model"])
    torch.manual_seed(cfg.seed)
    data = load_data(cfg.data, splits, vocab=source.vocab if source else None)
    model = _model_for(cfg, data)
    if source is not None:
        model.load_state_dict(source.weights)
    optimizer, scheduler = build_optimizer(model.parameters(), cfg.optim)
    progress = Progress()
    if ckpt is not None and ckpt.trainer is not None:
        optimizer.load_state_dict(ckpt.trainer["optimizer"])
        scheduler.load_state_dict(ckpt.trainer["scheduler"])
        set_rng_state(ckpt.trainer["rng"])
        progress = Progress(**ckpt.trainer["progress"])
        log.info("resumed %s at epoch %d, step %d", out_dir, progress.epoch, progress.step)
    logger = RunLogger(out_dir, cfg.tensorboard, resume_step=progress.step if ckpt is not None else None)
    (out_dir / "config.json").write_text(_config_json(cfg), encoding="utf-8")
    return Session(cfg, data, model, optimizer, scheduler, logger, progress, out_dir)


def _config_json(cfg: RunConfig) -> str:
    import json

    return json.dumps(to_dict(cfg), indent=2)


def save(session: Session, name: str, metrics: dict[str, float] | None = None) -> Path:
    """Write checkpoint ``out_dir/name`` (``last`` carries the full trainer state for resuming)."""
    s = session
    split = next(iter(s.data.splits.values()))
    config = {**to_dict(s.cfg), "feature_dims": {"fc": split.fc_dim, "att": split.att_dim,
                                                 "image_size": split.image_size}}
    trainer = {
        "optimizer": s.optimizer.state_dict(),
        "scheduler": s.scheduler.state_dict(),
        "rng": rng_state(),
        "progress": vars(s.progress).copy(),
    }
    manifest = {"epoch": s.progress.epoch, "step": s.progress.step, "algorithm": s.cfg.algorithm,
                "metrics": metrics or {}}
    return save_checkpoint(s.out_dir / name, s.model, config, s.data.vocab, trainer, manifest)


class TrainResult(NamedTuple):
    out_dir: str
    best_score: float     # best validation CIDEr-D
    steps: int
    stopped_early: bool   # max_steps reached before the last epoch ended


def optimizer_step(session: Session, loss: torch.Tensor) -> None:
    """Backward pass, gradient clipping (by global norm or by value) and one optimizer step."""
    s, clip = session, session.cfg.optim
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip.grad_clip > 0 and clip.grad_clip_mode == "value":
        torch.nn.utils.clip_grad_value_(s.model.parameters(), clip.grad_clip)
    elif clip.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), clip.grad_clip)
    s.optimizer.step()


def finish_step(session: Session, values: dict[str, float]) -> bool:
    """Count a step, log it and checkpoint as configured; True once ``max_steps`` is reached."""
    s, p, cfg = session, session.progress, session.cfg
    if not math.isfinite(values["loss"]):
        raise FloatingPointError(f"{cfg.algorithm} loss became {values['loss']} at step {p.step + 1}")
    p.step += 1
    p.step_in_epoch += 1
    if p.step % cfg.log_every == 0 or p.step_in_epoch == 1:
        s.logger.write(p.step, "train", {**values, "lr": s.optimizer.param_groups[0]["lr"], "epoch": p.epoch})
    if cfg.save_every and p.step % cfg.save_every == 0:
        save(s, "last")
    if cfg.max_steps and p.step >= cfg.max_steps:
        save(s, "last")
        return True
    return False


def finish_run(session: Session, stopped_early: bool) -> TrainResult:
    session.logger.close()
    p = session.progress
    return TrainResult(str(session.out_dir), p.best_score, p.step, stopped_early)


def validate(session: Session) -> dict[str, float]:
    """Validation CIDEr-D (pycocoevalcap's, document frequencies from the validation references)."""
    s, v = session, session.cfg.val
    result = evaluate_split(s.model, s.data.splits[v.split], s.data.vocab, v.beam_size, v.max_len,
                            metrics=["CIDEr"], batch_size=v.batch_size, limit=v.max_images)
    return {"CIDEr": result.corpus["CIDEr"]}


def end_epoch(session: Session) -> dict[str, float]:
    """Decay the learning rate, validate, keep the best checkpoint and write the last one."""
    s, p = session, session.progress
    s.scheduler.step()
    p.epoch += 1
    p.step_in_epoch = 0
    scores = validate(s)
    p.history.append({"epoch": p.epoch, "step": p.step, **scores})
    s.logger.write(p.step, s.cfg.val.split, {**scores, "epoch": p.epoch})
    log.info("epoch %d: %s CIDEr-D %.4f", p.epoch, s.cfg.val.split, scores["CIDEr"])
    if scores["CIDEr"] > p.best_score:
        p.best_score = scores["CIDEr"]
        save(s, "best", scores)
    save(s, "last", scores)
    return scores


def load_model(folder: str | Path) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """Rebuild a trained model from a checkpoint folder: (model in eval mode, vocab, config dict)."""
    ckpt = load_checkpoint(folder, with_trainer=False)
    model_cfg = from_dict(ModelConfig, ckpt.config["model"])
    dims = ckpt.config["feature_dims"]
    model = build_model(model_cfg, len(ckpt.vocab), dims["fc"], dims["att"])
    model.load_state_dict(ckpt.weights)
    model.eval()
    return model, ckpt.vocab, ckpt.config
