"""A regenerated dataset is noticed: re-running extraction re-encodes exactly the images that changed."""

from __future__ import annotations

import os

import h5py
import numpy as np

from rlcap.cli import main
from rlcap.data.features import open_feature_store
from rlcap.encoders.extract import extract_features
from tests.encoders.conftest import write_images

SIZE = 64  # 2x2 grid: fast


def _fc(out, id):
    with open_feature_store(out) as store:
        return store.get(id)[0].copy()


def test_changed_images_are_reencoded_in_place(tmp_path, make_images):
    images = make_images(tmp_path / "im", 4)
    out = tmp_path / "f.h5"
    assert extract_features(images, out, image_size=SIZE).encoded == 4
    before = {id: _fc(out, id) for id in images}
    write_images(tmp_path / "im", 1, start=7)  # img7.png's pixels ...
    os.replace(tmp_path / "im" / "img7.png", images["img2"])  # ... replace img2's: a regenerated image
    stats = extract_features(images, out, image_size=SIZE)
    assert (stats.encoded, stats.changed, stats.already_done) == (1, 1, 3)
    with open_feature_store(out) as store:
        assert store.ids() == ["img0", "img1", "img2", "img3"]  # rewritten in its row, not appended
    assert not np.allclose(_fc(out, "img2"), before["img2"])
    for id in ("img0", "img1", "img3"):
        np.testing.assert_array_equal(_fc(out, id), before[id])
    assert extract_features(images, out, image_size=SIZE).encoded == 0


def test_touched_but_identical_image_is_not_reencoded(tmp_path, make_images):
    images = make_images(tmp_path / "im", 2)
    out = tmp_path / "f.h5"
    extract_features(images, out, image_size=SIZE)
    os.utime(images["img1"], ns=(10**18, 10**18))  # a copy without -p: new mtime, same bytes
    stats = extract_features(images, out, image_size=SIZE)
    assert (stats.encoded, stats.already_done) == (0, 2)
    with h5py.File(out, "r") as f:  # the new stat is recorded, so the next run reads nothing
        assert f["file_mtime_ns"][1] == 10**18


def test_store_without_fingerprints_is_reencoded(tmp_path, make_images):
    """A file written before fingerprints were recorded cannot vouch for its rows: they are redone."""
    images = make_images(tmp_path / "im", 3)
    out = tmp_path / "f.h5"
    extract_features(images, out, image_size=SIZE)
    with h5py.File(out, "r+") as f:
        for name in ("file_size", "file_mtime_ns", "file_digest"):
            del f[name]
    stats = extract_features(images, out, image_size=SIZE)
    assert (stats.encoded, stats.changed) == (3, 3)
    assert extract_features(images, out, image_size=SIZE).encoded == 0


def test_missing_file_keeps_its_features(tmp_path, make_images):
    images = make_images(tmp_path / "im", 2)
    out = tmp_path / "f.h5"
    extract_features(images, out, image_size=SIZE)
    images["img1"].unlink()
    stats = extract_features(images, out, image_size=SIZE)
    assert (stats.encoded, stats.already_done) == (0, 2)
    assert len(open_feature_store(out)) == 2


def test_cli_reports_changed_images(tmp_path, capsys):
    write_images(tmp_path / "im", 3)
    out = tmp_path / "f.h5"
    argv = ["features", str(tmp_path / "im"), "--out", str(out), "--image-size", str(SIZE)]
    assert main(argv) == 0
    write_images(tmp_path / "new", 1, start=9)
    os.replace(tmp_path / "new" / "img9.png", tmp_path / "im" / "img0.png")
    capsys.readouterr()
    assert main(argv) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{out}: encoded 1 images (")
    assert line.endswith("/s, 1 of them changed since last encoded), 2 already present, 0 skipped")


def test_cli_refuses_another_image_size_in_one_line(tmp_path, capsys):
    write_images(tmp_path / "im", 2)
    out = tmp_path / "f.h5"
    assert main(["features", str(tmp_path / "im"), "--out", str(out), "--image-size", "64"]) == 0
    capsys.readouterr()
    assert main(["features", str(tmp_path / "im"), "--out", str(out), "--image-size", "96"]) == 2
    assert capsys.readouterr().err == (
        f"rlcap features: error: {out} holds features made with image_size=64, not 96: "
        "give the same setting to continue it, or write them to another file (or delete this one to start over)\n")
