"""``resume=true`` never drops a change of the model silently (issue 64, Build 3): a run started with ``init_from``
takes how it trains its captioner (``model.train``, LoRA's rank and alpha, ``model.dtype``,
``model.gradient_checkpointing``) as its own, so a resume that changes one of them is refused in one line naming
the key, as the same change to a run started from ``model.path`` is (rlcap.train.run_folder)."""

from __future__ import annotations

import json

import pytest

from rlcap.cli import main
from rlcap.train.checkpoint import load_checkpoint
from tests.cli.in_process import run_cli
from tests.models.hf_captioners import captioner_with_store
from tests.tiny import tiny_overrides

pytest.importorskip("transformers")
pytest.importorskip("peft")

XE = "configs/shapes_xe.yaml"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny GIT's XE run from ``model.path``, and a LoRA run of rank 4 from it by ``init_from``: (command maker,
    folder); both stop after 2 steps, a checkpoint in ``last/``."""
    folder = tmp_path_factory.mktemp("resume_model")
    dataset, model, store = captioner_with_store("git", folder)

    def command(out: str, *extra: str) -> list[str]:
        overrides = [o for o in tiny_overrides(dataset, store, folder / out, **{"xe.epochs": 2, "max_steps": 2,
                                                                              "save_every": 1})
                     if not o.startswith("model.")]
        return ["train", XE, *overrides, *extra]

    assert main(command("xe", "model.arch=hf", f"model.path={model}", "model.train=lora", "model.lora_rank=4")) == 0
    assert main(command("lora", f"init_from={folder / 'xe' / 'last'}", "model.train=lora", "model.lora_rank=4")) == 0
    return command, folder


def _ranks(checkpoint) -> set[int]:
    weights = load_checkpoint(checkpoint, with_trainer=False).weights["policy"]
    return {int(t.shape[0]) for k, t in weights.items() if k.endswith(".lora_A.default.weight")}


@pytest.mark.parametrize("change,shown", [("model.lora_rank=8", "model.lora_rank 4 -> 8"),
                                          ("model.train=all", "model.train 'lora' -> 'all'"),
                                          ("model.gradient_checkpointing=true",
                                           "model.gradient_checkpointing False -> True")])
def test_a_resume_that_changes_how_the_model_trains_is_refused_after_init_from_as_after_model_path(
        runs, capsys, change, shown):
    command, folder = runs
    before = (folder / "lora" / "config.json").read_text()
    lora = command("lora", f"init_from={folder / 'xe' / 'last'}", "model.train=lora", "model.lora_rank=4")
    rc, _, err = run_cli(capsys, *lora, "resume=true", "max_steps=4", change)
    lines = [line for line in err.strip().splitlines() if "error" in line]
    assert rc == 2 and len(lines) == 1, err
    assert shown in lines[0] and "cannot change on resume" in lines[0], lines[0]
    assert (folder / "lora" / "config.json").read_text() == before and _ranks(folder / "lora" / "last") == {4}
    # the same change to the run started from model.path: the same refusal
    xe = command("xe", "model.arch=hf", f"model.path={folder / 'captioner'}", "model.train=lora",
                 "model.lora_rank=4")
    rc, _, err = run_cli(capsys, *xe, "resume=true", "max_steps=4", change)
    assert rc == 2 and shown in err and "cannot change on resume" in err, err


def test_a_resume_that_keeps_the_model_continues_it_with_its_changed_settings(runs, capsys, caplog, tmp_path):
    """The check refuses what changes the model only: the same keys set to the values the run trains with, or
    left out (the checkpoint's), resume; a changed learning rate is applied and named."""
    import logging
    import shutil

    command, folder = runs
    shutil.copytree(folder / "lora", tmp_path / "lora")
    copy = [a.replace(str(folder / "lora"), str(tmp_path / "lora")) for a in
            command("lora", f"init_from={folder / 'xe' / 'last'}", "model.train=lora", "model.lora_rank=4")]
    with caplog.at_level(logging.INFO, logger="rlcap.train.run_folder"):
        rc, _, err = run_cli(capsys, *copy, "resume=true", "max_steps=3", "optim.lr=0.002")
    assert rc == 0, err
    assert "changed settings: max_steps 2 -> 3, optim.lr 0.001 -> 0.002" in caplog.text, caplog.text
    assert "model." not in caplog.text
    assert _ranks(tmp_path / "lora" / "last") == {4}
    recorded = json.loads((tmp_path / "lora" / "config.json").read_text())
    assert recorded["model"]["train"] == "lora" and recorded["model"]["lora_rank"] == 4
    assert recorded["optim"]["lr"] == 0.002 and recorded["max_steps"] == 3
    left_out = [a for a in copy if not a.startswith(("model.train", "model.lora_rank"))]
    rc, _, err = run_cli(capsys, *left_out, "resume=true", "max_steps=4", "optim.lr=0.002")
    assert rc == 0 and "cannot change" not in err and _ranks(tmp_path / "lora" / "last") == {4}, err
