"""Image tokens computed online (no data.features: rlcap.encoders.online) are the float32 store's tokens for the same
pictures, for every transformers family rlcap builds; and a split read online hands the loader the same Feats a
split read from the store does."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rlcap.models.hf.build_captioner import CAPTIONER_FAMILIES
from rlcap.models.hf.build_vlm import VLM_FAMILIES

pytest.importorskip("transformers")
CAPTIONS = ["a red circle on the left", "a big blue square", "a small green triangle", "the red square ."]
SIZES = ((24, 40), (40, 16), (24, 40))  # (height, width): two sizes, one twice


def _dataset(folder):
    """Three pictures as PNG files and a Karpathy JSON naming them (all in the training split)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    (folder / "images").mkdir(parents=True)
    records = []
    for k, (h, w) in enumerate(SIZES):
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(folder / "images" / f"p{k}.png")
        records.append({"id": f"p{k}", "filename": f"p{k}.png", "split": "train",
                        "sentences": [{"raw": c, "tokens": c.split()} for c in CAPTIONS[k:k + 2]]})
    (folder / "data.json").write_text(json.dumps({"images": records}))
    return folder / "data.json", folder / "images"


def _built(family, folder):
    from rlcap.models.hf.build_captioner import build_captioner
    from rlcap.models.hf.build_vlm import build_vlm

    if family in CAPTIONER_FAMILIES:
        return build_captioner(family, folder, CAPTIONS, "tiny")
    return build_vlm(family, folder, CAPTIONS)


@pytest.mark.parametrize("family", CAPTIONER_FAMILIES + VLM_FAMILIES)
def test_online_tokens_are_the_float32_stores(family, tmp_path):
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.encoders.extract import extract_features
    from rlcap.encoders.sources import dataset_files
    from rlcap.models.architectures import online_features
    from rlcap.models.model_config import ModelConfig

    dataset, images = _dataset(tmp_path / "data")
    folder = _built(family, tmp_path / family)
    extract_features(dataset_files(dataset, images), tmp_path / "feats.h5", encoder=f"hf:{folder}",
                     dtype="float32", device="cpu", num_workers=0)
    stored = DataConfig(dataset=str(dataset), features=str(tmp_path / "feats.h5"), min_count=1)
    online = DataConfig(dataset=str(dataset), images=str(images), min_count=1, workers=1)
    model = ModelConfig(arch="hf", path=str(folder))
    assert online_features(model, stored, "cpu") is None  # a store given: it is read
    vocab = load_data(stored, ("train",)).vocab
    from_store = load_data(stored, ("train",), vocab=vocab).splits["train"]
    from_pictures = load_data(online, ("train",), vocab=vocab, online=online_features(model, online, "cpu"))
    split = from_pictures.splits["train"]
    assert (split.fc_dim, split.att_dim, split.image_size) == (from_store.fc_dim, from_store.att_dim,
                                                               from_store.image_size)
    # what the policy's store check and the checkpoint read of the features: the store's records
    assert split.features.encoder == from_store.features.encoder
    index = torch.tensor([2, 0, 1])
    want, got = from_store.feats(index), split.feats(index)
    torch.testing.assert_close(got.att_mask, want.att_mask[:, : got.att_mask.shape[1]])
    assert not want.att_mask[:, got.att_mask.shape[1]:].any()  # (the store pads to its split's widest)
    torch.testing.assert_close(got.fc, want.fc, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.att, want.att[:, : got.att.shape[1]], rtol=1e-5, atol=1e-5)
    # the loader's read-ahead path (read in a worker process, data.workers=1; the image side on the training thread)
    # gives the same rows
    batch = next(split.batches(3, 1, seed=0, epoch=0))
    stored_batch = next(from_store.batches(3, 1, seed=0, epoch=0))
    torch.testing.assert_close(batch.feats.fc, stored_batch.feats.fc, rtol=1e-5, atol=1e-5)
    assert torch.equal(batch.tokens, stored_batch.tokens)


def test_no_store_and_no_online_route_is_one_line(tmp_path):
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.errors import ConfigError
    from rlcap.models.architectures import online_features
    from rlcap.models.model_config import ModelConfig

    dataset, images = _dataset(tmp_path / "data")
    cfg = DataConfig(dataset=str(dataset), images=str(images), min_count=1)
    assert online_features(ModelConfig(arch="updown"), cfg, "cpu") is None  # rlcap's own models read a store
    with pytest.raises(ConfigError, match="data.features is not set.*data.images=DIR"):
        load_data(cfg, ("train",))


def test_a_missing_picture_is_refused_at_start(tmp_path):
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.errors import DataError

    dataset, images = _dataset(tmp_path / "data")
    (images / "p1.png").unlink()
    cfg = DataConfig(dataset=str(dataset), images=str(images), min_count=1)

    def never(records):
        from rlcap.encoders.online import OnlineFeatures
        from rlcap.encoders.sources import record_pictures

        return OnlineFeatures(record_pictures(records, dataset, images), [r.id for r in records], None, images)

    with pytest.raises(DataError, match=r"p1.png not found \(1 of 3 pictures missing\): give data.images=DIR"):
        load_data(cfg, ("train",), online=never)


@pytest.mark.parametrize("workers", [0, 1])
def test_under_torchrun_a_training_read_encodes_this_process_s_share_only(workers, tmp_path):
    """rlcap.train.optimizer.own_share: rank 1 of 2 encodes its rows of a training batch (what Batch.shard keeps),
    the same as a whole read's; validation's reads stay whole. On the read-ahead thread (workers 0) the processor
    is seen to run on that row alone; in a worker process the rows it gives are the whole read's."""
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.distributed import Ranks, batch_share
    from rlcap.models.architectures import online_features
    from rlcap.models.model_config import ModelConfig
    from rlcap.train.optimizer import own_share

    dataset, images = _dataset(tmp_path / "data")
    folder = _built("qwen2_vl", tmp_path / "qwen2_vl")
    cfg = DataConfig(dataset=str(dataset), images=str(images), min_count=1, workers=workers)
    factory = online_features(ModelConfig(arch="hf", path=str(folder)), cfg, "cpu")
    whole = load_data(cfg, ("train",), online=factory).splits["train"]
    ranks = Ranks(1, 2)
    split = load_data(cfg, ("train",), online=own_share(factory, ranks)).splits["train"]
    encoded = []
    host = split.features.image_encoder.host
    split.features.image_encoder.host = lambda pictures: encoded.append(len(pictures)) or host(pictures)
    batch = next(split.batches(3, 1, seed=0, epoch=0))
    rows, _ = batch_share(3, ranks)
    # (3 images over 2 processes: rows 0-1, then row 2; a worker's processor is its own)
    assert rows == slice(2, 3) and encoded == ([1] if workers == 0 else [])
    reference = next(whole.batches(3, 1, seed=0, epoch=0))
    mine = batch.shard(rows).feats
    torch.testing.assert_close(mine.att, reference.shard(rows).feats.att[:, : mine.att.shape[1]])
    torch.testing.assert_close(mine.fc, reference.shard(rows).feats.fc)
    assert not batch.feats.fc[:2].any()  # (the other process's rows: never computed here)
    assert split.feats(torch.arange(3)).fc.any(dim=1).all()  # validation's read: every row
    torch.testing.assert_close(split.feats(torch.arange(3)).fc, whole.feats(torch.arange(3)).fc)
