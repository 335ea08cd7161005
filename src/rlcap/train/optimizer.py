"""A part's optimizer and schedule, one optimizer step (backward, gradient averaging across torchrun's
processes, clipping, the fp16 gradient scaler), and the share of a batch each process steps on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol

import torch

from rlcap.data.loader import Batch, FeaturesOf, ReadsShares
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


def optimizer_step(session: Trains, loss: torch.Tensor, part: str = POLICY,
                   frozen: tuple[torch.nn.Parameter, ...] = ()) -> None:
    """Backward pass, gradient clipping (by global norm or by value) and one step of ``part``'s optimizer.
    ``frozen``: parameters of the part this step leaves exactly as they are (their gradients are
    dropped, so the optimizer skips them: [Wang18]'s alternating phases)."""
    p = session.parts[part]
    clip = p.optim
    p.optimizer.zero_grad(set_to_none=True)
    (p.scaler.scale(loss) if p.scaler is not None else loss).backward()
    for param in frozen:
        param.grad = None
    if session.ranks.stand_in:  # a rank without rows adds nothing, whatever the loop weighed its stand-in by,
        for param in p.module.parameters():  # but joins the all-reduce with the same gradients (zeros)
            if param.grad is not None:
                param.grad.zero_()
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


def own_share(online: FeaturesOf | None, ranks: Ranks) -> FeaturesOf | None:
    """``online`` (features computed from the pictures) reading, for a training batch, only the rows this process
    steps on (:func:`batch_share`: its share, or the stand-in row of a short last batch); the other rows, which
    :meth:`Batch.shard` drops, are not computed. Validation's and evaluation's reads stay whole."""
    if online is None or ranks.world == 1:
        return online

    def of(records: list[Any]) -> Any:
        features = online(records)
        if isinstance(features, ReadsShares):
            features.read_shares(lambda n: batch_share(n, ranks)[0])
        return features

    return of

