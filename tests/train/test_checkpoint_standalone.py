"""A checkpoint holds every path it needs (issue 55, Why 1 and 4): an hf run trained in one folder with relative
paths is evaluated, captions images, starts another run and resumes from another folder after the model folder
it started from is deleted; an older checkpoint whose model.path is relative to the folder it was trained in
falls back to its own hf/; a run that diverges before its first checkpoint leaves nothing that blocks its rerun."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from rlcap.cli import main
from rlcap.train.logger import read_log
from tests.conftest import REPO
from tests.models.hf_captioners import save_captioner
from tests.report.conftest import add_pictures
from tests.tiny import make_tiny_dataset, tiny_overrides

pytest.importorskip("transformers")

PICTURES = range(24, 36)  # the tiny dataset's val and test images


def _xe_command(root: str) -> list[str]:
    """The XE command of the hf run, its paths written from the folder ``root`` names (``.`` or ``../first``)."""
    return ["train", str(REPO / "configs" / "shapes_xe.yaml"), *tiny_overrides(
        f"{root}/dataset.json", f"{root}/hf.h5", f"{root}/runs/xe", **{
            "model.arch": "hf", "model.path": f"{root}/models/git", "model.dropout": 0.0, "xe.epochs": 3,
            "optim.lr": 0.003})]


def _predictions(folder) -> dict[str, str]:
    return {str(p["image_id"]): p["caption"] for p in json.loads((folder / "predictions.json").read_text())}


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    """A tiny GIT trained from ``first/`` with paths relative to it, its greedy test captions, then the working
    directory ``elsewhere/`` and the model folder deleted: (first, elsewhere, captions)."""
    root = tmp_path_factory.mktemp("standalone")
    first, elsewhere = root / "first", root / "elsewhere"
    first.mkdir()
    elsewhere.mkdir()
    dataset, _ = make_tiny_dataset(first)
    add_pictures(dataset)
    save_captioner("git", first / "models" / "git", dataset)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(first)
        assert main(["features", ".", "--dataset", "dataset.json", "--encoder", "hf:models/git", "--out", "hf.h5"]) == 0
        assert main(_xe_command(".")) == 0
        assert main(["eval", "runs/xe/best", "--beam-size", "1", "--out", "greedy"]) == 0
        assert main(["caption", "runs/xe/best", *(f"{i}.png" for i in PICTURES), "--out", "captions.json"]) == 0
    captions = _predictions(first / "greedy")
    shutil.rmtree(first / "models")
    return first, elsewhere, captions


def test_the_checkpoint_records_its_own_hf_folder_and_the_run_folder_absolute_paths(moved):
    first, _, _ = moved
    config = json.loads((first / "runs" / "xe" / "best" / "config.json").read_text())
    assert (config["model"]["path"], config["model_path_relative_to"]) == ("hf", "checkpoint")
    recorded = json.loads((first / "runs" / "xe" / "config.json").read_text())
    assert recorded["model"]["path"] == str(first / "models" / "git")
    assert recorded["data"]["dataset"] == str(first / "dataset.json")


def test_eval_from_another_folder_without_the_model_folder(moved, monkeypatch):
    first, elsewhere, captions = moved
    monkeypatch.chdir(elsewhere)
    assert main(["eval", "../first/runs/xe/best", "--beam-size", "1", "--out", "greedy"]) == 0
    assert _predictions(elsewhere / "greedy") == captions and len(captions) == 6
    assert len(set(captions.values())) > 1, captions  # (a model that tells the images apart)


def test_caption_from_another_folder_without_the_model_folder(moved, monkeypatch, caplog):
    """The store's encoder folder (the captioner's) is gone: the checkpoint's hf/ holds the same frozen tower, which
    gives the captions `rlcap caption` gave from the training folder."""
    first, elsewhere, _ = moved
    monkeypatch.chdir(elsewhere)
    with caplog.at_level(logging.INFO, logger="rlcap.encoders.load"):
        assert main(["caption", "../first/runs/xe/best", *(f"../first/{i}.png" for i in PICTURES),
                     "--out", "captions.json"]) == 0
    assert "encoding with the policy's own tower" in caplog.text
    written = {name.rsplit("/", 1)[1]: c for name, c in json.loads((elsewhere / "captions.json").read_text()).items()}
    assert written == json.loads((first / "captions.json").read_text()) and len(written) == len(PICTURES)


def test_init_from_another_folder_without_the_model_folder(moved, monkeypatch):
    first, elsewhere, _ = moved
    monkeypatch.chdir(elsewhere)
    overrides = [o for o in tiny_overrides("../first/dataset.json", "../first/hf.h5", "scst")
                 if not o.startswith("model.")]
    assert main(["train", str(REPO / "configs" / "shapes_scst.yaml"), *overrides, "init_from=../first/runs/xe/best", "rl.epochs=1",
                 "rl.batch_size=8", "rl.n_samples=2", "max_steps=1"]) == 0
    assert len([r for r in read_log(elsewhere / "scst" / "log.jsonl") if r["split"] == "train"]) == 1
    assert main(["eval", "scst/last", "--beam-size", "1"]) == 0


def test_resume_from_another_folder_without_the_model_folder(moved, monkeypatch, tmp_path):
    """The same command, its paths written from elsewhere: the same run (no change in model.path or data.*);
    resume=true with more epochs continues it from its checkpoint, whose policy its own hf/ holds."""
    first, elsewhere, _ = moved
    copy = tmp_path / "first"  # (the module's other tests read first/runs/xe as trained)
    shutil.copytree(first, copy)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    command = _xe_command("../first")
    assert main(command) == 0  # finished: kept as it is
    assert len([r for r in read_log(copy / "runs" / "xe" / "log.jsonl") if r["split"] == "train"]) == 18
    assert main([*command, "xe.epochs=4", "resume=true"]) == 0
    steps = [r["step"] for r in read_log(copy / "runs" / "xe" / "log.jsonl") if r["split"] == "train"]
    assert steps == list(range(1, 25))
    recorded = json.loads((copy / "runs" / "xe" / "config.json").read_text())
    assert recorded["model"]["path"] == str(copy / "models" / "git") and recorded["xe"]["epochs"] == 4
    assert main([*command, "xe.epochs=4"]) == 0  # and again: the same settings


def test_an_older_checkpoint_falls_back_to_its_hf_folder(moved, monkeypatch, caplog, capsys):
    """A checkpoint of an older rlcap stored model.path as typed, relative to the folder its run trained in."""
    first, elsewhere, captions = moved
    old = first / "runs" / "xe" / "old"  # (beside best/: its data paths, relative to it, hold)
    shutil.copytree(first / "runs" / "xe" / "best", old)
    config = json.loads((old / "config.json").read_text())
    del config["model_path_relative_to"]
    config["model"]["path"] = "models/git"
    (old / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(elsewhere)
    with caplog.at_level(logging.INFO, logger="rlcap.models.hf.architecture"):
        assert main(["eval", "../first/runs/xe/old", "--beam-size", "1", "--out", "old_greedy"]) == 0
    assert "its model.path models/git is not found" in caplog.text and "checkpoint's own hf/" in caplog.text
    assert _predictions(elsewhere / "old_greedy") == captions
    shutil.rmtree(old / "hf")
    capsys.readouterr()
    assert main(["eval", "../first/runs/xe/old", "--beam-size", "1"]) == 2
    assert capsys.readouterr().err == (
        f"rlcap eval: error: ../first/runs/xe/old: its model.path models/git is not found from {elsewhere} (relative "
        "to the folder its run was trained in) and it holds no hf/ folder: run the command from that folder\n")


def test_a_run_that_diverges_before_its_first_checkpoint_blocks_no_rerun(tmp_path, monkeypatch, capsys):
    """Its message names no checkpoint, and the command with another learning rate then trains in the same folder."""
    import rlcap.methods.xe as xe

    dataset, feats = make_tiny_dataset(tmp_path)
    command = ["train", str(REPO / "tests" / "train" / "empty.yaml"), *tiny_overrides(dataset, feats, tmp_path / "run", **{"xe.epochs": 1})]
    with monkeypatch.context() as patch:  # the loss of a model whose output layer is broken (-inf at PAD, ...)
        patch.setattr(xe, "xe_step", lambda *args: float("nan"))
        capsys.readouterr()
        assert main([*command, "optim.lr=0.9"]) == 2
    err = capsys.readouterr().err.strip()
    assert "the xe loss became nan at step 1" in err and "it saved no checkpoint" in err, err
    assert "resume=true" not in err and "last checkpoint" not in err and len(err.splitlines()) == 1
    assert main([*command, "optim.lr=0.001"]) == 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["optim"]["lr"] == 0.001
    assert (tmp_path / "run" / "best" / "checkpoint.json").is_file()


def test_the_same_run_from_another_working_directory(tmp_path, monkeypatch):
    """config.json records paths absolute: written from elsewhere, they name the same files (no change)."""
    first = tmp_path / "first"
    first.mkdir()
    make_tiny_dataset(first)
    recipe = str(REPO / "tests" / "train" / "empty.yaml")

    def command(root: str, *extra: str) -> list[str]:
        return ["train", recipe, *tiny_overrides(f"{root}/dataset.json", f"{root}/feats.h5", f"{root}/run",
                                                 **{"xe.epochs": 1}), *extra]

    monkeypatch.chdir(first)
    assert main(command(".")) == 0
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(command("../first", "xe.epochs=2", "resume=true")) == 0
    assert [r["step"] for r in read_log(first / "run" / "log.jsonl") if r["split"] == "train"] == list(range(1, 13))
    assert json.loads((first / "run" / "config.json").read_text())["data"]["dataset"] == str(first / "dataset.json")
