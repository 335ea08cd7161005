"""``distributed.decode_weights: sharded``: an FSDP2 policy decodes from its shards, every rank stepping as long as the
longest. The loop's exit check on 2 gloo processes whose rows end at different steps; SCST and GRPO (its KL
reference sharded too) on a tiny Qwen2-VL log the losses and validation scores of ``decode_weights: whole``, with a
validation split whose batches do not divide between the ranks (one decodes a stand-in)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlcap.api import load_run_config
from rlcap.distributed import decode_sharded, decodes_in_step, ended_everywhere, whole_weights
from rlcap.errors import ConfigError
from rlcap.train.logger import read_log
from tests.train.killing import train_losses
from tests.train.test_fsdp2 import _train, tiny_vlm  # noqa: F401  (tiny_vlm: the module's fixture)

pytest.importorskip("transformers")


def _steps_until_ended(rank: int, world: int, port: int, found: dict) -> None:
    """Rank r's rows end after r * 3 + 2 steps; a loop asks ``ended_everywhere`` after every step."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from torch.distributed.fsdp import fully_shard

        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
        fully_shard(model)
        counts = []
        for sharded in (False, True):
            if sharded:
                decode_sharded(model)
            with whole_weights(model):
                steps = 0
                for p in range(20):
                    model(torch.ones(1, 4))  # (sharded: each call gathers the layers, a collective)
                    steps += 1
                    if ended_everywhere(torch.tensor([p + 1 >= rank * 3 + 2]), model):
                        break
                counts.append((steps, decodes_in_step(model)))
        found[rank] = counts
    finally:
        dist.destroy_process_group()


def test_ranks_decoding_from_shards_step_until_every_rank_has_ended():
    found = mp.Manager().dict()
    port = 29500 + os.getpid() % 1000
    mp.spawn(_steps_until_ended, args=(2, port, found), nprocs=2)
    # gathered, each rank stops at its own rows' end; from shards, both step as long as rank 1
    assert dict(found) == {0: [(2, False), (5, True)], 1: [(5, False), (5, True)]}


def test_decode_weights_refusals_are_one_line():
    with pytest.raises(ConfigError, match=r"^distributed.decode_weights=sharded decodes a policy FSDP2 shards: set "
                                          r"distributed.strategy=fsdp2, or leave distributed.decode_weights=whole$"):
        load_run_config(None, ["distributed.decode_weights=sharded"])
    with pytest.raises(ConfigError, match=r"^distributed.decode_weights: 'half' is not one of \['whole', 'sharded'\]$"):
        load_run_config(None, ["distributed.decode_weights=half"])


RL = ["rl.batch_size=4", "rl.n_samples=2", "rl.epochs=1", "optim.lr=0.001",
      "val.max_images=6", "val.batch_size=2"]  # (3 validation batches: rank 0 decodes 2, rank 1 one and a stand-in)


@pytest.fixture(scope="module")
def xe_start(tiny_vlm, tmp_path_factory):  # noqa: F811
    """One epoch of XE (DDP) on the tiny Qwen2-VL: the RL runs' start."""
    _, _, common = tiny_vlm
    out = tmp_path_factory.mktemp("xe")
    _train("shapes_xe", [*common, "xe.epochs=1", "optim.lr=0.003", f"out_dir={out}"], "ddp")
    return out / "best"


@pytest.mark.slow  # (5 starts of torchrun)
@pytest.mark.parametrize("recipe,extra", [("shapes_scst", []),
                                          ("shapes_grpo", ["rl.kl_coef=0.04", "grpo.iterations=2"])])
def test_decoding_from_shards_logs_the_losses_of_gathered_weights(tiny_vlm, xe_start, tmp_path, recipe,  # noqa: F811
                                                                   extra):
    _, _, common = tiny_vlm
    items = [*(o for o in common if not o.startswith("max_steps") and not o.startswith("model.")), *RL, *extra,
             f"init_from={xe_start}"]
    for mode in ("whole", "sharded"):
        _train(recipe, [*items, f"distributed.decode_weights={mode}", f"out_dir={tmp_path / mode}"], "fsdp2")
    whole, sharded = (train_losses(tmp_path / m) for m in ("whole", "sharded"))
    assert sorted(whole) == sorted(sharded) == list(range(1, 7))  # (24 training pictures, 4 a step)
    assert max(abs(whole[s] - sharded[s]) for s in whole) < 1e-5, (whole, sharded)
    assert any(abs(v) > 1e-4 for v in whole.values())
    scores = [[(r["step"], r["CIDEr"]) for r in read_log(tmp_path / m / "log.jsonl") if r["split"] == "val"]
              for m in ("whole", "sharded")]
    assert scores[0] and len(scores[0]) == len(scores[1])
    assert all(a[0] == b[0] and abs(a[1] - b[1]) < 1e-6 for a, b in zip(*scores)), scores
