"""Feature stores: HDF5 and folder layouts round-trip, variable region counts, clear errors."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from rlcap.data.features import (HDF5FeatureStore, HDF5FeatureWriter, NpzFolderStore, SelfCriticalFolderStore,
    open_feature_store)
from rlcap.errors import ConfigError, DataError

D = 4


def _features(n: int, max_regions: int, seed: int = 0):
    """n images with 1..max_regions regions each: ids, fc (n, D), list of att (N_i, D)."""
    rng = np.random.default_rng(seed)
    ids = [f"im{i}" for i in range(n)]
    atts = [rng.random((int(rng.integers(1, max_regions + 1)), D), dtype=np.float32) for _ in ids]
    fcs = np.stack([a.mean(axis=0) for a in atts])
    return ids, fcs, atts


def _write_h5(path, ids, fcs, atts, max_regions, batch=3, dtype="float16"):
    with HDF5FeatureWriter(path, D, D, max_regions, dtype=dtype, attrs={"grid": 0}) as writer:
        for s in range(0, len(ids), batch):
            chunk = atts[s: s + batch]
            padded = np.zeros((len(chunk), max(len(a) for a in chunk), D), dtype=np.float32)
            for i, a in enumerate(chunk):
                padded[i, : len(a)] = a
            writer.write(ids[s: s + batch], fcs[s: s + batch], padded, [len(a) for a in chunk])


@pytest.mark.parametrize("dtype, tol", [("float16", 1e-3), ("float32", 0)])
def test_hdf5_round_trip_variable_regions(tmp_path, dtype, tol):
    ids, fcs, atts = _features(10, 5)
    _write_h5(tmp_path / "f.h5", ids, fcs, atts, 5, dtype=dtype)
    store = open_feature_store(tmp_path / "f.h5")
    assert isinstance(store, HDF5FeatureStore)
    assert store.ids() == ids and len(store) == 10 and "im3" in store and "zz" not in store
    assert (store.fc_dim, store.att_dim, store.max_regions) == (D, D, 5)
    assert store.attrs == {"grid": 0}
    for i in (0, 7):
        fc, att = store.get(ids[i])
        assert fc.dtype == np.dtype(dtype) and att.shape == atts[i].shape
        np.testing.assert_allclose(fc, fcs[i], atol=tol)
        np.testing.assert_allclose(att, atts[i], atol=tol)


def test_hdf5_load_all_matches_get_in_any_order(tmp_path):
    ids, fcs, atts = _features(700, 6)  # more rows than one bulk read
    _write_h5(tmp_path / "f.h5", ids, fcs, atts, 6, batch=64)
    store = open_feature_store(tmp_path / "f.h5")
    rng = np.random.default_rng(1)
    wanted = [ids[i] for i in rng.choice(700, 300, replace=False)] + [ids[5], ids[699]]
    loaded = store.load_all(wanted)
    counts = [len(atts[int(id[2:])]) for id in wanted]
    assert loaded.att.shape == (302, max(counts), D)
    np.testing.assert_array_equal(loaded.att_count, counts)
    np.testing.assert_array_equal(loaded.att_mask().sum(axis=1), counts)
    for k, id in enumerate(wanted):
        fc, att = store.get(id)
        np.testing.assert_array_equal(loaded.fc[k], fc)
        np.testing.assert_array_equal(loaded.att[k, : len(att)], att)
        assert not loaded.att[k, len(att):].any()


def test_missing_id_error(tmp_path):
    ids, fcs, atts = _features(2, 3)
    _write_h5(tmp_path / "f.h5", ids, fcs, atts, 3)
    store = open_feature_store(tmp_path / "f.h5")
    message = f"feature id 'nope' not found in {tmp_path / 'f.h5'}"
    with pytest.raises(DataError, match=message):
        store.get("nope")
    with pytest.raises(DataError, match=message):
        store.load_all(["im0", "nope"])


def test_writer_appends_and_refuses_mismatch(tmp_path):
    ids, fcs, atts = _features(6, 3)
    path = tmp_path / "f.h5"
    _write_h5(path, ids[:4], fcs[:4], atts[:4], 3)
    with HDF5FeatureWriter(path, D, D, 3, attrs={"grid": 0}) as writer:
        assert len(writer) == 4 and "im2" in writer
        with pytest.raises(DataError, match="im1"):
            writer.write(["im1"], fcs[:1], np.zeros((1, 3, D)))
    _write_h5(path, ids[4:], fcs[4:], atts[4:], 3)
    assert open_feature_store(path).ids() == ids
    with pytest.raises(DataError, match="grid=0"):
        HDF5FeatureWriter(path, D, D, 3, attrs={"grid": 7})
    with pytest.raises(DataError, match="'att'"):
        HDF5FeatureWriter(path, D, D, 9)
    with pytest.raises(ConfigError, match="float16"):
        HDF5FeatureWriter(tmp_path / "g.h5", D, D, 3, dtype="int8")


def test_rows_without_ids_are_ignored_and_truncated(tmp_path):
    ids, fcs, atts = _features(3, 2)
    path = tmp_path / "f.h5"
    _write_h5(path, ids[:2], fcs[:2], atts[:2], 2)
    with h5py.File(path, "r+") as f:  # a batch killed before its ids were committed
        for name in ("fc", "att", "att_count"):
            f[name].resize(5, axis=0)
    assert open_feature_store(path).load_all(ids[:2]).fc.shape == (2, D)
    _write_h5(path, ids[2:], fcs[2:], atts[2:], 2)
    store = open_feature_store(path)
    assert store.ids() == ids
    np.testing.assert_allclose(store.get("im2")[1], atts[2], atol=1e-3)


def test_npz_folder_round_trip(tmp_path):
    ids, fcs, atts = _features(4, 5)
    folder = tmp_path / "feats"
    folder.mkdir()
    for id, fc, att in zip(ids, fcs, atts):
        np.savez(folder / f"{id}.npz", fc=fc * 2, att=att)
    np.savez(folder / "nofc.npz", att=atts[0])
    store = open_feature_store(folder)
    assert isinstance(store, NpzFolderStore)
    assert store.ids() == sorted(ids + ["nofc"]) and (store.fc_dim, store.att_dim) == (D, D)
    assert store.attrs == {}
    fc, att = store.get("im2")
    np.testing.assert_array_equal(fc, fcs[2] * 2)
    np.testing.assert_array_equal(att, atts[2])
    np.testing.assert_allclose(store.get("nofc")[0], atts[0].mean(axis=0))
    loaded = store.load_all(["im3", "im0"])
    np.testing.assert_array_equal(loaded.att_count, [len(atts[3]), len(atts[0])])
    np.testing.assert_array_equal(loaded.att[1, : len(atts[0])], atts[0])
    with pytest.raises(DataError, match=f"feature id 'x' not found in {folder}"):
        store.get("x")


def test_self_critical_layout(tmp_path):
    (tmp_path / "cocotalk_fc").mkdir()
    (tmp_path / "cocotalk_att").mkdir()
    grid = np.arange(2 * 2 * D, dtype=np.float32).reshape(2, 2, D)  # ResNet-style (g, g, D)
    np.save(tmp_path / "cocotalk_fc" / "391895.npy", np.ones(D, dtype=np.float32))
    np.savez_compressed(tmp_path / "cocotalk_att" / "391895.npz", feat=grid)
    for path in (tmp_path / "cocotalk_att", tmp_path / "cocotalk"):
        store = open_feature_store(path)
        assert isinstance(store, SelfCriticalFolderStore) and store.ids() == ["391895"]
        fc, att = store.get("391895")
        np.testing.assert_array_equal(fc, np.ones(D))
        np.testing.assert_array_equal(att, grid.reshape(4, D))


def test_self_critical_without_fc_folder_pools_att(tmp_path):
    (tmp_path / "bu_att").mkdir()
    regions = np.random.default_rng(0).random((7, D), dtype=np.float32)
    np.savez(tmp_path / "bu_att" / "1.npz", feat=regions)
    fc, att = open_feature_store(tmp_path / "bu_att").get("1")
    np.testing.assert_allclose(fc, regions.mean(axis=0))


def test_open_errors(tmp_path):
    with pytest.raises(DataError, match="feature file not found"):
        open_feature_store(tmp_path / "missing.h5")
    with pytest.raises(DataError, match="no features at"):
        open_feature_store(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no '\\*.npz' feature files"):
        open_feature_store(tmp_path / "empty")
    (tmp_path / "bad.h5").write_bytes(b"not hdf5")
    with pytest.raises(DataError, match="bad.h5"):
        open_feature_store(tmp_path / "bad.h5")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "a.npz").write_bytes(b"zip? no")
    with pytest.raises(DataError, match="a.npz"):
        open_feature_store(tmp_path / "broken")


def test_writer_zeroes_rows_past_count(tmp_path):
    with HDF5FeatureWriter(tmp_path / "f.h5", D, D, 3) as writer:
        writer.write(["a", "b"], np.ones((2, D)), np.ones((2, 3, D)), att_count=[1, 3])
    loaded = open_feature_store(tmp_path / "f.h5").load_all(["a", "b"])
    np.testing.assert_array_equal(loaded.att.sum(axis=(1, 2)), [D, 3 * D])


def test_load_all_reads_a_compressed_store_as_the_raw_one(tmp_path):
    """rlcap's layout is read a raw chunk a row; a store written otherwise (gzip, several rows a chunk) by the
    sorted slices: the same features either way."""
    from rlcap.data.features.hdf5 import _raw_chunks

    ids, fcs, atts = _features(150, 4)
    _write_h5(tmp_path / "raw.h5", ids, fcs, atts, 4, batch=64)
    with h5py.File(tmp_path / "raw.h5", "r") as src, h5py.File(tmp_path / "gz.h5", "w") as dst:
        for name in src:
            data = src[name][()]
            chunks = (8, *data.shape[1:]) if data.ndim > 1 else None
            dst.create_dataset(name, data=data, chunks=chunks, compression="gzip" if chunks else None)
        dst.attrs.update(src.attrs)
    raw, gz = open_feature_store(tmp_path / "raw.h5"), open_feature_store(tmp_path / "gz.h5")
    assert _raw_chunks(raw._handle()["att"]) and not _raw_chunks(gz._handle()["att"])
    wanted = [ids[i] for i in np.random.default_rng(2).choice(150, 40, replace=False)] + [ids[149]]
    a, b = raw.load_all(wanted), gz.load_all(wanted)
    for x, y in ((a.fc, b.fc), (a.att, b.att), (a.att_count, b.att_count)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", ">f4"])
def test_finite_rows_agrees_with_isfinite(dtype):
    from rlcap.data.features.store import finite_rows

    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 3, 5)).astype(dtype)
    a[3, 1, 2], a[7, 0, 0], a[11, 2, 4], a[12, 0, 1] = np.nan, np.inf, -np.inf, 65504 if dtype == "float16" else 1e30
    expected = np.isfinite(a).all(axis=(1, 2))
    assert list(np.flatnonzero(~expected)) == [3, 7, 11]
    np.testing.assert_array_equal(finite_rows(a), expected)
