"""FSDP2 (``distributed.strategy: fsdp2``): each of torchrun's processes holds 1/N of every learned part's weights,
gradients and optimizer state, through PyTorch's own ``torch.distributed.fsdp.fully_shard``.

* **Sharding** (:func:`shard_parts`, once every part is added and before the trainer state is restored): a
  :class:`~rlcap.models.base.Shardable` policy (a transformers one) is sharded one unit per decoder layer, then its
  transformers model as the root (the embeddings, final norm and output layer); so is the KL reference's frozen copy.
  Another part (a value network) is one unit. A policy of rlcap's own kind is refused in one line. With
  ``precision: bf16`` the units compute in bf16 and reduce their gradients in fp32 (FSDP2's
  ``MixedPrecisionPolicy``), the sharded weights and optimizer state staying fp32. Each trained part's optimizer
  is built again over the sharded parameters, so that its state is sharded too.
* **Gradients**: FSDP2 averages them over the ranks in the backward pass (a reduce-scatter), so
  :func:`rlcap.train.optimizer.optimizer_step` does not; a rank on a stand-in row multiplies its loss by 0 before
  the backward pass (its gradient is reduced there, not after).
* **Decoding** gathers the weights for as long as it lasts (:func:`rlcap.distributed.whole_weights`).
* **Checkpoints** (:func:`write_shards`, :func:`load_shards`): every rank writes its shards of each trained part's
  weights and optimizer state with ``torch.distributed.checkpoint`` into ``shards/`` of the checkpoint's temporary
  folder (rank 0's, which every rank is told), then rank 0 writes the rest of the checkpoint there (the weights
  gathered whole: ``policy.safetensors``, ``hf/``, which ``from_pretrained``, ``rlcap eval`` and ``init_from``
  read as any checkpoint's) and swaps it in as every save does: a kill during the save leaves the previous
  checkpoint whole. A resumed run loads its shards back after sharding (the same number of processes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import torch

from rlcap.distributed import Ranks, from_main
from rlcap.errors import ConfigError
from rlcap.models.base import Shardable
from rlcap.train.checkpoint import MANIFEST, POLICY, temporary_folder
from rlcap.train.optimizer import Part, build_optimizer

SHARDS = "shards"  # the checkpoint's folder of torch.distributed.checkpoint files (each rank's, and their index)


class Sharded(Protocol):
    """What this module reads of a session (:class:`rlcap.train.session.Session`)."""

    parts: dict[str, Part]
    ranks: Ranks


def shard_parts(session: Sharded, precision: str) -> None:
    """Shard every part of the session with ``fully_shard`` (module docstring); ``precision`` the run's."""
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
        if part.optimizer is not None:  # built again over the shards: its state is sharded as they are
            part.optimizer, part.scheduler = build_optimizer(part.module.parameters(), part.optim)
        part.sharded = True


def write_shards(parts: dict[str, Part], folder: Path, ranks: Ranks) -> tuple[Path | None, dict[str, Any]]:
    """Every rank's shards of the sharded parts into the temporary folder of checkpoint ``folder`` (made by rank 0,
    its name sent to the others), and the parts' whole weights (rank 0; the others get none). (None, {}) when no
    part is sharded. A collective: every rank calls it."""
    sharded = {name: part for name, part in parts.items() if part.sharded}
    if not sharded:
        return None, {}
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_state_dict)

    tmp = Path(from_main(str(temporary_folder(folder, fresh=True)) if ranks.main else None, ranks))
    states = {}
    for name, part in sharded.items():
        if part.optimizer is not None:
            model, optim = get_state_dict(part.module, part.optimizer)
            states[name] = {"model": model, "optim": optim}
    dcp.save(states, checkpoint_id=tmp / SHARDS)
    whole = StateDictOptions(full_state_dict=True, cpu_offload=True)  # (gathered on rank 0 only)
    return tmp, {name: get_model_state_dict(part.module, options=whole) for name, part in sharded.items()}


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


def check_strategy(folder: Path, strategy: str) -> None:
    """ConfigError when the checkpoint ``folder`` a run resumes was written under the other strategy (a DDP
    checkpoint's optimizer state is whole in trainer.pt, an FSDP2 one's in shards/)."""
    was = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("strategy", "ddp")
    if was != strategy:
        raise ConfigError(f"{folder} was written with distributed.strategy={was} and is resumed with "
                          f"distributed.strategy={strategy}: resume it with distributed.strategy={was}")
