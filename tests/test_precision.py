"""precision: bf16 on the CPU (what this machine can run; fp16 takes the same path with a gradient
scaler). Under autocast the matrix products run in bf16 while every module's output, the losses and
the rewards stay fp32. Stated tolerances, over the first 20 steps of tiny runs from one seed: XE's
loss within 0.2% of fp32's at every step (measured 0.015%; 0.9% when every forward read the first
step's weights from autocast's cache, which 2% let pass); SCST's (whose samples differ as soon as a probability does)
finite at every step, with its samples' mean reward within 5% of fp32's."""

from __future__ import annotations

import math

import pytest
import torch

from rlcap import api
from rlcap.devices import autocast, grad_scaler
from rlcap.errors import ConfigError
from rlcap.rl.losses import reinforce_loss, xe_loss
from rlcap.train.logger import read_log
from tests.tiny import make_tiny_dataset, tiny_overrides

STEPS = 20


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("precision")
    dataset, feats = make_tiny_dataset(folder)

    def run(name: str, **extra) -> list[dict]:
        out = folder / name
        api.train(api.load_run_config(None, tiny_overrides(dataset, feats, out, **{"max_steps": STEPS,
                                                                                  "model.arch": "updown", **extra})))
        return [r for r in read_log(out / "log.jsonl") if r["split"] == "train"]

    xe = {p: run(f"xe_{p}", precision=p, **{"xe.epochs": 8}) for p in ("fp32", "bf16")}
    rl = {"algorithm": "scst", "init_from": folder / "xe_fp32" / "last", "rl.epochs": 10, "rl.batch_size": 8,
          "rl.n_samples": 3, "optim.lr": 0.001}
    scst = {p: run(f"scst_{p}", precision=p, **rl) for p in ("fp32", "bf16")}
    return xe, scst


def test_xe_in_bf16_follows_fp32(runs):
    xe, _ = runs
    assert len(xe["bf16"]) == len(xe["fp32"]) == STEPS
    for a, b in zip(xe["fp32"], xe["bf16"]):
        assert abs(b["loss"] - a["loss"]) <= 0.002 * abs(a["loss"]), (a["step"], a["loss"], b["loss"])
    assert xe["bf16"] != xe["fp32"]  # bf16 did run: the losses are not fp32's to the bit


def test_scst_in_bf16_follows_fp32(runs):
    _, scst = runs
    assert len(scst["bf16"]) == len(scst["fp32"]) == STEPS
    assert all(math.isfinite(r["loss"]) for r in scst["bf16"])
    mean = {p: sum(r["reward"] for r in rows) / STEPS for p, rows in scst.items()}
    assert abs(mean["bf16"] - mean["fp32"]) <= 0.05 * mean["fp32"], mean


def test_losses_stay_fp32_under_autocast():
    logits = torch.randn(2, 3, 5, dtype=torch.bfloat16)
    with autocast(torch.device("cpu"), "bf16"):
        layer = torch.nn.Linear(4, 4)
        assert layer(torch.randn(2, 4)).dtype == torch.bfloat16  # the matmuls run low
        assert xe_loss(logits, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3)).dtype == torch.float32
        assert reinforce_loss(torch.randn(2, 3, dtype=torch.bfloat16), torch.ones(2, 3), torch.ones(2)).dtype == \
            torch.float32
    assert grad_scaler(torch.device("cpu"), "bf16") is None and grad_scaler(torch.device("cpu"), "fp16") is not None
    with pytest.raises(ConfigError, match="precision: 'fp8' is not one of fp32, bf16, fp16"):
        api.load_run_config(None, ["precision=fp8"])


def test_fp16_trains_with_its_gradient_scaler_and_resumes(tmp_path):
    """fp16 on the CPU: the scaler's state is checkpointed with the optimizer's, so the run resumes."""
    from rlcap.train.checkpoint import load_checkpoint

    dataset, feats = make_tiny_dataset(tmp_path)
    base = tiny_overrides(dataset, feats, tmp_path / "run", **{"precision": "fp16", "model.arch": "updown"})
    api.train(api.load_run_config(None, [*base, "max_steps=4"]))
    assert "policy" in load_checkpoint(tmp_path / "run" / "last").trainer["scalers"]
    api.train(api.load_run_config(None, [*base, "max_steps=8"]), resume=True)
    losses = [r["loss"] for r in read_log(tmp_path / "run" / "log.jsonl") if r["split"] == "train"]
    assert len(losses) == 8 and all(math.isfinite(x) for x in losses)
