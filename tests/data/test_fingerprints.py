"""Image fingerprints in the HDF5 store: recorded per row, rewritten rows, files from older rlcap."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from rlcap.data.features import HDF5FeatureWriter, open_feature_store
from rlcap.data.features.fingerprint import UNKNOWN, ImageFingerprint, fingerprint, is_unchanged
from rlcap.errors import DataError

D = 4


def _batch(n, value):
    return np.full((n, D), value, np.float32), np.full((n, 2, D), value, np.float32)


def test_fingerprint_is_stat_and_content(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(b"abc")
    fp = fingerprint(path)
    assert fp.size == 3 and fp.mtime_ns == os.stat(path).st_mtime_ns and len(fp.digest) == 32
    assert is_unchanged(fp, path) == (True, fp)
    os.utime(path, ns=(1, 1))  # touched: the content decides
    same, now = is_unchanged(fp, path)
    assert same and now == ImageFingerprint(3, 1, fp.digest)
    path.write_bytes(b"abd")
    assert not is_unchanged(fp, path)[0]
    assert not is_unchanged(UNKNOWN, path)[0]
    with pytest.raises(DataError, match="image not found: .*b.png"):
        fingerprint(tmp_path / "b.png")


def test_rows_record_fingerprints_and_replace_in_place(tmp_path):
    path = tmp_path / "f.h5"
    a, b = ImageFingerprint(1, 2, "aa"), ImageFingerprint(3, 4, "bb")
    with HDF5FeatureWriter(path, D, D, 2) as writer:
        writer.write(["x", "y"], *_batch(2, 1.0), fingerprints=[a, b])
        with pytest.raises(DataError, match="written twice"):
            writer.write(["x"], *_batch(1, 2.0))
    with HDF5FeatureWriter(path, D, D, 2) as writer:
        assert writer.fingerprint("x") == a and writer.fingerprint("y") == b
        writer.write(["y", "z"], *_batch(2, 5.0), fingerprints=[a, b], replace=True)
        assert writer.fingerprint("y") == a and writer.fingerprint("z") == b
    with open_feature_store(path) as store:
        assert store.ids() == ["x", "y", "z"]
        assert store.get("x")[0][0] == 1.0 and store.get("y")[0][0] == 5.0 and store.get("z")[0][0] == 5.0


def test_file_from_older_rlcap_gets_unknown_fingerprints(tmp_path):
    path = tmp_path / "f.h5"
    with HDF5FeatureWriter(path, D, D, 2) as writer:
        writer.write(["x"], *_batch(1, 1.0), fingerprints=[ImageFingerprint(1, 2, "aa")])
    with h5py.File(path, "r+") as f:
        for name in ("file_size", "file_mtime_ns", "file_digest"):
            del f[name]
    with HDF5FeatureWriter(path, D, D, 2) as writer:
        assert writer.fingerprint("x") == UNKNOWN
        writer.write(["y"], *_batch(1, 2.0), fingerprints=[ImageFingerprint(5, 6, "cc")])
    with HDF5FeatureWriter(path, D, D, 2) as writer:
        assert writer.fingerprint("x") == UNKNOWN and writer.fingerprint("y") == ImageFingerprint(5, 6, "cc")
