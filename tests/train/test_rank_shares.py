"""The helpers that make several ranks' losses and statistics the whole batch's (gloo, 2 processes spawned here):
a per-word mean weighted by :func:`word_share` averages over the ranks to the global per-word mean,
:func:`global_mean` (the running-mean baseline's batch mean) is the mean over every rank's rewards, and
:func:`average_gradients` averages every gradient whatever the bucket it goes in."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlcap.distributed import Ranks, average_gradients, global_mean, word_share

# rank r's words: (logprob-like values, mask); rank 0 has 5 words, rank 1 has 2
VALUES = [torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]]), torch.tensor([[6.0, 7.0, 0.0]])]
MASKS = [torch.tensor([[1, 1, 1], [1, 1, 0]]), torch.tensor([[1, 1, 0]])]
REWARDS = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0])]


def _worker(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    ranks = Ranks(rank, 2)
    x = torch.ones((), requires_grad=True)  # d loss / d x is the rank's (weighted) per-word mean of VALUES
    per_word_mean = (VALUES[rank] * x * MASKS[rank]).sum() / MASKS[rank].sum()
    (per_word_mean * word_share(MASKS[rank], ranks)).backward()
    grad = x.grad.clone()
    dist.all_reduce(grad)
    grad /= 2  # what average_gradients does
    torch.save({"grad": float(grad), "mean": float(global_mean(REWARDS[rank], ranks))}, f"{out}.{rank}")
    dist.destroy_process_group()


def test_word_share_and_global_mean_over_two_ranks(tmp_path):
    mp.spawn(_worker, args=(f"file://{tmp_path / 'store'}", str(tmp_path / "out")), nprocs=2, join=True)
    results = [torch.load(tmp_path / f"out.{r}") for r in (0, 1)]
    assert results[0] == results[1]
    assert results[0]["grad"] == 28.0 / 7  # (1+2+3+4+5+6+7) / 7 words, not (15/5 + 13/2) / 2
    assert results[0]["mean"] == 16.0 / 4


def _bucket_worker(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in ((3, 4), (5,), (40,), (2, 3), (1,))]
    for k, p in enumerate(params):
        p.grad = torch.arange(p.numel(), dtype=torch.float32).view_as(p) * (k + 1) * (rank + 1)
    params[3].grad = params[3].grad.t().contiguous().t()  # (a gradient that is not contiguous)
    params.append(torch.nn.Parameter(torch.zeros(2)))  # (one without a gradient: skipped)
    average_gradients(params, Ranks(rank, 2), bucket=64)  # 16 floats a bucket: groups, and 40 floats alone
    torch.save([p.grad for p in params], f"{out}.{rank}")
    dist.destroy_process_group()


def test_gradients_averaged_in_buckets(tmp_path):
    mp.spawn(_bucket_worker, args=(f"file://{tmp_path / 'store'}", str(tmp_path / "out")), nprocs=2, join=True)
    got = [torch.load(tmp_path / f"out.{r}") for r in (0, 1)]
    for k, (a, b) in enumerate(zip(*got[0:2])):
        if k == 5:
            assert a is None and b is None
            continue
        mean = torch.arange(a.numel(), dtype=torch.float32).view_as(a) * (k + 1) * 1.5  # ((k+1) x + 2 (k+1) x) / 2
        assert torch.equal(a, mean) and torch.equal(b, mean), k


def test_one_process_leaves_the_loss_alone():
    assert word_share(MASKS[0], Ranks()) == 1.0
    assert float(global_mean(REWARDS[0], Ranks())) == 2.0
