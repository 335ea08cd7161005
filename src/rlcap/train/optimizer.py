"""A part's optimizer and schedule, one optimizer step (backward, gradient averaging across torchrun's
processes, clipping, the fp16 gradient scaler), and the share of a batch each process steps on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol

import torch

from rlcap.data.loader import Batch
from rlcap.run_config import OptimConfig
from rlcap.train.checkpoint import POLICY
from rlcap.distributed import Ranks, average_gradients, batch_share


@dataclass
class Part:
    """One learned part of a method: its module and, when it trains, its optimizer and schedule."""

    module: torch.nn.Module
    optimizer: torch.optim.Optimizer | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    optim: OptimConfig | None = None  # its optimizer settings: learning rate, schedule, gradient clipping
    scaler: torch.amp.GradScaler | None = None  # precision fp16's loss scaler
    sharded: bool = False  # by FSDP2 (distributed.strategy: fsdp2, rlcap.train.sharding): it reduces the gradients


class Trains(Protocol):
    """What a step reads of a session (:class:`rlcap.train.session.Session`): its parts and its processes."""

    parts: dict[str, Part]
    ranks: Ranks


def build_optimizer(params: Any,
                    cfg: OptimConfig) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """Adam or AdamW, with step decay every ``lr_decay_every`` epochs (the scheduler steps per epoch)."""
    opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[cfg.name]
    optimizer = opt_cls(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.lr_decay_every > 0:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, cfg.lr_decay_every, gamma=cfg.lr_decay_rate)
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0)
    return optimizer, scheduler


def apply_optim_settings(part: Part) -> None:
    """After loading a part's optimizer and schedule, apply the run's (possibly changed) settings:
    the learning rate keeps the decay reached so far, applied to the new base rate."""
    cfg = part.optim
    for group in part.optimizer.param_groups:
        base = group.get("initial_lr", group["lr"])
        if cfg.lr != base:  # (an unchanged rate stays bit-exact)
            group["lr"] = group["lr"] * cfg.lr / base
            group["initial_lr"] = cfg.lr
        group["weight_decay"] = cfg.weight_decay
    part.scheduler.base_lrs = [cfg.lr for _ in part.optimizer.param_groups]
    if isinstance(part.scheduler, torch.optim.lr_scheduler.StepLR):
        part.scheduler.step_size, part.scheduler.gamma = cfg.lr_decay_every, cfg.lr_decay_rate


def optimizer_step(session: Trains, loss: torch.Tensor, part: str = POLICY,
                   frozen: tuple[torch.nn.Parameter, ...] = ()) -> None:
    """Backward pass, gradient clipping (by global norm or by value) and one step of ``part``'s optimizer.
    ``frozen``: parameters of the part this step leaves exactly as they are (their gradients are
    dropped, so the optimizer skips them: [Wang18]'s alternating phases)."""
    p = session.parts[part]
    clip = p.optim
    p.optimizer.zero_grad(set_to_none=True)
    if p.sharded and session.ranks.stand_in:  # FSDP2 reduces the gradients in the backward pass: a rank without
        loss = loss * 0.0  # rows adds nothing there, whatever the loop weighed its stand-in by
    (p.scaler.scale(loss) if p.scaler is not None else loss).backward()
    for param in frozen:
        param.grad = None
    if session.ranks.stand_in and not p.sharded:  # a rank without rows adds nothing, whatever the loop weighed
        for param in p.module.parameters():  # its stand-in by, but joins the all-reduce with the same (zero) gradients
            if param.grad is not None:
                param.grad.zero_()
    if not p.sharded:  # (FSDP2 has averaged them)
        average_gradients(p.module.parameters(), session.ranks)  # every rank steps with the whole batch's gradient
    if p.scaler is not None:
        p.scaler.unscale_(p.optimizer)  # clip the true gradients
    if clip.grad_clip > 0 and clip.grad_clip_mode == "value":
        torch.nn.utils.clip_grad_value_(p.module.parameters(), clip.grad_clip)
    elif clip.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(p.module.parameters(), clip.grad_clip)
    if p.scaler is not None:
        p.scaler.step(p.optimizer)  # skipped when the scaled gradients overflowed
        p.scaler.update()
    else:
        p.optimizer.step()


class Steps(Protocol):
    """What :func:`shared_out` reads and sets of a session (:class:`rlcap.train.session.Session`)."""

    ranks: Ranks
    device: torch.device


def shared_out(session: Steps, batches: Iterable[Any]) -> Iterator[Any]:
    """Each of ``batches`` as this rank steps on it: a :class:`Batch`'s share of its images on the session's device,
    ``session.ranks.stand_in`` set for the step when the share is a stand-in (an epoch's short last batch, fewer
    images than processes: :func:`rlcap.distributed.batch_share`; :func:`optimizer_step` zeroes its gradient); a
    batch of another kind as it comes (a loop's own, which every rank reads whole). Once the batches end, or the
    loop leaves them early, the session's ranks are as they were, for validation and checkpoints."""
    ranks = session.ranks._replace(stand_in=False)
    try:
        for batch in batches:
            if isinstance(batch, Batch):
                rows, session.ranks = batch_share(len(batch.ids), ranks)
                batch = batch.shard(rows).to(session.device)
            yield batch
    finally:
        session.ranks = ranks
