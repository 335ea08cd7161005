"""FSDP2 (``distributed.strategy: fsdp2``) on 2 CPU processes (gloo) against DDP, on a tiny Qwen2-VL: XE, SCST and GRPO
(its KL reference a sharded copy, or the LoRA adapters off) log DDP's losses over 10 steps, with and without LoRA; a
run resumes exactly after SIGKILL of one rank mid-epoch and after a kill during a save; ``best/hf/`` is one
consolidated folder that ``from_pretrained`` loads and whose ``generate()`` writes the run's captions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from rlcap.cli import main
from rlcap.distributed import Ranks
from rlcap.errors import ConfigError
from rlcap.api import load_run_config
from rlcap.train.checkpoint import check_strategy, load_checkpoint, recover
from rlcap.train.optimizer import Part
from rlcap.train.optimizer import shard_parts
from tests.tiny import tiny_overrides
from tests.train.killing import REPO, train_losses, wait_for_step

transformers = pytest.importorskip("transformers")
STEPS = 10
RL = {"rl.batch_size": 4, "rl.n_samples": 2, "rl.epochs": 2, "optim.lr": 0.001}
RUNS = {"xe": ("shapes_xe", {"xe.epochs": 2, "optim.lr": 0.003}),
        "scst": ("shapes_scst", RL),
        "grpo": ("shapes_grpo", {**RL, "rl.kl_coef": 0.04, "grpo.iterations": 2})}  # (a KL reference: its part)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}


def _argv(recipe: str, overrides: list[str], strategy: str, module: list[str] | None = None) -> list[str]:
    """torchrun's command line for 2 processes of ``rlcap train`` (or of ``module``'s)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            *(module or ["-m", "rlcap"]), "train", str(REPO / "configs" / f"{recipe}.yaml"), *overrides,
            f"distributed.strategy={strategy}"]


def _train(recipe: str, overrides: list[str], strategy: str) -> None:
    done = subprocess.run(_argv(recipe, overrides, strategy), capture_output=True, text=True, env=_env(), cwd=REPO,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    """A tiny Qwen2-VL folder on the tiny pictures and its store: (folder, overrides every run shares)."""
    from tests.models.vlm_matrix import tiny_vlm_run

    folder = tmp_path_factory.mktemp("fsdp2")
    # (a float32 store: the image tokens the exported folder's generate() computes from the pictures, to float
    # rounding; in float16, the LoRA runs' greedy captions of this barely trained model parted from generate()'s on 2
    # of 6 pictures, at near-tied words, under DDP and FSDP2 alike)
    dataset, model, store = tiny_vlm_run(folder, store="tokens.h5", dtype="float32")
    common = [o for o in tiny_overrides(dataset, store, "unused", **{"max_steps": STEPS, "val.max_images": 4,
                                                                     "model.arch": "hf", "model.path": model})
              if not o.startswith("out_dir")]
    return folder, dataset, common


@pytest.fixture(scope="module", params=["all", "lora"])
def chains(request, tiny_vlm):
    """XE, then SCST and GRPO from its best checkpoint (DDP's, for both), under each strategy, training
    ``model.train`` (all weights, or LoRA adapters): {(algorithm, strategy): run folder}."""
    folder, _, common = tiny_vlm
    runs = {}
    for algorithm, (recipe, extra) in RUNS.items():
        start = [f"model.train={request.param}"] if algorithm == "xe" else \
            [f"init_from={runs['xe', 'ddp'] / 'best'}"]
        items = [*(o for o in common if algorithm == "xe" or not o.startswith("model.")), *start,
                 *(f"{k}={v}" for k, v in extra.items())]
        for strategy in ("ddp", "fsdp2"):
            out = folder / f"{request.param}-{algorithm}-{strategy}"
            _train(recipe, [*items, f"out_dir={out}"], strategy)
            runs[algorithm, strategy] = out
    return request.param, runs


@pytest.mark.slow  # (12 starts of torchrun)
@pytest.mark.parametrize("algorithm", list(RUNS))
def test_fsdp2_logs_ddps_losses(chains, algorithm):
    train, runs = chains
    ddp, fsdp2 = (train_losses(runs[algorithm, s]) for s in ("ddp", "fsdp2"))
    assert sorted(ddp) == sorted(fsdp2) == list(range(1, STEPS + 1))
    assert max(abs(ddp[s] - fsdp2[s]) for s in ddp) < 1e-4, (ddp, fsdp2)
    assert any(abs(v) > 1e-4 for v in ddp.values())  # (something was learned from)
    last = runs[algorithm, "fsdp2"] / "last"
    assert json.loads((last / "checkpoint.json").read_text())["strategy"] == "fsdp2"
    assert {p.name for p in (last / "shards").iterdir()} == {".metadata", "__0_0.distcp", "__1_0.distcp"}
    # the weights gathered whole on rank 0 are DDP's (each process held half of them)
    one, two = (load_file(str(runs[algorithm, s] / "last" / "policy.safetensors")) for s in ("ddp", "fsdp2"))
    assert one.keys() == two.keys() and any(".lora_" in k for k in one) == (train == "lora")
    assert max(float((one[k] - two[k]).abs().max()) for k in one) < 1e-4
    if algorithm == "grpo" and train == "all":  # the KL reference, a sharded copy of the start, saved whole
        assert "reference" in json.loads((last / "checkpoint.json").read_text())["parts"]


@pytest.mark.slow
def test_best_hf_of_an_fsdp2_run_loads_with_from_pretrained_and_writes_its_captions(chains, tiny_vlm, capsys):
    """The consolidated folder is DDP's: its ``generate()`` writes what DDP's writes, and what ``rlcap eval`` decodes,
    with every weight trained and with LoRA (merged into the weights by the export)."""
    from tests.models.test_hf_vlm_cli import _exported_generate

    folder, dataset, _ = tiny_vlm
    train, runs = chains
    ours, theirs = {}, {}
    for strategy in ("ddp", "fsdp2"):
        best = runs["scst", strategy] / "best"
        model = transformers.AutoModelForImageTextToText.from_pretrained(best / "hf")
        assert not any(".lora_" in name for name, _ in model.named_parameters())  # (LoRA merged)
        assert main(["eval", str(best), "--beam-size", "1"]) == 0
        capsys.readouterr()
        ours[strategy] = {str(p["image_id"]): p["caption"] for p in
                          json.loads((best / "eval_test" / "predictions.json").read_text())}
        theirs[strategy] = _exported_generate(best / "hf", folder, dataset, num_beams=1)
    assert theirs["fsdp2"] == theirs["ddp"] and ours["fsdp2"] == ours["ddp"] and len(ours["ddp"]) == 6
    agree = {s: sum(ours[s][i] == theirs[s][i] for i in ours[s]) for s in ours}
    assert agree["fsdp2"] == agree["ddp"] == 6, (ours, theirs)


def _rank_pid(launcher: subprocess.Popen, rank: int) -> int | None:
    from tests.train.test_distributed import _rank_pid as found

    return found(launcher, rank)


@pytest.mark.slow
def test_fsdp2_resumes_exactly_after_sigkill_of_one_rank_mid_epoch(tiny_vlm, tmp_path):
    _, _, common = tiny_vlm
    items = [*common, "xe.epochs=2", "optim.lr=0.003", "save_every=1"]  # (6 steps an epoch)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    _train("shapes_xe", [*items, f"out_dir={reference}"], "fsdp2")
    launcher = subprocess.Popen(_argv("shapes_xe", [*items, f"out_dir={killed}"], "fsdp2"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=REPO)
    wait_for_step(launcher, killed, 3)
    os.kill(_rank_pid(launcher, 1), signal.SIGKILL)
    assert launcher.wait(timeout=120) != 0
    stopped_at = json.loads((killed / "last" / "checkpoint.json").read_text())["step"]
    assert 3 <= stopped_at < 6  # mid-epoch
    _train("shapes_xe", [*items, f"out_dir={killed}"], "fsdp2")  # the same command continues it
    ref, got = train_losses(reference), train_losses(killed)
    assert sorted(got) == sorted(ref) == list(range(1, STEPS + 1))
    assert [got[s] for s in ref if s > stopped_at] == [ref[s] for s in ref if s > stopped_at]


@pytest.mark.slow
def test_fsdp2_resumes_exactly_after_a_kill_during_a_save(tiny_vlm, tmp_path):
    """Saves pause inside (tests/train/slow_save.py: after the files, shards included, are written, and between the
    two renames); rank 0 is killed while its temporary folder is there: the previous checkpoint stays whole."""
    _, _, common = tiny_vlm
    items = [*common, "xe.epochs=2", "optim.lr=0.003", "save_every=1"]
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    _train("shapes_xe", [*items, f"out_dir={reference}"], "fsdp2")
    slow = ["-m", "tests.train.slow_save", "1.0"]
    env = {**_env(), "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    launcher = subprocess.Popen(_argv("shapes_xe", [*items, f"out_dir={killed}"], "fsdp2", slow),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    wait_for_step(launcher, killed, 2)
    deadline = time.time() + 120
    while time.time() < deadline and not list(killed.glob("*.tmp-*/shards/.metadata")):
        time.sleep(0.02)  # (a save under way: every rank's shards written, rank 0 pausing before its manifest)
    assert list(killed.glob("*.tmp-*/shards/.metadata"))
    os.kill(_rank_pid(launcher, 0), signal.SIGKILL)
    assert launcher.wait(timeout=120) != 0
    recover(killed)  # (what the next start does first: a kill between the renames leaves last.old, put back)
    assert not any(".tmp-" in p.name for p in killed.iterdir())
    stopped_at = load_checkpoint(killed / "last").manifest["step"]  # the previous checkpoint, whole
    assert 2 <= stopped_at < STEPS
    _train("shapes_xe", [*items, f"out_dir={killed}"], "fsdp2")  # the same command resumes it
    ref, got = train_losses(reference), train_losses(killed)
    assert sorted(got) == sorted(ref) == list(range(1, STEPS + 1))
    assert [got[s] for s in ref if s > stopped_at] == [ref[s] for s in ref if s > stopped_at]


@pytest.mark.slow
def test_a_stand_in_row_trains_nothing_under_fsdp2(tiny_vlm, tmp_path):
    """24 training images in batches of 23: each epoch's second batch holds one image, and rank 1 steps on a stand-in
    whose loss it multiplies by 0 before FSDP2 reduces the gradients in the backward pass: DDP's losses."""
    _, _, common = tiny_vlm
    items = [*common, "xe.epochs=2", "xe.batch_size=23", "optim.lr=0.003", "val.max_images=2"]
    for strategy in ("ddp", "fsdp2"):
        _train("shapes_xe", [*items, f"out_dir={tmp_path / strategy}"], strategy)
    ddp, fsdp2 = (train_losses(tmp_path / s) for s in ("ddp", "fsdp2"))
    assert sorted(ddp) == sorted(fsdp2) == [1, 2, 3, 4]
    assert max(abs(ddp[s] - fsdp2[s]) for s in ddp) < 1e-4, (ddp, fsdp2)


def test_fsdp2_refusals_are_one_line(tmp_path):
    cfg = load_run_config(None, ["distributed.strategy=fsdp2", "model.arch=hf", "model.path=MODEL", f"out_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"^distributed.strategy=fsdp2 shards the policy over torchrun's processes, "
                                          r"and this run has one: start it with nproc=N \(N >= 2\), or use "
                                          r"distributed.strategy=ddp$"):
        cfg.check_processes(1)
    cfg.check_processes(2)
    with pytest.raises(ConfigError, match=r"^distributed.strategy=fsdp2 runs in precision fp32 or bf16"):
        load_run_config(None, ["distributed.strategy=fsdp2", "model.arch=hf", "model.path=MODEL", "precision=fp16"])
    with pytest.raises(ConfigError, match=r"^distributed.strategy=fsdp2 shards the language model's layers; the "
                                          r"image side that model.train_vision=all trains is not sharded yet"):
        load_run_config(None, ["distributed.strategy=fsdp2", "model.arch=hf", "model.path=MODEL",
                               "model.train_vision=all"])
    with pytest.raises(ConfigError, match=r"^distributed.strategy: 'zero3' is not one of \['ddp', 'fsdp2'\]$"):
        load_run_config(None, ["distributed.strategy=zero3"])
    with pytest.raises(ConfigError, match=r"^distributed.strategy=fsdp2 shards transformers policies \(model.arch=hf\), "
                                          r"not model.arch=updown: use distributed.strategy=ddp$"):
        load_run_config(None, ["distributed.strategy=fsdp2", "model.arch=updown"])
    (tmp_path / "last").mkdir()
    (tmp_path / "last" / "checkpoint.json").write_text(json.dumps({"step": 3}))  # (a DDP run's, before FSDP2 was)
    check_strategy(tmp_path / "last", "ddp")
    with pytest.raises(ConfigError, match=r"last was written with distributed.strategy=ddp and is resumed with "
                                          r"distributed.strategy=fsdp2: resume it with distributed.strategy=ddp$"):
        check_strategy(tmp_path / "last", "fsdp2")
    own = SimpleNamespace(parts={"policy": Part(torch.nn.Linear(2, 2))}, ranks=Ranks(0, 2))
    with pytest.raises(ConfigError, match=r"^distributed.strategy=fsdp2 shards transformers policies "
                                          r"\(model.arch=hf\), not Linear: use distributed.strategy=ddp$"):
        shard_parts(own, "fp32")


def test_the_caption_table_of_a_sharded_policy_is_decoded_by_every_process(monkeypatch):
    """The trackers' caption table decodes with the policy; under FSDP2 that gathers its weights, a collective: every
    process builds the rows as the epoch ends (rank 0 alone once crashed the run at its first epoch's end, the
    others waiting elsewhere); a DDP policy's rows are built only when rank 0's logger asks."""
    from rlcap.train import validation

    built = []
    monkeypatch.setattr(validation, "caption_rows", lambda session: built.append(1) or ["row"])
    track = SimpleNamespace(captions=8, to=["tensorboard"])
    sharded = SimpleNamespace(parts={"policy": Part(torch.nn.Linear(2, 2), sharded=True)},
                              cfg=SimpleNamespace(track=track))
    table = validation.caption_table(sharded)
    assert built == [1] and table() == ["row"] and built == [1]  # built at once, on every process
    ddp = SimpleNamespace(parts={"policy": Part(torch.nn.Linear(2, 2))}, cfg=SimpleNamespace(track=track))
    table = validation.caption_table(ddp)
    assert built == [1] and table() == ["row"] and built == [1, 1]  # built when asked
    off = SimpleNamespace(parts=sharded.parts, cfg=SimpleNamespace(track=SimpleNamespace(captions=0, to=["wandb"])))
    validation.caption_table(off)
    assert built == [1, 1]  # no table asked for: nothing decoded
