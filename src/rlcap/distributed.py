"""Several processes, launched by torchrun: ``torchrun --standalone --nproc-per-node N -m rlcap train CONFIG``
(several machines: torchrun's ``--nnodes``, ``--node-rank`` and ``--rdzv-endpoint``).

Each process (rank) trains on its contiguous share of every global batch (the seeded batch of
``batch_size`` images, so the data order does not depend on the number of processes; a rank left without
an image by a short last batch steps on a stand-in weighed zero: :func:`batch_share`); after each
backward pass the gradients of the part being stepped are averaged over the ranks (``all_reduce`` of their
flattened values, in buckets of at most 25 MiB), so every rank keeps the same parameters; rank 0 alone
writes checkpoints, logs and TensorBoard, and validates, its scores sent to the others. gloo on the
CPU, NCCL on CUDA. One process (no torchrun) is rank 0 of 1, and nothing here changes what it does.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple
from weakref import WeakSet

import torch
import torch.distributed as dist

from rlcap.config import help_field
from rlcap.errors import ConfigError


class Ranks(NamedTuple):
    rank: int = 0
    world: int = 1
    # this rank holds no image of the step's batch (a short last batch of fewer images than processes): it steps
    # on a stand-in row that every count and loss of the step weighs zero (:func:`batch_share`)
    stand_in: bool = False

    @property
    def main(self) -> bool:
        """The process that writes and validates."""
        return self.rank == 0


def join(device: torch.device) -> Ranks:
    """This process's place among torchrun's (the process group started on first call)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's launch setting: the processes it started
    if world == 1:
        return Ranks()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        # left to the interpreter's exit, the group's threads can be torn down still joinable: std::terminate,
        # SIGABRT after a finished run (seen once under CI, a rank of a 2-process actor-critic run)
        atexit.register(_leave)
    return Ranks(dist.get_rank(), dist.get_world_size())


def _leave() -> None:
    """Destroy the process group at exit (this process's side only: no collective, so a rank that failed
    does not hold the others)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def finish_together() -> None:
    """At a run's normal end, under torchrun: wait until every rank has finished (rank 0 still writing its last
    checkpoint, or choosing lookahead's lambda), then destroy the group on every rank while all of them are still
    running, not at interpreter exit (a rank of torchrun also skips the interpreter's teardown: rlcap/__main__.py).
    A rank that failed never gets here; the others then stop on torchrun's signal (and :func:`_leave`)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def launched_rank() -> int:
    """The rank torchrun gave this process (0 without torchrun), before any process group exists."""
    return int(os.environ.get("RANK", "0"))  # torchrun's launch setting


def launched_world() -> tuple[int, int]:
    """The processes torchrun started, in all and on this machine ((1, 1) without torchrun), before any process
    group exists: what a command that continues the run starts again."""
    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun's


GRADIENT_BUCKET = 25 << 20  # bytes a gradient all-reduce carries at most (torch DDP's default bucket size)


def average_gradients(params: Any, ranks: Ranks, bucket: int = GRADIENT_BUCKET) -> None:
    """Replace each parameter's gradient by its mean over the ranks (parameters without one skipped:
    a frozen half has none on every rank alike), in all-reduces of at most ``bucket`` bytes of gradients each
    (a larger gradient alone, in place): a rank holds one bucket's flat copy, not one of the whole gradient
    (4 bytes a parameter more at the step's peak, as measured at 323M parameters: docs/BENCHMARKS.md)."""
    if ranks.world == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    for group in _buckets(grads, bucket):
        if len(group) == 1 and group[0].is_contiguous():
            dist.all_reduce(group[0])
            group[0] /= ranks.world
            continue
        flat = torch.cat([g.reshape(-1) for g in group])
        dist.all_reduce(flat)
        flat /= ranks.world
        offset = 0
        for g in group:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def _buckets(grads: list[torch.Tensor], size: int) -> Iterator[list[torch.Tensor]]:
    """``grads`` in order, in runs of at most ``size`` bytes (a gradient larger than that alone)."""
    group: list[torch.Tensor] = []
    held = 0
    for g in grads:
        n = g.numel() * g.element_size()
        if group and held + n > size:
            yield group
            group, held = [], 0
        group.append(g)
        held += n
    if group:
        yield group


def total(value: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """``value`` summed over the ranks (itself for one process)."""
    if ranks.world == 1:
        return value
    out = value.clone()
    dist.all_reduce(out)
    return out


def word_share(mask: torch.Tensor, ranks: Ranks) -> torch.Tensor | float:
    """The factor that makes a rank's per-word mean loss count as its share of the whole batch's words:
    this rank's words / all ranks' words x the number of ranks. A loss that averages over ``mask`` (its
    rank's words), multiplied by it, gives averaged gradients equal to the global batch's per-word mean,
    also when the ranks' captions differ in length. One process: exactly 1 (the loss is left as it is)."""
    return count_share(mask.sum().float(), ranks)


def count_share(count: torch.Tensor, ranks: Ranks) -> torch.Tensor | float:
    """The same factor for a rank's count of items (words, images: a () float tensor on the run's device):
    count / all ranks' counts x the number of ranks; 1 for one process; 0 for a rank on a stand-in, whose
    count is none (it still takes part in the all-reduce, so that every rank's collectives match)."""
    if ranks.world == 1:
        return 1.0
    mine = torch.zeros_like(count) if ranks.stand_in else count
    return mine / total(mine, ranks) * ranks.world


def counted(values: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """The values (rows first) a rank adds to the whole batch's statistics: its own, none on a stand-in."""
    return values[:0] if ranks.stand_in else values


def global_mean(values: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """The mean of ``values`` over every rank's values (()), a stand-in's left out; each rank's own mean for one
    process."""
    if ranks.world == 1:
        return values.float().mean()
    mine = counted(values.float(), ranks)
    both = total(torch.stack([mine.sum(), torch.tensor(float(mine.numel()), device=values.device)]), ranks)
    return both[0] / both[1]


_STOP_SIGNAL: list[int] = []  # the first signal that asked this process to stop at its next step boundary


def stop_at_step_boundary(signum: int, frame: object) -> None:
    """A signal handler (torchrun's processes): stop at the next step boundary rather than where the
    signal lands. A rank that stopped inside a step would leave the others waiting in a collective."""
    if not _STOP_SIGNAL:
        _STOP_SIGNAL.append(signum)


def stop_signal(ranks: Ranks, device: torch.device) -> int:
    """The signal that asked the run to stop (0: none), the same on every rank: the largest any rank got
    (one small ``all_reduce`` a step, only under torchrun), so that all stop after the same step."""
    mine = _STOP_SIGNAL[0] if _STOP_SIGNAL else 0
    if ranks.world == 1:
        return mine
    flag = torch.tensor([mine], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item())


def from_main(obj: Any, ranks: Ranks) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if ranks.world == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def shard_rows(n: int, ranks: Ranks) -> slice:
    """This rank's contiguous share of ``n`` rows (the first ranks take one more when n does not divide)."""
    base, extra = divmod(n, ranks.world)
    start = ranks.rank * base + min(ranks.rank, extra)
    return slice(start, start + base + (1 if ranks.rank < extra else 0))


def batch_share(n: int, ranks: Ranks) -> tuple[slice, Ranks]:
    """This rank's rows of a training batch of ``n`` (>= 1) images and the ranks it steps with. A rank whose
    :func:`shard_rows` are none (the epoch's short last batch, fewer images than processes) steps on the batch's
    first image as a stand-in, ``stand_in`` set: the step runs every collective the others run (an empty rank
    skipping the step left them waiting, or divided by zero), and :func:`count_share`, :func:`global_mean` and
    the optimizer step weigh the stand-in zero, so the step trains what one process trains (fairseq's dummy
    batch, whose loss is multiplied by 0)."""
    rows = shard_rows(n, ranks)
    if rows.start < rows.stop:
        return rows, ranks._replace(stand_in=False)
    return slice(0, 1), ranks._replace(stand_in=True)


def gathered(obj: Any, ranks: Ranks) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank (``[obj]`` for one process)."""
    if ranks.world == 1:
        return [obj]
    out: list[Any] = [None] * ranks.world
    dist.all_gather_object(out, obj)
    return out


_GATHERED: set[int] = set()  # the modules whose FSDP2 shards :func:`whole_weights` holds gathered now
_DECODES_SHARDED: WeakSet[torch.nn.Module] = WeakSet()  # the sharded modules that decode from their shards
_IN_STEP: set[int] = set()  # those of them decoding now: every rank steps as long as the longest rank's decode


def decode_sharded(module: torch.nn.Module) -> None:
    """Let ``module`` (sharded by FSDP2) decode from its shards (``distributed.decode_weights: sharded``):
    :func:`whole_weights` then gathers nothing, each forward call of a decode gathers its layers one unit at a time
    (as a training forward does), and every rank decodes as many steps as the rank that decodes longest
    (:func:`ended_everywhere`; transformers' ``generate(synced_gpus=True)`` does the same under FSDP and ZeRO-3)."""
    _DECODES_SHARDED.add(module)


def ended_everywhere(done: torch.Tensor, model: torch.nn.Module, ready: bool = True) -> bool:
    """Whether every row of ``done`` (R,) has ended (and ``ready``: the loop has no rows still to start): a decode
    loop's exit check. For a model decoding from its
    shards (:func:`decode_sharded`, inside :func:`whole_weights`), every rank's rows (a collective: each rank
    asks at the same steps, since a sharded forward call is one too)."""
    ended = ready and bool(done.all())
    if id(model) not in _IN_STEP:
        return ended
    flag = torch.tensor([int(ended)], device=done.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def decodes_in_step(model: torch.nn.Module) -> bool:
    """Whether ``model`` decodes from its shards now (:func:`decode_sharded`): every rank must make the same
    decode calls, a rank with fewer batches to decode than another decoding a stand-in."""
    return id(model) in _IN_STEP


@contextmanager
def whole_weights(module: torch.nn.Module, gather: bool = False) -> Iterator[None]:
    """``module`` with its FSDP2 shards gathered (``distributed.strategy: fsdp2``) while the context lasts, and
    sharded again after: a decode (sampling, greedy baselines, validation) makes as many forward calls as its
    captions need, which differ between ranks, and a sharded forward gathers each layer in a collective that
    every rank must join. Gathered once, on every rank together (each rank enters once, whatever it decodes
    then), the weights stay whole for every call until the context ends, as verl gathers its FSDP actor's
    weights for generation. A module not sharded, or already gathered, is left as it is; one that decodes from
    its shards (:func:`decode_sharded`) is not gathered, its ranks stepping together instead, unless ``gather``
    (a decode whose number of forward calls differs by rank, whatever its rows: Monte-Carlo rollouts)."""
    if not dist.is_initialized() or id(module) in _GATHERED or id(module) in _IN_STEP:
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in module.modules() if isinstance(m, FSDPModule)]
    if not units:
        yield
        return
    held = _IN_STEP if module in _DECODES_SHARDED and not gather else _GATHERED
    if held is _GATHERED:
        for unit in units:
            unit.unshard()  # (each unit's all-gather, in the same order on every rank)
            unit.set_reshard_after_forward(False, recurse=False)
    held.add(id(module))
    try:
        yield
    finally:
        held.discard(id(module))
        if held is _GATHERED:
            for unit in units:
                unit.reshard()
                unit.set_reshard_after_forward(True, recurse=False)


STRATEGIES = ("ddp", "fsdp2")
DECODE_WEIGHTS = ("whole", "sharded")


@dataclass
class DistributedConfig:
    strategy: str = help_field(
        "ddp", "under torchrun: ddp (every process holds the whole policy and averages its gradients) or fsdp2 "
        "(torch's fully_shard: each process holds 1/N of the weights, gradients and optimizer state of a "
        "model.arch=hf policy; docs/TRAINING.md, \"DDP or FSDP2\")")
    decode_weights: str = help_field(
        "whole", "under fsdp2, how a sharded policy decodes (sampling, baselines, validation): whole (its weights "
        "gathered on every process while a decode lasts: fast, as much memory as DDP's weights) or sharded (each "
        "forward call gathers one layer at a time, every process stepping as long as the longest: a rank never "
        "holds the whole policy; docs/TRAINING.md, \"DDP or FSDP2\")")

    def validate(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"distributed.strategy: {self.strategy!r} is not one of {list(STRATEGIES)}")
        if self.decode_weights not in DECODE_WEIGHTS:
            raise ConfigError(f"distributed.decode_weights: {self.decode_weights!r} is not one of "
                              f"{list(DECODE_WEIGHTS)}")
        if self.decode_weights == "sharded" and self.strategy != "fsdp2":
            raise ConfigError("distributed.decode_weights=sharded decodes a policy FSDP2 shards: set "
                              "distributed.strategy=fsdp2, or leave distributed.decode_weights=whole")

    def check_run(self, run: Any, name: str) -> None:
        """(``run``: the :class:`rlcap.run_config.RunConfig` this section is part of.) FSDP2 shards a transformers
        policy (that of a run with init_from, its checkpoint's, is checked as it is
        sharded: rlcap.train.optimizer), in fp32 or bf16 (FSDP2's own mixed precision, no loss scaler)."""
        if self.strategy != "fsdp2":
            return
        if run.init_from is None and run.model.arch != "hf":
            raise ConfigError(f"distributed.strategy=fsdp2 shards transformers policies (model.arch=hf), not "
                              f"model.arch={run.model.arch}: use distributed.strategy=ddp")
        if run.model.train_vision != "frozen":  # (its units are the language model's layers)
            raise ConfigError(f"distributed.strategy=fsdp2 shards the language model's layers; the image side that "
                              f"model.train_vision={run.model.train_vision} trains is not sharded yet: use "
                              "distributed.strategy=ddp, or model.train_vision=frozen")
        if run.precision == "fp16":
            raise ConfigError("distributed.strategy=fsdp2 runs in precision fp32 or bf16 (FSDP2's mixed precision: "
                              "bf16 weights, fp32 reduction), not fp16")
