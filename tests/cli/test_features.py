"""`rlcap features` end to end, in-process, on a temp folder of generated PNGs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from rlcap.cli import main
from rlcap.data.features import open_feature_store


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def image_dir(tmp_path):
    folder = tmp_path / "images"
    (folder / "val2014").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("a", "b", "val2014/c"):
        Image.fromarray(rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)).save(folder / f"{name}.png")
    Image.new("L", (30, 30), 90).save(folder / "grey.png")
    return folder


def test_features_ids_are_file_stems(image_dir, tmp_path, capsys):
    out = tmp_path / "feats.h5"
    argv = ["features", str(image_dir), "--out", str(out), "--image-size", "64", "--batch-size", "3"]
    assert main(argv) == 0
    assert "encoded 4 images" in capsys.readouterr().out
    with open_feature_store(out) as store:
        assert store.ids() == ["a", "b", "c", "grey"]
        fc, att = store.get("c")
        assert fc.shape == (1280,) and att.shape == (4, 1280)
        assert store.attrs["image_size"] == 64
    assert main(argv) == 0  # resume: nothing left to do
    printed = capsys.readouterr().out
    assert "encoded 0 images" in printed and "4 already present" in printed


def test_features_from_karpathy_dataset(image_dir, tmp_path):
    dataset = tmp_path / "dataset_coco.json"
    dataset.write_text(json.dumps({"images": [
        {"filepath": "val2014", "filename": "c.png", "cocoid": 391895, "split": "val", "sentences": []},
        {"filename": "a.png", "imgid": 3, "split": "train", "sentences": []},
    ]}))
    out = tmp_path / "feats.h5"
    code = main(["features", str(image_dir), "--out", str(out), "--image-size", "64", "--dataset", str(dataset)])
    assert code == 0
    assert open_feature_store(out).ids() == ["391895", "3"]


def test_bad_image_stops_with_one_line_or_is_skipped(image_dir, tmp_path, capsys):
    (image_dir / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "feats.h5"
    argv = ["features", str(image_dir), "--out", str(out), "--image-size", "64", "--threads", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"rlcap features: error: cannot read image {image_dir / 'broken.png'}" in err
    assert main(argv + ["--skip-bad"]) == 0
    printed = capsys.readouterr().out
    assert "1 skipped" in printed and "skipped broken:" in printed
    assert "broken" not in open_feature_store(out)


def test_missing_image_dir(tmp_path, capsys):
    assert main(["features", str(tmp_path / "nope"), "--out", str(tmp_path / "f.h5")]) == 2
    assert "image folder not found" in capsys.readouterr().err


def test_features_threads_auto_resolves_as_a_run_does(image_dir, tmp_path):
    """``--threads auto``: torch's threads are the count a run's ``threads: auto`` would take (at least 1, at most
    this process's cores)."""
    from rlcap.devices import cpu_threads

    argv = ["features", str(image_dir), "--out", str(tmp_path / "f.h5"), "--image-size", "64", "--threads", "auto"]
    assert main(argv) == 0
    assert 1 <= torch.get_num_threads() <= cpu_threads("auto", others=lambda: 0)
    with open_feature_store(tmp_path / "f.h5") as store:
        assert len(store) == 4
