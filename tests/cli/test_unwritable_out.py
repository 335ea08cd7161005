"""A read-only output folder is one line naming the path, found before the work starts (train,
eval, caption, features, score): on a tmpfs mounted read-only (tests/mounts.py) where the test may
mount one. A full disk while a training saves a checkpoint is one line too (injected ENOSPC)."""

from __future__ import annotations

import errno
import json

import pytest

from rlcap import api
from rlcap.cli import main
from rlcap.train import checkpoint
from tests.mounts import CAN_MOUNT, NO_MOUNT, tmpfs
from tests.tiny import make_tiny_dataset, tiny_overrides
from tests.train.killing import EMPTY

read_only_mount = pytest.mark.skipif(not CAN_MOUNT, reason=NO_MOUNT)


def _last_line(capsys) -> str:
    return capsys.readouterr().err.splitlines()[-1]


def _not_called(*args, **kwargs):
    raise AssertionError("the work started before the output folder was checked")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ro")
    dataset, feats = make_tiny_dataset(folder)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "xe", **{"xe.epochs": 1})))
    return dataset, feats, folder / "xe" / "best"


@read_only_mount
def test_train(trained, tmp_path, capsys):
    dataset, feats, _ = trained
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        assert main(["train", str(EMPTY), *tiny_overrides(dataset, feats, ro / "run")]) == 2
    assert _last_line(capsys) == f"rlcap train: error: cannot write {ro / 'run'}: read-only file system"


@read_only_mount
def test_eval_before_decoding(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("rlcap.train.validation.decode_split", _not_called)
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        assert main(["eval", str(trained[2]), "--out", str(ro / "ev")]) == 2
    assert _last_line(capsys) == f"rlcap eval: error: cannot write {ro / 'ev'}: read-only file system"


@read_only_mount
def test_caption_before_captioning(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(api, "caption_images", _not_called)
    (tmp_path / "x.png").write_bytes(b"")
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        assert main(["caption", str(trained[2]), str(tmp_path / "x.png"), "--out", str(ro / "c.json")]) == 2
    assert _last_line(capsys) == f"rlcap caption: error: cannot write {ro / 'c.json'}: read-only file system"


@read_only_mount
def test_features_before_encoding(tmp_path, capsys, monkeypatch):
    from tests.encoders.conftest import write_images

    monkeypatch.setattr("rlcap.encoders.efficientnet.EfficientNetLite0Encoder.__init__", _not_called)
    write_images(tmp_path / "im", 2)
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        assert main(["features", str(tmp_path / "im"), "--out", str(ro / "f.h5"), "--image-size", "64"]) == 2
    assert _last_line(capsys) == f"rlcap features: error: cannot write {ro}: read-only file system"


@read_only_mount
def test_score_before_scoring(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("rlcap.cli.score.score_captions", _not_called)
    (tmp_path / "refs.json").write_text(json.dumps({"1": ["a dog"]}))
    (tmp_path / "preds.json").write_text(json.dumps([{"image_id": 1, "caption": "a dog"}]))
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        assert main(["score", "--refs", str(tmp_path / "refs.json"), "--preds", str(tmp_path / "preds.json"),
                     "--metrics", "CIDEr", "--out", str(ro / "s.json")]) == 2
    assert _last_line(capsys) == f"rlcap score: error: cannot write {ro / 's.json'}: read-only file system"


def test_full_disk_at_a_checkpoint_is_one_line(trained, tmp_path, capsys, monkeypatch):
    dataset, feats, _ = trained
    def full(path, obj):  # the trainer state, written after the weights: part of the checkpoint already written
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "_fsync_save", full)
    out = tmp_path / "run"
    assert main(["train", str(EMPTY), *tiny_overrides(dataset, feats, out)]) == 2
    assert _last_line(capsys) == f"rlcap train: error: cannot write {out / 'best'}: no space left on device"
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name or p.name == ".lock"]
