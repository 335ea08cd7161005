"""Precision owned by the engine (docs/TRAINING.md, "Devices and threads"): autocast wraps a run's forward passes
and nothing else (rewards, losses, the optimizer step run in fp32), a bf16 run's forward passes read the weights of
the step before, and `rlcap eval` of a bf16 run's best/ decodes in the run's precision, reproducing the validation
score that chose it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import rlcap
from rlcap import api
from rlcap.cli import main
from rlcap.methods import xe as xe_method
from rlcap.rl import losses
from tests.tiny import make_tiny_dataset, tiny_overrides

# what the probes saw: autocast on or off where each ran
SEEN: dict[str, list[bool]] = {"reward": [], "loss": []}


def autocast_probe_reward(captions, batch):
    """A user's reward (dotted path) that records whether it runs under autocast; one word a caption."""
    SEEN["reward"].append(torch.is_autocast_enabled("cpu"))
    return torch.tensor([float(len(c.split())) for c in captions])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("precision_engine")
    return folder, *make_tiny_dataset(folder)


def _train(folder, dataset, feats, name, **extra):
    out = folder / name
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, out, **{"model.arch": "updown",
                                                                               "precision": "bf16", **extra})))
    return out


def test_autocast_wraps_the_forward_passes_only(tiny, monkeypatch):
    folder, dataset, feats = tiny
    for key in SEEN:
        SEEN[key].clear()
    real_loss = losses.xe_loss

    def xe_loss(logits, *args, **kwargs):
        SEEN["loss"].append(torch.is_autocast_enabled("cpu"))
        return real_loss(logits, *args, **kwargs)

    monkeypatch.setattr(xe_method, "xe_loss", xe_loss)
    xe = _train(folder, dataset, feats, "xe_probe", max_steps=3)
    assert SEEN["loss"] == [False] * 3  # the loss reduction outside autocast
    monkeypatch.undo()
    # an SCST run's reward (the samples' and the greedy baseline's) runs outside autocast too
    _train(folder, dataset, feats, "scst_probe", algorithm="scst", init_from=xe / "last", max_steps=2,
           **{"rl.batch_size": 4, "rl.n_samples": 2, "reward.weights": f"{{{__name__}:autocast_probe_reward: 1.0}}"})
    assert len(SEEN["reward"]) == 4 and not any(SEEN["reward"])


def test_a_bf16_runs_weights_move_at_every_step(tiny):
    folder, dataset, feats = tiny
    # the same seeded run stopped after 1, 2, 3 and 4 steps: each step changed the weights its next forward reads
    weights = [load_file(_train(folder, dataset, feats, f"steps_{n}", max_steps=n) / "last" / "policy.safetensors")
               for n in (1, 2, 3, 4)]
    for before, after in zip(weights, weights[1:]):
        moved = [key for key in before if not torch.equal(before[key], after[key])]
        assert len(moved) >= len(before) // 2, moved
    # ... and the losses those forward passes give follow the changed weights (they fall on these captions)
    rows = [json.loads(line) for line in (folder / "steps_4" / "log.jsonl").read_text().splitlines()]
    train = [r["loss"] for r in rows if r.get("split") == "train"]
    assert len(train) == 4 and len(set(train)) == 4


def test_eval_of_a_bf16_best_reproduces_its_validation_score(tiny, capsys):
    folder, dataset, feats = tiny
    run = _train(folder, dataset, feats, "xe_best", **{"xe.epochs": 3, "decode.beam_size": 2})
    chosen = json.loads((run / "best" / "checkpoint.json").read_text())["metrics"]["CIDEr"]
    scores = api.evaluate(run / "best", "val")
    assert abs(scores["model"]["CIDEr"] - chosen) <= 1e-6, (scores["model"]["CIDEr"], chosen)
    # the CLI decodes in the run's precision too, and --precision decodes otherwise
    capsys.readouterr()
    assert main(["eval", str(run / "best"), "--split", "val", "--out", str(folder / "eval_bf16")]) == 0
    assert abs(json.loads((folder / "eval_bf16" / "scores.json").read_text())["model"]["CIDEr"] - chosen) <= 1e-6
    assert main(["eval", str(run / "best"), "--split", "val", "--precision", "fp32",
                 "--out", str(folder / "eval_fp32")]) == 0


def test_autocast_is_entered_by_the_engine_and_the_frozen_encoders_only():
    """No autocast region around a run (api.train once held one) and no cache clearing to make up for one:
    torch.autocast is entered by rlcap.devices (Precision.forward, which the loops enter around forward passes),
    by the hand-written backward passes replaying their forward's state, by the LSTM's CPU escape (oneDNN has no
    bf16 LSTM there) and by the frozen encoders of `rlcap features` (fp16 on CUDA)."""
    src = Path(rlcap.__file__).parent
    files = {path.relative_to(src).as_posix(): path.read_text(encoding="utf-8") for path in src.rglob("*.py")}
    entered = {name for name, text in files.items() if "torch.autocast(" in text}
    assert entered == {"devices.py", "models/amp.py", "models/lstm.py", "encoders/efficientnet.py", "encoders/hf.py",
                       "encoders/hf_vlm.py"}
    assert [name for name, text in files.items() if "clear_autocast_cache" in text] == []
