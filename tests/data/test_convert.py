"""Converting any store into rlcap's HDF5: rows bit for bit in float32 and rounded once in float16, boxes
kept, HDF5 attributes carried over, resumed after a killed run, and an output of another source refused."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from rlcap.data.features import HDF5FeatureStore, HDF5FeatureWriter, open_feature_store
from rlcap.data.features.convert import ConvertStats, convert_store
from rlcap.errors import ConfigError, DataError
from tests.data.test_tsv import IDS, images, write_folder, write_tsv


@pytest.fixture
def source(tmp_path):
    return write_tsv(tmp_path / "feats.tsv", images())


def _rows(path, ids):
    with open_feature_store(path) as store:
        return [store.get(id) for id in ids]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rows_after_the_round_trip(source, tmp_path, dtype):
    out = tmp_path / "out.h5"
    done = []
    stats = convert_store(source, out, dtype=dtype, batch=5, progress=done.append)
    assert isinstance(stats, ConvertStats) and stats[:2] == (12, 0) and stats.seconds > 0 and done == [5, 5, 2]
    store = open_feature_store(out)
    assert isinstance(store, HDF5FeatureStore) and store.ids() == IDS and store.max_regions == 7
    assert store.attrs == {"source": str(source.resolve()), "source_layout": "bottom-up-attention tsv"}
    for (fc, att), (fc_src, att_src) in zip(_rows(out, IDS), _rows(source, IDS)):
        assert fc.dtype == np.dtype(dtype) and att.shape == att_src.shape
        # float32 bit for bit; float16 the source's rows rounded once
        assert fc.tobytes() == fc_src.astype(dtype).tobytes() and att.tobytes() == att_src.astype(dtype).tobytes()
    data = images()
    for id, boxes in zip(IDS, store.boxes(IDS)):
        assert boxes.dtype == np.float32 and np.array_equal(boxes, data[id][0])
    with h5py.File(out, "r") as f:
        assert f["boxes"].shape == (12, 7, 4) and not f["boxes"][0, 3:].any()  # zero past the 3 regions


def test_folder_stores_and_hdf5_attributes(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "npz").mkdir()
    for k in range(5):  # 1 to 5 regions: the largest count is found by reading every file once
        np.savez(tmp_path / "npz" / f"im{k}.npz", att=rng.normal(size=(k + 1, 3)).astype(np.float32))
    convert_store(tmp_path / "npz", tmp_path / "npz.h5", dtype="float32")
    with open_feature_store(tmp_path / "npz.h5") as store:
        assert store.max_regions == 5 and store.region_counts(store.ids()).tolist() == [1, 2, 3, 4, 5]
        assert store.attrs["source_layout"] == "npz folder" and not store.has_boxes
        with pytest.raises(DataError, match=f"^{tmp_path / 'npz.h5'} holds no region boxes"):
            store.boxes(["im0"])
    fc = rng.normal(size=(3, 3)).astype(np.float32)
    with HDF5FeatureWriter(tmp_path / "src.h5", 3, 3, 2, attrs={"encoder": "e", "image_size": 64}) as writer:
        writer.write(["a", "b", "c"], fc, rng.normal(size=(3, 2, 3)).astype(np.float32))
    convert_store(tmp_path / "src.h5", tmp_path / "copy.h5", dtype="float32")
    with open_feature_store(tmp_path / "copy.h5") as store:
        assert store.attrs == {"encoder": "e", "image_size": 64, "source": str((tmp_path / "src.h5").resolve()),
                               "source_layout": "rlcap hdf5"}
        assert [r[0].tobytes() for r in _rows(tmp_path / "copy.h5", "abc")] == [
            r[0].astype(np.float32).tobytes() for r in _rows(tmp_path / "src.h5", "abc")]


def test_a_killed_conversion_resumes(tmp_path, monkeypatch):
    folder = write_folder(tmp_path / "tsv", images())
    out = tmp_path / "out.h5"
    write = HDF5FeatureWriter.write

    def killed_after_one_batch(self, ids, *args, **kwargs):
        if len(self):
            raise KeyboardInterrupt
        return write(self, ids, *args, **kwargs)

    monkeypatch.setattr(HDF5FeatureWriter, "write", killed_after_one_batch)
    with pytest.raises(KeyboardInterrupt):
        convert_store(folder, out, batch=4)
    assert len(open_feature_store(out)) == 4
    monkeypatch.setattr(HDF5FeatureWriter, "write", write)
    done = []
    assert convert_store(folder, out, batch=4, progress=done.append)[:2] == (8, 4) and done == [4, 4, 4]
    convert_store(folder, tmp_path / "whole.h5", batch=100)
    order = open_feature_store(folder).ids()
    with open_feature_store(out) as resumed, open_feature_store(tmp_path / "whole.h5") as whole:
        assert resumed.ids() == whole.ids() == order
        a, b = resumed.load_all(order), whole.load_all(order)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert all(np.array_equal(x, y) for x, y in zip(resumed.boxes(order), whole.boxes(order)))
    assert convert_store(folder, out)[:2] == (0, 12)


def test_an_output_of_another_source_is_refused(source, tmp_path):
    out = tmp_path / "out.h5"
    convert_store(source, out)
    other = write_tsv(tmp_path / "other.tsv", images(seed=1))
    with pytest.raises(DataError, match=f"^{out} holds features converted from {source.resolve()} \\(bottom-up-attention "
                                        f"tsv\\), not from {other.resolve()} \\(bottom-up-attention tsv\\): rows of two "
                                        f"sources do not mix in one file: convert into another file, or delete {out} "
                                        "to start over$"):
        convert_store(other, out)
    with HDF5FeatureWriter(tmp_path / "extracted.h5", 16, 16, 7) as writer:
        writer.write(["x"], np.zeros((1, 16)), np.ones((1, 7, 16)))
    with pytest.raises(DataError, match="extracted.h5 holds features that were not converted from a store"):
        convert_store(source, tmp_path / "extracted.h5")
    with pytest.raises(DataError, match="is the store being converted"):
        convert_store(out, out)
    with pytest.raises(ConfigError, match="must be an .h5 or .hdf5 file"):
        convert_store(source, tmp_path / "out.tsv")


def test_values_beyond_float16_are_refused_in_float16(tmp_path):
    data = images()
    data[IDS[2]][1][0, 0] = 1e6
    path = write_tsv(tmp_path / "big.tsv", data)
    with pytest.raises(DataError, match=f"image '{IDS[2]}' has values beyond float16's range \\(65504\\): convert "
                                        "with dtype float32$"):
        convert_store(path, tmp_path / "big.h5")
    assert convert_store(path, tmp_path / "big32.h5", dtype="float32").converted == 12


def test_a_writer_keeping_boxes_refuses_rows_without_them(tmp_path):
    with HDF5FeatureWriter(tmp_path / "b.h5", 2, 2, 3, boxes=True) as writer:
        with pytest.raises(ValueError, match="keeps region boxes"):
            writer.write(["a"], np.zeros((1, 2)), np.ones((1, 3, 2)))
        writer.write(["a"], np.zeros((1, 2)), np.ones((1, 3, 2)), [2], boxes=np.ones((1, 3, 4)))
    with open_feature_store(tmp_path / "b.h5") as store:
        assert store.boxes(["a"])[0].tolist() == [[1, 1, 1, 1]] * 2
    with HDF5FeatureWriter(tmp_path / "n.h5", 2, 2, 3) as writer:
        writer.write(["a"], np.zeros((1, 2)), np.ones((1, 3, 2)))
    with pytest.raises(DataError, match="n.h5 holds 1 rows without region boxes"):
        HDF5FeatureWriter(tmp_path / "n.h5", 2, 2, 3, boxes=True)
