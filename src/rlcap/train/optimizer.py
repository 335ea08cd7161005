"""A part's optimizer and schedule, one optimizer step (backward, gradient averaging across torchrun's
processes, clipping, the fp16 gradient scaler), the share of a batch each process steps on, and FSDP2's
sharding of the parts.

**FSDP2** (``distributed.strategy: fsdp2``): each of torchrun's processes holds 1/N of every learned part's weights,
gradients and optimizer state, through PyTorch's own ``torch.distributed.fsdp.fully_shard``.

* **Sharding** (:func:`shard_parts`, once every part is added and before the trainer state is restored): a
  :class:`~rlcap.models.base.Shardable` policy (a transformers one) is sharded one unit per decoder layer, then its
  transformers model as the root (the embeddings, final norm and output layer); so is the KL reference's frozen copy.
  Another part (a value network) is one unit. A policy of rlcap's own kind is refused in one line. With
  ``precision: bf16`` the units compute in bf16 and reduce their gradients in fp32 (FSDP2's
  ``MixedPrecisionPolicy``), the sharded weights and optimizer state staying fp32. Each trained part's optimizer
  is built again over the sharded parameters, so that its state is sharded too.
* **Gradients**: FSDP2 averages them over the ranks in the backward pass (a reduce-scatter), so
  :func:`optimizer_step` does not; a rank on a stand-in row multiplies its loss by 0 before
  the backward pass (its gradient is reduced there, not after).
* **Decoding** gathers the weights for as long as it lasts (:func:`rlcap.distributed.whole_weights`), or, with
  ``distributed.decode_weights: sharded``, decodes from the shards, every rank stepping as long as the longest
  (:func:`rlcap.distributed.decode_sharded`).
* **Checkpoints** (:func:`write_shards`, :func:`load_shards`): every rank writes its shards of each trained part's
  weights and optimizer state with ``torch.distributed.checkpoint`` into ``shards/`` of the checkpoint's temporary
  folder (rank 0's, which every rank is told), then rank 0 writes the rest of the checkpoint there (the weights
  gathered whole: ``policy.safetensors``, ``hf/``, which ``from_pretrained``, ``rlcap eval`` and ``init_from``
  read as any checkpoint's) and swaps it in as every save does: a kill during the save leaves the previous
  checkpoint whole. A resumed run loads its shards back after sharding (the same number of processes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Protocol

import torch

from rlcap.data.loader import Batch, FeaturesOf, ReadsShares
from rlcap.run_config import OptimConfig
from rlcap.errors import ConfigError
from rlcap.models.base import Shardable, frozen_aside, release_loaded_file
from rlcap.train.checkpoint import POLICY, temporary_folder
from rlcap.distributed import Ranks, average_gradients, batch_share, decode_sharded, from_main


@dataclass
class Part:
    """One learned part of a method: its module and, when it trains, its optimizer and schedule."""

    module: torch.nn.Module
    optimizer: torch.optim.Optimizer | None = None
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
    optim: OptimConfig | None = None  # its optimizer settings: learning rate, schedule, gradient clipping
    scaler: torch.amp.GradScaler | None = None  # precision fp16's loss scaler
    sharded: bool = False  # by FSDP2 (distributed.strategy: fsdp2, rlcap.train.optimizer): it reduces the gradients


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
    p.optimizer.zero_grad(set_to_none=True)  # used: held by no rank between steps (forward passes, saves)


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


SHARDS = "shards"  # the checkpoint's folder of torch.distributed.checkpoint files (each rank's, and their index)


def shard_parts(session: Trains, precision: str, decode_weights: str = "whole") -> None:
    """Shard every part of the session with ``fully_shard`` (module docstring); ``precision`` the run's;
    ``decode_weights`` its ``distributed.decode_weights`` (sharded: the parts decode from their shards)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mixed = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if precision == "bf16" else MixedPrecisionPolicy()
    for name, part in session.parts.items():
        if isinstance(part.module, Shardable):
            root, units = part.module.shard_units()
        elif name == POLICY:
            raise ConfigError(f"distributed.strategy=fsdp2 shards transformers policies (model.arch=hf), not "
                              f"{type(part.module).__name__}: use distributed.strategy=ddp")
        else:
            root, units = part.module, []
        for unit in units:
            fully_shard(unit, mp_policy=mixed, reshard_after_forward=True)
        fully_shard(root, mp_policy=mixed, reshard_after_forward=True)
        if decode_weights == "sharded":
            decode_sharded(part.module)
        if part.optimizer is not None:  # built again over the shards: its state is sharded as they are
            part.optimizer, part.scheduler = build_optimizer(part.module.parameters(), part.optim)
        part.sharded = True
    for kept in {id(m): m for part in session.parts.values() for m in frozen_aside(part.module)}.values():
        release_loaded_file(kept)  # (else the pages sharding read of the loaded file stay resident)


class WholeWeights:
    """The sharded parts' whole weights, gathered on rank 0 one part at a time as the checkpoint writes it
    (:meth:`take`, in the parts' order), so that rank 0 never holds two parts whole at once (a policy and its KL
    reference). Each gather is a collective: the other ranks :meth:`drain` (take every part, getting nothing),
    and so does rank 0 after its write, whether it finished or failed."""

    def __init__(self, parts: dict[str, Part]) -> None:
        self.parts = {name: part for name, part in parts.items() if part.sharded}
        self.pending = list(self.parts)

    def __contains__(self, name: object) -> bool:
        return name in self.parts

    def take(self, name: str) -> dict[str, torch.Tensor]:
        """Part ``name``'s whole weights on rank 0 (empty on the others); the parts before it are taken first."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        whole = StateDictOptions(full_state_dict=True, cpu_offload=True)  # (gathered on rank 0 only)
        while self.pending:
            next_name = self.pending.pop(0)
            state = get_model_state_dict(self.parts[next_name].module, options=whole)
            if next_name == name:
                return state
        raise KeyError(f"{name}: not a sharded part, or taken already")

    def drain(self) -> None:
        while self.pending:
            self.take(self.pending[-1])


def write_shards(parts: dict[str, Part], folder: Path, ranks: Ranks) -> tuple[Path | None, WholeWeights]:
    """Every rank's shards of the sharded parts into the temporary folder of checkpoint ``folder`` (made by rank 0,
    its name sent to the others), and the parts' whole weights to gather (:class:`WholeWeights`). None for the
    folder when no part is sharded. A collective: every rank calls it."""
    sharded = {name: part for name, part in parts.items() if part.sharded}
    if not sharded:
        return None, WholeWeights({})
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    tmp = Path(from_main(str(temporary_folder(folder, fresh=True)) if ranks.main else None, ranks))
    states = {}
    for name, part in sharded.items():
        if part.optimizer is not None:
            model, optim = get_state_dict(part.module, part.optimizer)
            states[name] = {"model": model, "optim": optim}
    dcp.save(states, checkpoint_id=tmp / SHARDS)
    return tmp, WholeWeights(sharded)


def load_shards(parts: dict[str, Part], folder: Path) -> None:
    """Each trained sharded part's weights and optimizer state from checkpoint ``folder``'s shards (every rank)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    trained = {name: part for name, part in parts.items() if part.sharded and part.optimizer is not None}
    states = {}
    for name, part in trained.items():
        model, optim = get_state_dict(part.module, part.optimizer)
        states[name] = {"model": model, "optim": optim}
    dcp.load(states, checkpoint_id=folder / SHARDS)
    for name, part in trained.items():
        set_state_dict(part.module, part.optimizer, model_state_dict=states[name]["model"],
                       optim_state_dict=states[name]["optim"])


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

