"""A self-critical.pytorch data/ folder (cocotalk.json, cocotalk_label.h5, cocobu_fc/, cocobu_att/) read by rlcap."""

import json

import h5py
import numpy as np
import pytest

from rlcap.data.loader import DataConfig, load_data
from rlcap.data.self_critical import import_self_critical
from rlcap.errors import DataError

WORDS = {"1": "a", "2": "dog", "3": "runs", "4": "cat", "5": "sleeps", "6": "UNK"}


def make_folder(folder, karpathy=False):
    """Three images as self-critical's scripts leave them: image 10 (train) has two captions, 11 (restval)
    one, 12 (val) two; labels 1-based, zero-padded to 4 words; 3 regions of 5-d bottom-up features."""
    images = [{"id": 10, "split": "train", "file_path": "train2014/10.jpg"},
              {"id": 11, "split": "restval", "file_path": "val2014/11.jpg"},
              {"id": 12, "split": "val", "file_path": "val2014/12.jpg"}]
    (folder / "cocotalk.json").write_text(json.dumps({"ix_to_word": WORDS, "images": images}))
    labels = np.array([[1, 2, 3, 0], [2, 3, 0, 0], [1, 4, 5, 6], [4, 5, 0, 0], [1, 4, 0, 0]], dtype=np.uint32)
    with h5py.File(folder / "cocotalk_label.h5", "w") as h5:
        h5["labels"] = labels
        h5["label_start_ix"] = np.array([1, 3, 4], dtype=np.uint32)
        h5["label_end_ix"] = np.array([2, 3, 5], dtype=np.uint32)
    (folder / "cocobu_fc").mkdir()
    (folder / "cocobu_att").mkdir()
    for i in (10, 11, 12):
        np.save(folder / "cocobu_fc" / f"{i}.npy", np.full(5, i, dtype=np.float32))
        np.savez_compressed(folder / "cocobu_att" / f"{i}.npz", feat=np.full((3, 5), -i, dtype=np.float32))
    if karpathy:
        (folder / "dataset_coco.json").write_text(json.dumps({"images": [
            {"cocoid": i, "split": "train", "filename": f"{i}.jpg", "sentences": [{"raw": "A raw caption."}]}
            for i in (10, 11, 12)]}))


def test_cocotalk_labels_become_a_caption_file_rlcap_reads(tmp_path):
    make_folder(tmp_path)
    data = import_self_critical(tmp_path, tmp_path / "out" / "dataset.json")
    assert data.features == tmp_path / "cocobu"
    loaded = load_data(DataConfig(dataset=str(data.dataset), features=str(data.features), min_count=1),
                       splits=("train", "val"))
    train, val = loaded.splits["train"], loaded.splits["val"]
    assert train.ids == ["10", "11"] and val.ids == ["12"]  # restval joins train
    assert train.refs == [["a dog runs", "dog runs"], ["a cat sleeps UNK"]]
    assert val.refs == [["cat sleeps", "a cat"]]
    assert train.tokens[1] == [["a", "cat", "sleeps", "unk"]]  # rlcap's tokenizer lower-cases self-critical's UNK
    feats = train.feats(np.array([1]))
    np.testing.assert_array_equal(feats.fc.numpy(), np.full((1, 5), 11.0))
    np.testing.assert_array_equal(feats.att.numpy(), np.full((1, 3, 5), -11.0))


def test_karpathy_file_in_the_folder_is_read_as_it_is(tmp_path):
    make_folder(tmp_path, karpathy=True)
    data = import_self_critical(tmp_path, tmp_path / "out.json")
    assert data.dataset == tmp_path / "dataset_coco.json" and not (tmp_path / "out.json").exists()


def test_missing_or_inconsistent_files_are_named(tmp_path):
    with pytest.raises(DataError, match="no features, expected one of cocobu_att/"):
        import_self_critical(tmp_path, tmp_path / "out.json")
    make_folder(tmp_path)
    (tmp_path / "cocotalk_label.h5").unlink()
    with pytest.raises(DataError, match="no captions, expected dataset_coco.json, or cocotalk.json with"):
        import_self_critical(tmp_path, tmp_path / "out.json")
    with h5py.File(tmp_path / "cocotalk_label.h5", "w") as h5:
        h5["labels"] = np.array([[1, 9, 0]], dtype=np.uint32)
        h5["label_start_ix"] = np.array([1, 1, 1], dtype=np.uint32)
        h5["label_end_ix"] = np.array([1, 1, 1], dtype=np.uint32)
    with pytest.raises(DataError, match=r"images\[0\] \(id 10\): word id 9 is not in ix_to_word"):
        import_self_critical(tmp_path, tmp_path / "out.json")
