"""A sharded policy does not keep the file its weights were loaded from: ``from_pretrained`` leaves every weight a
view of one memory map of the folder's safetensors file, and the image side a policy keeps aside (frozen, for its
export) outlived the language model's loaded weights once FSDP2 had sharded them, holding the whole map (every page
of it that sharding read) in the process. ``shard_parts`` now gives the kept-aside side its own memory
(rlcap.models.base.hold_in_own_memory), the same values."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlcap.models.base import hold_in_own_memory

pytest.importorskip("transformers")


def mapped(folder: Path) -> bool:
    """Whether this process maps a safetensors file of ``folder``."""
    return any(str(folder) in line and ".safetensors" in line for line in Path("/proc/self/maps").read_text().split("\n"))


def _shard(rank: int, folder: Path, port: int, found: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=1)
    try:
        from rlcap.models.hf.vlm import HFVLMCaptioner
        from rlcap.train.optimizer import Part, shard_parts

        policy = HFVLMCaptioner(folder)
        before = {k: v.clone() for k, v in policy.frozen_aside()[0].state_dict().items()}
        found["mapped after loading"] = mapped(folder)
        session = type("Session", (), {"parts": {"policy": Part(policy)}})()
        shard_parts(session, "fp32")
        gc.collect()
        found["mapped after sharding"] = mapped(folder)
        after = policy.frozen_aside()[0].state_dict()
        found["same side"] = after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    finally:
        dist.destroy_process_group()


def test_sharding_releases_the_loaded_file(tmp_path):
    from tests.models.vlm_matrix import tiny_vlm_run

    _, folder, _ = tiny_vlm_run(tmp_path)
    found = mp.Manager().dict()
    mp.spawn(_shard, args=(Path(folder).resolve(), 29500 + os.getpid() % 1000 + 7, found), nprocs=1)
    assert dict(found) == {"mapped after loading": True, "mapped after sharding": False, "same side": True}


def test_a_side_in_its_own_memory_releases_the_map(tmp_path):
    """Without the language model's weights, the kept-aside side alone held the map; in its own memory it does not."""
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from tests.models.vlm_matrix import tiny_vlm_run

    _, folder, _ = tiny_vlm_run(tmp_path)
    folder = Path(folder).resolve()
    for own in (False, True):
        policy = HFVLMCaptioner(folder)
        side = policy.frozen_aside()[0]
        if own:
            hold_in_own_memory(side)
        del policy
        gc.collect()
        assert mapped(folder) is not own
        del side
        gc.collect()
        assert not mapped(folder)
