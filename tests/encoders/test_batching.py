"""A store's rows do not depend on how its images were batched: a store grown in batches of 1 and then 2
holds, bit for bit, the rows of one extraction in a single batch (a batch of one image once took other
oneDNN kernels, and a store resumed with another --batch-size mixed rows up to 0.004 apart). Rows of
another precision, device, or (on a GPU) batch size are refused in one line."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from rlcap.cli import main
from rlcap.encoders.extract import check_batching
from rlcap.errors import DataError
from tests.encoders.conftest import write_images


def _rows(path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    with h5py.File(path, "r") as f:
        ids = list(f["ids"].asstr()[()])
        return {i: (f["fc"][k], f["att"][k]) for k, i in enumerate(ids)}


@pytest.fixture
def two_threads():
    """torch on 2 threads, as rlcap features --threads 2 sets them (one thread split no batch differently), then
    put back."""
    import torch

    before = torch.get_num_threads()
    yield ["--threads", "2"]
    torch.set_num_threads(before)


def test_a_store_resumed_with_other_batch_sizes_holds_a_fresh_extractions_rows(tmp_path, capsys, two_threads):
    images = write_images(tmp_path / "im", 5, size=(96, 72))
    common = ["--image-size", "224", "--workers", "0", *two_threads]
    (tmp_path / "first").mkdir()
    for name in ("img0", "img1"):
        images[name].rename(tmp_path / "first" / images[name].name)
    grown = tmp_path / "grown.h5"
    assert main(["features", str(tmp_path / "first"), "--out", str(grown), "--batch-size", "1", *common]) == 0
    for path in (tmp_path / "first").iterdir():
        path.rename(tmp_path / "im" / path.name)
    assert main(["features", str(tmp_path / "im"), "--out", str(grown), "--batch-size", "2", *common]) == 0
    assert "encoded 3 images" in capsys.readouterr().out  # the other 3, in batches of 2 and 1
    fresh = tmp_path / "fresh.h5"
    assert main(["features", str(tmp_path / "im"), "--out", str(fresh), "--batch-size", "5", *common]) == 0
    a, b = _rows(grown), _rows(fresh)
    assert sorted(a) == sorted(b) == [f"img{k}" for k in range(5)]
    for i in a:
        assert np.array_equal(a[i][0], b[i][0]) and np.array_equal(a[i][1], b[i][1]), i
    with h5py.File(grown, "r") as f:
        assert (f.attrs["batch_size"], f.attrs["device"], f.attrs["precision"]) == (1, "cpu", "fp32")


def test_rows_of_another_precision_are_refused(tmp_path, capsys):
    write_images(tmp_path / "im", 2)
    out = tmp_path / "f.h5"
    assert main(["features", str(tmp_path / "im"), "--out", str(out), "--image-size", "64"]) == 0
    with h5py.File(out, "r+") as f:
        f.attrs["precision"] = "fp16"  # as a store written under fp16 autocast would say
    capsys.readouterr()
    assert main(["features", str(tmp_path / "im"), "--out", str(out), "--image-size", "64"]) == 2
    assert capsys.readouterr().err == (f"rlcap features: error: {out} holds features made with precision='fp16', not "
                                       "'fp32': give the same setting to continue it, or write them to another file "
                                       "(or delete this one to start over)\n")


def test_batching_on_a_gpu_or_another_device_is_refused():
    check_batching("F", {"batch_size": 32, "device": "cpu"}, {"batch_size": 8, "device": "cpu"})  # measured equal
    check_batching("F", {}, {"batch_size": 8, "device": "cpu"})  # a store from before rlcap recorded it
    with pytest.raises(DataError, match=r"^F was written in batches of 32 on cuda, and this run encodes batches of "
                                        r"8 on cuda: .* give --batch-size 32 --device cuda to continue it"):
        check_batching("F", {"batch_size": 32, "device": "cuda"}, {"batch_size": 8, "device": "cuda"})
    with pytest.raises(DataError, match="batches of 32 on cuda, and this run encodes batches of 32 on cpu"):
        check_batching("F", {"batch_size": 32, "device": "cuda"}, {"batch_size": 32, "device": "cpu"})
