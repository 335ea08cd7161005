"""Bottom-up-attention TSV files as a feature store: rows as the base64 decodes by hand, in memory and out of
core, one file or a folder of them; the line index cached beside the file, reused, rebuilt when the file
changes, and kept in the user's cache when the folder is read-only; one line naming the file and line for a
bad line; a tiny captioner trained on a TSV store."""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from rlcap import api
from rlcap.data.features import TsvFeatureStore, open_feature_store, tsv
from rlcap.data.loader import DataConfig, load_data
from rlcap.errors import DataError
from rlcap.train.logger import read_log
from tests.mounts import CAN_MOUNT, tmpfs
from tests.tiny import make_tiny_dataset, tiny_overrides

D = 16
IDS = [str(391895 + 7 * i) for i in range(12)]  # COCO-like integer ids


def encode(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=np.float32).tobytes()).decode()


def tsv_line(image_id: str, boxes: np.ndarray, feats: np.ndarray, w: int = 640, h: int = 480,
             extra: tuple[str, ...] = ()) -> str:
    """One line as tools/generate_tsv.py writes it (csv with tab delimiter), optionally with extra fields."""
    return "\t".join([image_id, str(w), str(h), str(len(boxes)), encode(boxes), encode(feats), *extra])


def images(ids=IDS, dim=D, seed=0) -> dict[str, tuple[np.ndarray, np.ndarray, int, int]]:
    """id -> (boxes (n, 4), features (n, dim), w, h) with 3 to 7 boxes an image."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, id in enumerate(ids):
        n = 3 + k % 5
        xy = rng.uniform(0, 300, size=(n, 2)).astype(np.float32)
        boxes = np.concatenate([xy, xy + rng.uniform(10, 200, size=(n, 2)).astype(np.float32)], axis=1)
        out[id] = (boxes, rng.normal(size=(n, dim)).astype(np.float32), 640 - k, 480 + k)
    return out


def write_tsv(path: Path, data: dict, extra: tuple[str, ...] = ()) -> Path:
    """The images of ``data`` as a TSV file, lines ended by \\r\\n as generate_tsv.py's csv writer ends them."""
    lines = [tsv_line(id, boxes, feats, w, h, extra) for id, (boxes, feats, w, h) in data.items()]
    path.write_text("".join(line + "\r\n" for line in lines))
    return path


def write_folder(folder: Path, data: dict, parts: int = 3) -> Path:
    """``data`` split over ``parts`` TSV files in ``folder`` (the last with an extra trailing field)."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = list(data)
    for p in range(parts):
        chunk = {id: data[id] for id in ids[p::parts]}
        write_tsv(folder / f"trainval_36.part{p}.tsv", chunk, extra=("extra",) if p == parts - 1 else ())
    return folder


def decoded(line: str) -> tuple[np.ndarray, np.ndarray]:
    """(boxes, features) of a TSV line, decoded by hand: the reference the store is checked against."""
    fields = line.rstrip("\r\n").split("\t")
    n = int(fields[3])
    boxes = np.frombuffer(base64.b64decode(fields[4]), dtype=np.float32).reshape(n, 4)
    return boxes, np.frombuffer(base64.b64decode(fields[5]), dtype=np.float32).reshape(n, -1)


def dataset_for(path: Path, ids: list[str], n_train: int = 8) -> Path:
    """A Karpathy-split caption file for ``ids`` (the first ``n_train`` train, the rest val)."""
    entries = [{"cocoid": int(id), "filename": f"{id}.jpg", "split": "train" if k < n_train else "val",
                "sentences": [{"raw": f"a photo number {k % 3}", "tokens": []}, {"raw": "a photo", "tokens": []}]}
               for k, id in enumerate(ids)]
    path.write_text(json.dumps({"dataset": "coco", "images": entries}))
    return path


@pytest.fixture
def one_file(tmp_path) -> Path:
    return write_tsv(tmp_path / "feats.tsv", images())


def test_rows_are_the_base64_decoded_by_hand(one_file):
    store = open_feature_store(one_file)
    assert isinstance(store, TsvFeatureStore)
    assert store.ids() == IDS and len(store) == 12 and IDS[3] in store and "1" not in store
    assert (store.fc_dim, store.att_dim, store.itemsize, store.max_regions, store.has_boxes) == (D, D, 4, 7, True)
    lines = one_file.read_text().splitlines()
    for id, line in zip(IDS, lines):
        boxes, feats = decoded(line)
        fc, att = store.get(id)
        assert att.dtype == np.float32 and np.array_equal(att, feats)
        assert np.array_equal(fc, feats.mean(axis=0))  # the mean of the regions, as self-critical takes it
        assert np.array_equal(store.boxes([id])[0], boxes)
    assert store.region_counts(IDS).tolist() == [3 + k % 5 for k in range(12)]
    assert store.image_sizes(IDS[:2]) == [(640, 480), (639, 481)]
    loaded = store.load_all(IDS[::-1])
    for k, id in enumerate(IDS[::-1]):
        fc, att = store.get(id)
        assert np.array_equal(loaded.fc[k], fc) and np.array_equal(loaded.att[k, : len(att)], att)
        assert not loaded.att[k, len(att):].any() and loaded.att_count[k] == len(att)
    with pytest.raises(DataError, match=f"^feature id '1' not found in {one_file}$"):
        store.get("1")
    store.close()


def _split(dataset: Path, features: Path, in_memory: bool, split: str = "train"):
    cfg = DataConfig(dataset=str(dataset), features=str(features), in_memory=in_memory, min_count=1)
    return load_data(cfg, (split,)).splits[split]


@pytest.mark.parametrize("layout", ["file", "folder"])
def test_in_memory_out_of_core_and_converted_give_the_same_rows(tmp_path, layout):
    from rlcap.data.features.convert import convert_store

    data = images()
    source = write_tsv(tmp_path / "f.tsv", data) if layout == "file" else write_folder(tmp_path / "tsv", data)
    convert_store(source, tmp_path / "f32.h5", dtype="float32", batch=5)
    dataset = dataset_for(tmp_path / "dataset.json", IDS)
    memory, lazy, h5 = (_split(dataset, source, True), _split(dataset, source, False),
                        _split(dataset, tmp_path / "f32.h5", False))
    assert memory.features.in_memory and not lazy.features.in_memory
    index = torch.tensor([5, 0, 3, 7])
    for split in (lazy, h5):
        for a, b in zip(memory.feats(index)[:3], split.feats(index)[:3]):  # (no pixels)
            assert a.shape == b.shape and torch.equal(a, b)  # padded to the split's largest region count
    feats = memory.feats(index)
    for row, k in enumerate(index.tolist()):
        boxes, regions, _, _ = data[IDS[k]]
        assert torch.equal(feats.att[row, : len(regions)], torch.from_numpy(regions))
        assert int(feats.att_mask[row].sum()) == len(regions)


def test_a_folder_of_tsv_files_is_one_store(tmp_path):
    data = images()
    folder = write_folder(tmp_path / "tsv", data)
    store = open_feature_store(folder)
    assert isinstance(store, TsvFeatureStore) and sorted(store.ids()) == sorted(IDS)
    for id in (IDS[0], IDS[11]):  # the first file's, and the last file's lines with an extra field
        assert np.array_equal(store.get(id)[1], data[id][1]) and np.array_equal(store.boxes([id])[0], data[id][0])
    assert (folder / tsv.FOLDER_INDEX).is_file()
    assert isinstance(open_feature_store(folder), TsvFeatureStore)  # its index does not make it an npz folder
    with pytest.raises(DataError, match=f"^feature id 'nope' not found in {folder} \\(trainval_36.part0.tsv, "
                                        "trainval_36.part1.tsv, trainval_36.part2.tsv\\)$"):
        store.load_all([IDS[0], "nope"])
    write_tsv(folder / "more.tsv", {IDS[4]: data[IDS[4]]})
    with pytest.raises(DataError, match=f"^image id '{IDS[4]}' is in {folder / 'more.tsv'} \\(line 1\\) and in "
                                        f"{folder / 'trainval_36.part1.tsv'}, line 2: give each image once$"):
        open_feature_store(folder)


def test_the_index_is_cached_beside_the_file_reused_and_rebuilt_when_the_file_changes(one_file, monkeypatch):
    built = []
    build = tsv.build_index
    monkeypatch.setattr(tsv, "build_index", lambda *args: built.append(args) or build(*args))
    open_feature_store(one_file).close()
    index = one_file.with_name("feats.tsv.rlcap-index.npz")
    assert index.is_file() and len(built) == 1
    stamp = index.stat().st_mtime_ns
    assert open_feature_store(one_file).ids() == IDS and len(built) == 1 and index.stat().st_mtime_ns == stamp
    extra = images(["5"], seed=3)
    with open(one_file, "a") as f:
        f.write(tsv_line("5", *extra["5"][:2]) + "\r\n")
    store = open_feature_store(one_file)
    assert len(built) == 2 and store.ids() == [*IDS, "5"]
    assert np.array_equal(store.get("5")[1], extra["5"][1])


@contextmanager
def read_only_folder(folder: Path, data: dict, monkeypatch):
    """``folder`` holding the TSV of ``data`` (``feats.tsv``), not writable for the block: a tmpfs remounted
    read-only where the test may mount, else (not root) a folder without write permission, else (root without
    mounting, whom permissions do not bind) the index's writes there refused with the kernel's EROFS."""
    if CAN_MOUNT:
        with tmpfs(folder, size="4m"):
            write_tsv(folder / "feats.tsv", data)
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
            try:
                yield folder / "feats.tsv"
            finally:
                subprocess.run(["mount", "-o", "remount,rw", str(folder)], check=True)
    elif os.geteuid() != 0:
        folder.mkdir(parents=True)
        write_tsv(folder / "feats.tsv", data)
        folder.chmod(0o555)
        try:
            yield folder / "feats.tsv"
        finally:
            folder.chmod(0o755)
    else:
        import builtins
        import errno

        folder.mkdir(parents=True)
        write_tsv(folder / "feats.tsv", data)

        def refusing_open(file, mode="r", *args, **kwargs):
            if "w" in mode and Path(file).resolve().is_relative_to(folder.resolve()):
                raise OSError(errno.EROFS, "Read-only file system", str(file))
            return builtins.open(file, mode, *args, **kwargs)

        monkeypatch.setattr(tsv, "open", refusing_open, raising=False)  # what the index writer opens
        yield folder / "feats.tsv"


def test_a_read_only_folder_keeps_its_index_in_the_cache_folder(tmp_path, monkeypatch, caplog):
    cache = tmp_path / "cache"
    with read_only_folder(tmp_path / "ro", images(), monkeypatch) as path:
        assert tsv.TsvFeatureStore(path, index_cache=cache).ids() == IDS
        cached = list(cache.iterdir())
        assert [p.name for p in cached] == [tsv.index_places(path, cache)[1].name] and sorted(
            os.listdir(path.parent)) == ["feats.tsv"]
        stamp = cached[0].stat().st_mtime_ns
        assert tsv.TsvFeatureStore(path, index_cache=cache).ids() == IDS and cached[0].stat().st_mtime_ns == stamp
    assert tsv.index_places(path)[1].parent == Path.home() / ".cache" / "rlcap" / "tsv-index"  # by default


def test_an_index_no_place_can_hold_is_kept_in_memory_with_one_warning(tmp_path, monkeypatch, caplog):
    with read_only_folder(tmp_path / "ro", images(), monkeypatch) as path:
        cache = path.parent / "cache"  # in the read-only folder too
        built = []
        build = tsv.build_index
        monkeypatch.setattr(tsv, "build_index", lambda *args: built.append(args) or build(*args))
        with caplog.at_level(logging.WARNING, logger="rlcap.data.features.tsv"):
            assert tsv.TsvFeatureStore(path, index_cache=cache).ids() == IDS
            assert tsv.TsvFeatureStore(path, index_cache=cache).ids() == IDS  # built once a process
        assert len(built) == 1 and len(caplog.records) == 1
        assert caplog.records[0].getMessage().startswith(f"cannot write the index of {path} at ")


def _with_line(tmp_path: Path, k: int, line: str, end: str = "\r\n") -> Path:
    """The fixture's TSV with its line ``k`` (0-based) replaced by ``line`` and ended by ``end``."""
    data = images()
    lines = [tsv_line(id, boxes, feats, w, h) for id, (boxes, feats, w, h) in data.items()]
    lines[k] = line
    path = tmp_path / "bad.tsv"
    path.write_text("".join(f"{text}\r\n" for text in lines[:-1]) + lines[-1] + ("\r\n" if k != 11 else end))
    return path


def test_bad_lines_are_one_line_naming_the_file_and_the_line(tmp_path):
    data = images()
    boxes, feats, _, _ = data[IDS[2]]
    good = tsv_line(IDS[2], boxes, feats)
    cases = {
        "cut": (11, tsv_line(IDS[11], *data[IDS[11]][:2])[:-40], "", r"line 12: the features field holds 228 bytes, "
                r"not num_boxes \(4\) x 16 float32 values \(D = 16 as on .*bad.tsv, line 1\): the file ends inside "
                r"this line \(no newline after it\): it is truncated; download or generate the file again$"),
        "cut boxes": (11, tsv_line(IDS[11], *data[IDS[11]][:2]).rsplit("\t", 1)[0][:-3], "", r"line 12: 5 "
                      r"tab-separated fields, expected image_id, image_w, image_h, num_boxes, boxes, features: the file "
                      r"ends inside this line \(no newline after it\): it is truncated; download or generate the file "
                      r"again$"),
        "fields": (2, "\t".join(good.split("\t")[:5]), "\r\n", r"line 3: 5 tab-separated fields, expected image_id, "
                   r"image_w, image_h, num_boxes, boxes, features: the line is truncated; download or generate"),
        "num_boxes": (4, good.replace("\t5\t", "\tfive\t", 1), "\r\n", r"line 5: num_boxes 'five' is not an integer$"),
        "zero": (4, good.replace("\t5\t", "\t0\t", 1), "\r\n", r"line 5: num_boxes '0' is not a positive integer$"),
        "dim": (6, tsv_line(IDS[6], boxes, np.zeros((5, 12), np.float32)), "\r\n", r"line 7: the features field "
                r"holds 240 bytes, not num_boxes \(5\) x 16 float32 values \(D = 16 as on .*bad.tsv, line 1\): the "
                r"line is damaged; download or generate the file again$"),
        "boxes": (6, good.replace(encode(boxes), encode(boxes[:4])), "\r\n", r"line 7: the boxes field holds 64 bytes, not "
                  r"num_boxes \(5\) x 4 float32 values: the line is damaged"),
        "not base64 length": (6, good[:-1], "\r\n", r"line 7: the features field holds a length that is not "
                              r"base64's, not num_boxes \(5\) x 16 float32 values"),
    }
    for name, (k, line, end, message) in cases.items():
        path = _with_line(tmp_path, k, line, end)
        with pytest.raises(DataError, match=f"^{path}, {message}"):
            open_feature_store(path)
    # what only decoding finds: a character that is not base64, where the lengths are right
    field = good.split("\t")[5]
    path = _with_line(tmp_path, 2, good.replace(field, "*" + field[1:]))
    store = open_feature_store(path)
    assert store.get(IDS[1])[1].shape == data[IDS[1]][1].shape  # the other lines read
    with pytest.raises(DataError, match=f"^{path}, line 3: the features field is not base64 .*: the line is damaged"):
        store.load_all(IDS)


def test_non_finite_values_and_a_file_changed_under_the_store_are_refused(tmp_path):
    data = images()
    data[IDS[3]][1][1, 2] = np.nan
    path = write_tsv(tmp_path / "f.tsv", data)
    store = open_feature_store(path)
    with pytest.raises(DataError, match=f"^{path}: the features of image '{IDS[3]}' are not finite"):
        store.load_all(IDS)
    with open(path, "a") as f:
        f.write("\r\n")
    with pytest.raises(DataError, match=f"^{path} changed since it was indexed"):
        store.get(IDS[0])


def test_a_tsv_named_path_that_is_missing_and_the_other_layouts(tmp_path):
    with pytest.raises(DataError, match="^feature file not found: .*nothing.tsv$"):
        open_feature_store(tmp_path / "nothing.tsv")
    with pytest.raises(DataError, match="bottom-up-attention .tsv file or folder of .tsv files"):
        open_feature_store(tmp_path / "nothing")
    (tmp_path / "npz").mkdir()
    np.savez(tmp_path / "npz" / "a.npz", att=np.ones((2, 3), np.float32))
    shutil.copy(write_tsv(tmp_path / "f.tsv", images()), tmp_path / "npz" / "b.tsv")
    assert type(open_feature_store(tmp_path / "npz")).__name__ == "NpzFolderStore"  # npz files decide


def test_a_captioner_trains_one_epoch_on_a_tsv_store(tmp_path):
    dataset, h5 = make_tiny_dataset(tmp_path)
    with open_feature_store(h5) as store:
        rows = {id: (np.tile([[0, 0, 32, 32]], (4, 1)), store.get(id)[1].astype(np.float32), 32, 32)
                for id in store.ids()}
    features = write_tsv(tmp_path / "tiny.tsv", rows)
    out = tmp_path / "xe"
    api.train(api.load_run_config(None, tiny_overrides(dataset, features, out, **{
        "xe.epochs": 1, "model.arch": "updown", "data.in_memory": "false"})))  # batches read from the TSV
    losses = [r["loss"] for r in read_log(out / "log.jsonl") if r["split"] == "train"]
    assert len(losses) == 6 and np.isfinite(losses).all() and (out / "best").exists()  # 24 images, batches of 4


def test_through_the_cli_train_on_a_tsv_and_convert_it(tmp_path, capsys):
    """As a user would: `rlcap train` with data.features naming a .tsv file, and `rlcap features convert`
    into HDF5 (the same rows), then the same training on the converted store: the same losses."""
    from rlcap.cli import main

    data = images(dim=D)
    tsv_file = write_tsv(tmp_path / "trainval_36.tsv", data)
    dataset = dataset_for(tmp_path / "dataset.json", IDS)
    losses = {}
    for name, features in (("tsv", tsv_file), ("h5", tmp_path / "butd.h5")):
        if name == "h5":
            assert main(["features", "convert", str(tsv_file), str(features), "--dtype", "float32"]) == 0
            assert f"{features}: converted 12 images from {tsv_file}" in capsys.readouterr().out
        run = tmp_path / name
        assert main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, features, run, **{
            "xe.epochs": 1, "model.arch": "updown", "data.in_memory": "false"})]) == 0
        losses[name] = [r["loss"] for r in read_log(run / "log.jsonl") if r["split"] == "train"]
    assert len(losses["tsv"]) >= 2 and losses["tsv"] == losses["h5"]
    assert main(["features", "convert", str(tsv_file)]) == 2
    assert "rlcap features convert takes IN OUT.h5" in capsys.readouterr().err


def test_numbered_parts_of_the_adaptive_download_are_one_store(tmp_path):
    """The 10-100-box download names its parts NAME.tsv.0, NAME.tsv.1, ...: a folder of them is one store."""
    data = images()
    ids = list(data)
    folder = tmp_path / "trainval"
    folder.mkdir()
    write_tsv(folder / "karpathy_train_resnet101_faster_rcnn_genome.tsv.0", {i: data[i] for i in ids[:6]})
    write_tsv(folder / "karpathy_train_resnet101_faster_rcnn_genome.tsv.1", {i: data[i] for i in ids[6:]})
    with open_feature_store(folder) as store:
        assert isinstance(store, TsvFeatureStore) and sorted(store.ids()) == sorted(ids)
        np.testing.assert_array_equal(store.get(ids[7])[1], data[ids[7]][1])
