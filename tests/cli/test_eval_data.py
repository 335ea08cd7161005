"""`rlcap eval` finds a checkpoint's data from any directory, refuses features of another image size,
and keeps image ids as the dataset spells them."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from rlcap import api
from rlcap.cli import main
from rlcap.data.features import HDF5FeatureWriter, open_feature_store
from tests.tiny import make_tiny_dataset, tiny_overrides


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint trained from data given by paths relative to the working directory then."""
    import os

    folder = tmp_path_factory.mktemp("evaldata")
    make_tiny_dataset(folder)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        api.train(api.load_run_config(None, tiny_overrides("dataset.json", "feats.h5", "run", **{"xe.epochs": 1})))
    finally:
        os.chdir(cwd)
    return folder, folder / "run" / "best"


def _one_line(capsys, argv) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_checkpoint_paths_are_relative_to_it(trained, tmp_path, monkeypatch, capsys):
    folder, ckpt = trained
    config = json.loads((ckpt / "config.json").read_text())
    assert config["paths_relative_to"] == "checkpoint" and config["data"]["features"] == "../../feats.h5"
    monkeypatch.chdir(tmp_path)  # somewhere else entirely
    threads = torch.get_num_threads()
    try:  # (--threads: the command's torch threads, as rlcap features and rlcap bench take them)
        assert main(["eval", str(ckpt), "--beam-size", "1", "--out", str(tmp_path / "e"), "--threads", "1"]) == 0, \
            capsys.readouterr().err
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_missing_data_file_names_the_path_tried(trained, tmp_path, monkeypatch, capsys):
    folder, ckpt = trained
    moved = tmp_path / "ckpt"
    shutil.copytree(ckpt, moved)  # the copy's ../../feats.h5 is tmp_path/../feats.h5: not there
    monkeypatch.chdir(tmp_path)
    tried = (tmp_path / ".." / "dataset.json").resolve()
    assert _one_line(capsys, ["eval", str(moved)]) == (
        f"rlcap eval: error: data.dataset: {tried} not found (the checkpoint's '../../dataset.json', "
        "relative to the checkpoint folder); pass data.dataset=PATH")
    assert _one_line(capsys, ["eval", str(moved), f"data.dataset={folder / 'dataset.json'}",
                              "data.features=nope.h5"]) == (
        "rlcap eval: error: data.features: nope.h5 not found (as given); pass data.features=PATH")


def test_old_checkpoint_paths_are_relative_to_the_working_directory(trained, tmp_path, monkeypatch, capsys):
    folder, ckpt = trained
    old = tmp_path / "old"
    shutil.copytree(ckpt, old)
    config = json.loads((old / "config.json").read_text())
    del config["paths_relative_to"]
    config["data"].update(dataset="dataset.json", features="feats.h5")
    (old / "config.json").write_text(json.dumps(config))
    monkeypatch.chdir(folder)
    assert main(["eval", str(old), "--beam-size", "1", "--out", str(tmp_path / "e")]) == 0, capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    assert _one_line(capsys, ["eval", str(old)]) == (
        f"rlcap eval: error: data.dataset: dataset.json not found (the checkpoint's path, relative to the "
        f"working directory {tmp_path}); pass data.dataset=PATH")


def test_features_of_another_image_size_are_refused(trained, tmp_path, capsys):
    folder, ckpt = trained
    _, other = make_tiny_dataset(tmp_path, image_size=64)  # same ids and sizes, made from 64-px images
    assert _one_line(capsys, ["eval", str(ckpt), f"data.features={other}"]) == (
        f"rlcap eval: error: {ckpt} was trained on features of 32-px images, but {other} holds features of "
        "64-px images: pass data.features=FILE extracted with `rlcap features --image-size 32`")


def test_coco_results_keep_ids_that_are_not_plain_integers():
    assert api.coco_results({"42": "a", "7": "b", "0": "c"}) == [
        {"image_id": 42, "caption": "a"}, {"image_id": 7, "caption": "b"}, {"image_id": 0, "caption": "c"}]
    assert api.coco_results({"0042": "a", "7": "b"}) == [
        {"image_id": "0042", "caption": "a"}, {"image_id": "7", "caption": "b"}]
    assert api.coco_results({"img1": "a", "2": "b"})[1] == {"image_id": "2", "caption": "b"}
    assert api.coco_results({"٣": "a"}) == [{"image_id": "٣", "caption": "a"}]  # a non-ASCII digit


def test_zero_padded_ids_score_end_to_end(trained, tmp_path, capsys):
    """Ids "0000".."0035": eval writes them as strings and `rlcap score` matches them to the
    Karpathy file's references (before: 42 in the predictions, "0042" in the references)."""
    folder, ckpt = trained
    data = json.loads((folder / "dataset.json").read_text())
    for image in data["images"]:
        image["id"] = f"{image.pop('imgid'):04d}"
    dataset = tmp_path / "padded.json"
    dataset.write_text(json.dumps(data))
    feats = tmp_path / "padded.h5"
    with open_feature_store(folder / "feats.h5") as store, \
            HDF5FeatureWriter(feats, 8, 8, 4, attrs={"image_size": 32}) as writer:
        ids = store.ids()
        loaded = store.load_all(ids)
        writer.write([f"{int(i):04d}" for i in ids], np.asarray(loaded.fc), np.asarray(loaded.att))
    out = tmp_path / "e"
    assert main(["eval", str(ckpt), f"data.dataset={dataset}", f"data.features={feats}", "--beam-size", "1",
                 "--out", str(out)]) == 0, capsys.readouterr().err
    predictions = json.loads((out / "predictions.json").read_text())
    assert {p["image_id"] for p in predictions} == {f"{i:04d}" for i in range(30, 36)}
    assert main(["score", "--refs", str(dataset), "--preds", str(out / "predictions.json"), "--metrics", "CIDEr",
                 "--out", str(tmp_path / "s.json")]) == 0
    assert set(json.loads((tmp_path / "s.json").read_text())["per_image"]) == {f"{i:04d}" for i in range(30, 36)}
