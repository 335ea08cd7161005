"""Host synchronisations of a training step, counted on the CPU (rlcap.host_sync): every read of a tensor's
value on the host, which on a GPU waits for the device's queue to drain. SCST with the greedy baseline and a
CPU reward makes two (the sampled and the greedy tokens go to the reward); every method has its budget."""

import importlib
import math
import pkgutil
import sys
from pathlib import Path

import pytest
import torch

import rlcap.methods
from rlcap import api
from rlcap.decoding import stepping
from rlcap.errors import ConfigError, RlcapError
from rlcap.host_sync import count_host_syncs, on_host, optimizer_host_state, to_device, to_host
from rlcap.train import session as session_module
from rlcap.train.checkpoint import load_checkpoint
from tests.tiny import make_tiny_dataset, tiny_overrides


# ------------------------------------------------------------------ the counter itself
def test_the_counter_sees_every_kind_of_host_read():
    t = torch.tensor([1.0, 0.0, 2.0])
    with count_host_syncs() as n:
        t.sum().item()
        float(t[0])
        bool(t.all())
        t.nonzero()
        t[t > 0]  # a boolean index: its true positions are found on the host
        t.tolist()
        t.numpy()
        to_host(t)
        torch.repeat_interleave(t, 2)  # fine: the output size is known without the values
        torch.repeat_interleave(t, torch.tensor([1, 2, 1]))  # not: it depends on them
    assert n.total == 9, str(n)
    assert n.by_kind["aten._local_scalar_dense"] == 3 and n.by_kind["to_host"] == 1, n.by_kind


def test_device_work_host_work_and_host_resident_numbers_are_not_counted():
    t = torch.randn(4, 3)
    step = torch.tensor(5.0)
    with count_host_syncs([step]) as n:
        (t @ t.T).softmax(-1).argmax(-1)
        torch.where(t > 0, t, 0.0).cumsum(1)
        to_device(t, "cpu")
        step.item()  # an optimizer's step count lives on the host on every device
        with on_host():
            t.tolist()
    assert n.total == 0, str(n)


def test_adam_step_counts_are_the_host_resident_numbers():
    w = torch.nn.Parameter(torch.randn(3))
    opt = torch.optim.Adam([w])
    w.sum().backward()
    opt.step()
    steps = optimizer_host_state([opt])
    assert len(steps) == 1 and steps[0] is opt.state[w]["step"]
    with count_host_syncs(steps) as n:
        opt.step()
    assert n.total == 0, str(n)


# ------------------------------------------------------------------ a step's budget
def counting_steps(monkeypatch) -> list:
    """Counts of the host reads of each step: from one finish_step to the next, the batch's loading (host data,
    then copied to the device) and the epoch-end validation left out; the optimizers' step counts left out."""
    counts, state = [], {}
    finish, batches = session_module.finish_step, session_module.train_batches

    def finish_step(s, values):
        if "counter" in state:
            state.pop("counter").__exit__(None, None, None)
            if state.pop("session") is s:  # (not a new run's set-up after another run's last step)
                counts.append((Path(s.out_dir).name + (f":{s.phase.name}" if s.phase.name else ""), state.pop("n")))
        stop = finish(s, values)
        state["session"] = s
        optimizers = [p.optimizer for p in s.parts.values() if p.optimizer is not None]
        state["counter"] = count_host_syncs(lambda: optimizer_host_state(optimizers))
        state["n"] = state["counter"].__enter__()
        return stop

    def train_batches(*args, **kwargs):
        inner = batches(*args, **kwargs)
        try:
            while True:
                with on_host():
                    try:
                        batch = next(inner)
                    except StopIteration:
                        return
                yield batch
        finally:
            inner.close()

    for method in pkgutil.iter_modules(rlcap.methods.__path__):  # imported before (not with the wrappers, for good)
        importlib.import_module(f"rlcap.methods.{method.name}")
    for name, module in list(sys.modules.items()):
        if name.startswith("rlcap.") and module is not None:
            for attr, original, wrapper in (("finish_step", finish, finish_step),
                                            ("train_batches", batches, train_batches)):
                if getattr(module, attr, None) is original:
                    monkeypatch.setattr(module, attr, wrapper)
    yield counts
    if "counter" in state:
        state.pop("counter").__exit__(None, None, None)


@pytest.fixture
def step_counts(monkeypatch):
    """The host synchronisations of every step, decoding as on a GPU (no early-exit check: rlcap.decoding.stepping)."""
    monkeypatch.setattr(stepping, "auto_exit_every", lambda device: 0)  # what auto means on CUDA
    yield from counting_steps(monkeypatch)


@pytest.fixture(scope="module")
def xe_runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("syncs")
    dataset, feats = make_tiny_dataset(folder)
    runs = {}
    for arch in ("fc", "updown", "transformer"):
        api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / arch, arch=arch,
                                                           **{"xe.epochs": 1})))
        runs[arch] = folder / arch / "best"
    return dataset, feats, runs


@pytest.mark.parametrize("arch", ["fc", "updown", "transformer"])
def test_an_scst_step_makes_at_most_two_host_synchronisations(xe_runs, tmp_path, step_counts, arch):
    """The greedy baseline, the CIDEr-D reward on the CPU, no log line, decoding as on a GPU (no early-exit
    check): the sampled tokens and the greedy tokens go to the host once each, and nothing else is read."""
    dataset, feats, runs = xe_runs
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "scst", arch=arch, algorithm="scst",
                                                       init_from=runs[arch], **{
                                                           "rl.epochs": 1, "rl.batch_size": 4, "max_steps": 4,
                                                           "log_every": 1000})))
    later = [n for _, n in step_counts]  # steps 2-4 (the first, with its log line, precedes the first count)
    assert len(later) == 3
    for n in later:
        assert n.total <= 2, str(n)
        assert n.by_kind["to_host"] == 2, str(n)


def test_a_nan_loss_left_on_the_device_stops_the_run_before_any_checkpoint_after_it(xe_runs, tmp_path, monkeypatch):
    """The loss is read only at log lines; a NaN between them is still found, with its step, before a save."""
    import rlcap.methods.scst as scst

    dataset, feats, runs = xe_runs
    real = scst.scst_step

    def step(s, *args):
        stats = real(s, *args)
        return {**stats, "loss": torch.tensor(float("nan"))} if s.progress.step == 2 else stats

    monkeypatch.setattr(scst, "scst_step", step)
    run = tmp_path / "nan"
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, run, arch="fc", algorithm="scst",
                                                   init_from=runs["fc"], **{"rl.epochs": 1, "rl.batch_size": 4,
                                                                            "log_every": 1000, "save_every": 2}))
    with pytest.raises(RlcapError, match=r"loss became nan at step 3: the run diverged.*last checkpoint is step 2"):
        api.train(cfg)
    assert load_checkpoint(run / "last", with_trainer=False).manifest["step"] == 2


def test_statistics_are_read_once_per_log_line(xe_runs, tmp_path):
    from rlcap.train.logger import read_log

    dataset, feats, runs = xe_runs
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "log", arch="fc", algorithm="scst",
                                                       init_from=runs["fc"], **{"rl.epochs": 1, "rl.batch_size": 4,
                                                                                "log_every": 2})))
    train = [r for r in read_log(tmp_path / "log" / "log.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 4, 6]
    assert all(isinstance(r[k], float) and math.isfinite(r[k]) for r in train
               for k in ("loss", "reward", "baseline", "advantage", "entropy", "length"))


# every recipe's step (tests/methods/same_losses.py), no log line, decoding as on a GPU: the reads each still makes
BUDGETS = {
    "xe": 0, "embedding": 0, "retrieval": 0, "critic": 0,  # teacher forcing: nothing read
    "scst": 2,  # the samples' words for the reward (and with the greedy baseline the greedy captions': 2)
    "sll_sle": 2,  # the samples' words and the greedy captions' (its recipe's baseline)
    "ac:value_pretrain": 1, "ac": 1,  # the samples' words ([Shi18]'s embedding reward reads them)
    # which prefixes need rollouts (a nonzero and its count), the rollouts' and samples' words, the unique
    # (caption, image) pairs, each scored once on the host, and their rows
    "pg_spider": 9,
    # the captions' words for the frozen retriever, which runs on the CPU with its image bank ([Chaffin24]'s
    # retrieval reward: its pool rows and mined neighbours are host lists), and its embeddings' copy back
    "wtf_rl:discriminator_pretrain": 2, "wtf_rl": 11,
    # the frame encoder packs sequences by their lengths, which torch takes on the host (7 reads an encode:
    # the lengths, then packing's own reads of them), and the prefix metric's words
    "xe_hrl": 7, "hrl": 8,
}


def test_every_methods_step_stays_within_its_budget(tmp_path, step_counts):
    from tests.methods.same_losses import run_recipes

    run_recipes(tmp_path, log_every=1000)
    windows: dict = {}
    for name, n in step_counts:
        windows.setdefault(name, []).append(n)
    for name, ns in windows.items():
        assert len(ns) >= 2, name
        for n in ns[1:]:  # (the first step of each phase: its log line)
            assert n.total <= BUDGETS[name], f"{name}: {n}"


def test_with_the_reward_on_the_device_an_scst_step_makes_none(xe_runs, tmp_path, step_counts, monkeypatch):
    """CIDEr-D scored from the token ids (as on a GPU; here its tensor code on the CPU): nothing goes to
    the host, the greedy baseline's captions included."""
    from rlcap.rewards import registry
    from rlcap.rewards.cider_device import CiderDDeviceReward
    from rlcap.rewards.metric_rewards import cider_cache

    monkeypatch.setitem(registry.REWARDS, "cider_d", lambda ctx: CiderDDeviceReward(
        ctx.train_refs, ctx.vocab, ctx.eos_counts, cache=cider_cache(ctx), device="cpu"))
    dataset, feats, runs = xe_runs
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "scst", arch="updown",
                                                       algorithm="scst", init_from=runs["updown"], **{
                                                           "rl.epochs": 1, "rl.batch_size": 4, "max_steps": 3,
                                                           "log_every": 1000})))
    assert len(step_counts) == 2
    for _, n in step_counts:
        assert n.total == 0, str(n)


def test_the_reward_device_setting_is_resolved_against_the_runs_device():
    from rlcap.rewards.context import RewardContext

    assert RewardContext({}, device="cpu").cider_device() == "cpu"
    assert RewardContext({}, device="cuda:1").cider_device() == "cuda:1"
    assert RewardContext({}, device="cuda", metric_device="cpu").cider_device() == "cpu"
    with pytest.raises(ConfigError, match="metric_device=cuda: the run's device is cpu"):
        RewardContext({}, device="cpu", metric_device="cuda").cider_device()


def test_a_split_is_decoded_with_one_transfer_a_batch(xe_runs):
    """Validation and `rlcap eval`: the captions of a batch go to the host at once (before: one read a caption),
    and with no early-exit check (as on a GPU) nothing else is read, greedy or beam."""
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.eval.open_run import open_run
    from rlcap.decoding.options import Decoding
    from rlcap.decoding.split import decode_split

    dataset, feats, runs = xe_runs
    opened = open_run(runs["updown"], device="cpu")
    model, vocab = opened.policy, opened.vocab
    split = load_data(DataConfig(dataset=str(dataset), features=str(feats), min_count=1), ("train",),
                      vocab=vocab).splits["train"]  # 24 images: 3 batches of 10
    for beam in (1, 3):
        with count_host_syncs() as n:
            predictions = decode_split(model, split, vocab, Decoding.search("cpu", beam, 6, exit_every=0), batch_size=10)
        assert len(predictions) == 24 and n.by_kind["to_host"] == 3, str(n)
        # the rest: the batches' image rows, host data of the loader (its features then copied to the device)
        assert all(site.startswith("to_host") or "loader.py" in site.split(" < ")[0] for site in n.sites), str(n)
    with pytest.raises(ConfigError, match="exit_every: expected -1"):
        Decoding.search("cpu", 1, 6, exit_every=-2)
