"""Features out of core: a split read batch by batch from the store (data.in_memory=false, or auto
above the size limit) gives the same tensors, batches and training losses as one read into memory."""

import numpy as np
import pytest
import torch

from rlcap import api
from rlcap.data import split_features
from rlcap.data.features import HDF5FeatureWriter
from rlcap.data.loader import DataConfig, load_data
from rlcap.errors import ConfigError
from rlcap.train.logger import read_log
from tests.tiny import make_tiny_dataset, tiny_overrides


@pytest.fixture
def ragged(tmp_path):
    """The tiny dataset with a store whose images have 1 to 4 regions."""
    dataset, feats = make_tiny_dataset(tmp_path)
    ids = [str(i) for i in range(36)]
    rng = np.random.default_rng(1)
    counts = np.array([1 + i % 4 for i in range(36)])
    att = rng.normal(size=(36, 4, 8)).astype(np.float32)
    store = tmp_path / "ragged.h5"
    with HDF5FeatureWriter(store, 8, 8, 4) as writer:
        writer.write(ids, rng.normal(size=(36, 8)).astype(np.float32), att, counts)
    return dataset, store


def _split(dataset, store, in_memory):
    return load_data(DataConfig(dataset=str(dataset), features=str(store), in_memory=in_memory, min_count=1),
                     ("train",)).splits["train"]


def test_out_of_core_rows_are_the_in_memory_rows(ragged):
    memory, lazy = _split(*ragged, True), _split(*ragged, False)
    assert memory.features.in_memory and not lazy.features.in_memory
    index = torch.tensor([5, 0, 3, 17])
    for a, b in zip(memory.feats(index)[:3], lazy.feats(index)[:3]):  # (no pixels)
        assert a.shape == b.shape and torch.equal(a, b)  # padded to the split's width, not the batch's
    for a, b in zip(memory.batches(5, 2, seed=3, epoch=1, start_step=1), lazy.batches(5, 2, seed=3, epoch=1,
                                                                                       start_step=1)):
        assert torch.equal(a.index, b.index) and torch.equal(a.tokens, b.tokens)
        assert all(torch.equal(x, y) for x, y in zip(a.feats[:3], b.feats[:3]))  # read ahead by the prefetching thread
    assert torch.equal(memory.fc, lazy.fc) and torch.equal(memory.att_mask, lazy.att_mask)


def test_auto_reads_batch_by_batch_above_the_limit(ragged, monkeypatch):
    assert _split(*ragged, "auto").features.in_memory  # 24 images: a few kB
    monkeypatch.setattr(split_features, "IN_MEMORY_LIMIT", 100)
    assert not _split(*ragged, "auto").features.in_memory
    with pytest.raises(ConfigError, match="data.in_memory: 'sometimes' is not one of true, false, auto"):
        api.load_run_config(None, ["data.in_memory=sometimes"])


def test_training_out_of_core_gives_the_same_losses(tmp_path):
    dataset, feats = make_tiny_dataset(tmp_path)
    losses = {}
    for in_memory in ("true", "false"):
        out = tmp_path / in_memory
        api.train(api.load_run_config(None, tiny_overrides(dataset, feats, out, **{
            "data.in_memory": in_memory, "max_steps": 12, "model.arch": "updown"})))
        losses[in_memory] = [r["loss"] for r in read_log(out / "log.jsonl") if r["split"] == "train"]
    assert len(losses["true"]) == 12 and losses["true"] == losses["false"]


def test_a_store_changed_under_an_out_of_core_split_is_refused_at_the_next_read(ragged, tmp_path):
    """Replaced by another file (a new extraction moved into place), or rewritten in place: either way
    the rows read now are not the rows the split was opened on."""
    import os
    import shutil

    from rlcap.data.split_features import StoreChanged

    dataset, store = ragged
    lazy = _split(dataset, store, False)
    lazy.feats(torch.arange(2))  # reads
    copy = tmp_path / "copy.h5"
    shutil.copy(store, copy)
    os.replace(copy, store)
    with pytest.raises(StoreChanged, match=r"ragged.h5 changed while this run was reading it \(it is another file "):
        lazy.feats(torch.arange(2))
    lazy = _split(dataset, store, False)
    stat = store.stat()
    os.utime(store, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with pytest.raises(StoreChanged, match=r"\(rewritten in place\)"):
        lazy.feats(torch.arange(2))


def test_check_all_reads_the_first_rows_of_an_out_of_core_split(ragged):
    """What a run does with its validation split at start: a bad row among the rows it validates on is
    found then, one past them is left to the batch that reads it."""
    import h5py

    from rlcap.errors import DataError

    dataset, store = ragged
    with h5py.File(store, "r+") as f:
        f["att"][5] = np.full(f["att"].shape[1:], np.inf, dtype=f["att"].dtype)
    lazy = _split(dataset, store, False)
    lazy.features.check_all(limit=5)
    with pytest.raises(DataError, match="the features of image '5' are not finite"):
        lazy.features.check_all()
