"""extract_features: writes what the encoder computes, resumes, skips or stops at bad images."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from rlcap.data.features import open_feature_store
from rlcap.encoders.efficientnet import EfficientNetLite0Encoder
from rlcap.encoders.extract import extract_features
from rlcap.encoders.images import load_image, preprocess
from rlcap.encoders.sources import find_images, karpathy_images
from rlcap.errors import ConfigError, DataError

SIZE = 64  # 2x2 grid: fast


def test_writes_encoder_output(tmp_path, make_images):
    images = make_images(tmp_path / "im", 5)
    out = tmp_path / "f.h5"
    stats = extract_features(images, out, image_size=SIZE, batch_size=2)
    assert (stats.encoded, stats.already_done, stats.failed) == (5, 0, [])
    encoder = EfficientNetLite0Encoder(SIZE)
    with torch.inference_mode():
        fc, att = encoder.encode(preprocess([load_image(images["img3"])], SIZE))
    with open_feature_store(out) as store:
        assert store.ids() == [f"img{k}" for k in range(5)]
        assert store.attrs["encoder"] == "efficientnet-lite0" and store.attrs["grid"] == 2
        got_fc, got_att = store.get("img3")
        assert got_fc.dtype == np.float16 and got_att.shape == (4, 1280)
        np.testing.assert_allclose(got_fc, fc[0].numpy(), atol=2e-2)
        np.testing.assert_allclose(got_att, att[0].numpy(), atol=2e-2)


def test_resume_encodes_only_new_ids(tmp_path, make_images):
    first = make_images(tmp_path / "im", 3)
    out = tmp_path / "f.h5"
    assert extract_features(first, out, image_size=SIZE).encoded == 3
    everything = {**first, **make_images(tmp_path / "im", 4, start=3)}
    seen = []
    stats = extract_features(everything, out, image_size=SIZE, batch_size=2, progress=seen.append)
    assert (stats.encoded, stats.already_done) == (4, 3)
    assert sum(seen) == 7
    assert len(open_feature_store(out)) == 7
    assert extract_features(everything, out, image_size=SIZE).encoded == 0


def test_interrupted_run_resumes(tmp_path, make_images):
    images = make_images(tmp_path / "im", 6)
    (tmp_path / "im" / "img4.png").write_bytes(b"garbage")
    out = tmp_path / "f.h5"
    with pytest.raises(DataError, match="img4.png"):
        extract_features(images, out, image_size=SIZE, batch_size=2, num_workers=2)
    assert sorted(open_feature_store(out).ids()) == ["img0", "img1", "img2", "img3"]
    # a batch killed after its features but before its ids landed: extra rows, no ids
    with h5py.File(out, "r+") as f:
        for name in ("fc", "att", "att_count"):
            f[name].resize(f[name].shape[0] + 2, axis=0)
    make_images(tmp_path / "im", 1, start=4)
    stats = extract_features(images, out, image_size=SIZE, batch_size=2)
    assert (stats.encoded, stats.already_done) == (2, 4)
    with h5py.File(out, "r") as f:
        assert f["fc"].shape[0] == f["ids"].shape[0] == 6


def test_skip_bad_images(tmp_path, make_images):
    images = make_images(tmp_path / "im", 4)
    (tmp_path / "im" / "img1.png").write_bytes(b"garbage")
    images["ghost"] = tmp_path / "im" / "ghost.png"
    stats = extract_features(images, tmp_path / "f.h5", image_size=SIZE, batch_size=2, on_error="skip")
    assert stats.encoded == 3
    assert [id for id, _ in stats.failed] == ["img1", "ghost"]
    assert "image not found" in stats.failed[1][1]
    assert sorted(open_feature_store(tmp_path / "f.h5").ids()) == ["img0", "img2", "img3"]


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_threads_keep_order(tmp_path, workers, make_images):
    images = make_images(tmp_path / "im", 5)
    extract_features(images, tmp_path / "f.h5", image_size=SIZE, batch_size=2, num_workers=workers)
    assert open_feature_store(tmp_path / "f.h5").ids() == list(images)


def test_other_image_size_refuses_to_append(tmp_path, make_images):
    images = make_images(tmp_path / "im", 1)
    extract_features(images, tmp_path / "f.h5", image_size=SIZE)
    with pytest.raises(DataError, match="image_size"):
        extract_features(images, tmp_path / "f.h5", image_size=96)


def test_invalid_arguments(tmp_path):
    with pytest.raises(ConfigError, match="'raise', 'skip'"):
        extract_features({}, tmp_path / "f.h5", on_error="ignore")
    with pytest.raises(ConfigError, match="at least 32 pixels, got 16"):
        extract_features({}, tmp_path / "f.h5", image_size=16)
    assert not (tmp_path / "f.h5").exists()


def test_find_images_by_stem(tmp_path, make_images):
    make_images(tmp_path / "a", 2)
    make_images(tmp_path / "a" / "sub", 1, start=5)
    (tmp_path / "a" / "notes.txt").write_text("x")
    assert list(find_images(tmp_path / "a")) == ["img0", "img1", "img5"]
    make_images(tmp_path / "a" / "dup", 1)
    with pytest.raises(DataError, match="img0"):
        find_images(tmp_path / "a")


def test_karpathy_ids_and_paths(tmp_path):
    dataset = tmp_path / "dataset.json"
    dataset.write_text('{"images": [{"filepath": "val2014", "filename": "a.jpg", "cocoid": 42, "imgid": 0},'
                       '{"filename": "b.jpg", "imgid": 7}]}')
    assert karpathy_images(dataset, tmp_path) == {"42": tmp_path / "val2014" / "a.jpg", "7": tmp_path / "b.jpg"}
    dataset.write_text('{"images": [{"filename": "a.jpg"}]}')
    with pytest.raises(DataError, match="record 0"):
        karpathy_images(dataset, tmp_path)
