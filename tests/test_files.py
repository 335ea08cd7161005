"""rlcap.files: the folder checked before the work, files written whole or not at all, a full disk
or a read-only folder one line naming the path, and no ``.tmp`` left behind.

The read-only and full-disk cases run on real tmpfs mounts (tests/mounts.py) where the test may
mount one (root); the injected cases (``OSError`` raised where the write happens) run everywhere."""

from __future__ import annotations

import errno
import json

import pytest

from rlcap import files
from rlcap.files import WriteError, check_writable, write_json, write_text
from tests.mounts import CAN_MOUNT, NO_MOUNT, tmpfs


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_write_json_replaces_the_file_and_leaves_nothing_else(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    write_json(path, {"a": [1, 2]}, indent=2)
    assert json.loads(path.read_text()) == {"a": [1, 2]}
    assert _names(tmp_path) == ["out.json"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~files._UMASK)  # not mkstemp's 0600


def test_a_failed_write_keeps_the_old_file_and_leaves_no_tmp(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    path.write_text("old")

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full)
    with pytest.raises(WriteError) as err:
        write_text(path, "new")
    assert str(err.value) == f"cannot write {path}: no space left on device"
    assert _names(tmp_path) == ["out.json"] and path.read_text() == "old"


def test_an_interrupted_write_leaves_no_tmp(tmp_path, monkeypatch):
    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text(tmp_path / "out.json", "new")
    assert _names(tmp_path) == []


def test_check_writable_refuses_a_read_only_folder_injected(tmp_path, monkeypatch):
    def read_only(**kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(files.tempfile, "mkstemp", read_only)
    with pytest.raises(WriteError) as err:
        check_writable(tmp_path / "new" / "x.json")
    assert str(err.value) == f"cannot write {tmp_path / 'new' / 'x.json'}: read-only file system"


def test_check_writable_creates_nothing(tmp_path):
    check_writable(tmp_path / "a" / "b" / "x.json")
    check_writable(tmp_path / "c", folder=True)
    assert _names(tmp_path) == []


def test_check_writable_refuses_a_file_in_the_way_and_a_folder_given_as_file(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(WriteError) as err:
        check_writable(tmp_path / "file" / "x.json")
    assert str(err.value) == f"cannot write {tmp_path / 'file' / 'x.json'}: {tmp_path / 'file'} is a file, not a folder"
    with pytest.raises(WriteError) as err:
        check_writable(tmp_path)
    assert str(err.value) == f"cannot write {tmp_path}: it is a folder, not a file"


@pytest.mark.skipif(not CAN_MOUNT, reason=NO_MOUNT)
def test_read_only_mount(tmp_path):
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        with pytest.raises(WriteError) as err:
            check_writable(ro / "sub" / "x.json")
        assert str(err.value) == f"cannot write {ro / 'sub' / 'x.json'}: read-only file system"
        with pytest.raises(WriteError) as err:
            write_json(ro / "x.json", {})
        assert str(err.value) == f"cannot write {ro / 'x.json'}: read-only file system"


@pytest.mark.skipif(not CAN_MOUNT, reason=NO_MOUNT)
def test_full_disk_mount(tmp_path):
    with tmpfs(tmp_path / "small", size="64k") as small:
        with pytest.raises(WriteError) as err:
            write_text(small / "big.txt", "x" * 200_000)
        assert str(err.value) == f"cannot write {small / 'big.txt'}: no space left on device"
        assert _names(small) == []  # the partial temporary file removed
        write_text(small / "ok.txt", "fits")
        assert _names(small) == ["ok.txt"]



def test_append_text_adds_whole_records_or_none(tmp_path, monkeypatch):
    """A failed append (here the disk fills mid-write) cuts the file back: no half line is left."""
    log = tmp_path / "log.jsonl"
    files.append_text(log, '{"a": 1}\n')
    files.append_text(log, '{"b": 2}\n')
    assert log.read_text() == '{"a": 1}\n{"b": 2}\n'

    real_open = open

    class HalfWriter:
        def __init__(self, fh):
            self.fh = fh

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            self.fh.write(data[: len(data) // 2])
            self.fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("builtins.open", lambda *a, **k: HalfWriter(real_open(*a, **k)))
    with pytest.raises(WriteError) as err:
        files.append_text(log, '{"c": 3333333333}\n')
    monkeypatch.undo()
    assert str(err.value) == f"cannot write {log}: no space left on device"
    assert log.read_text() == '{"a": 1}\n{"b": 2}\n'


@pytest.mark.skipif(not CAN_MOUNT, reason=NO_MOUNT)
def test_append_text_on_a_full_disk_mount(tmp_path):
    with tmpfs(tmp_path / "small", size="64k") as small:
        files.append_text(small / "log.jsonl", "first\n")
        with pytest.raises(WriteError) as err:
            files.append_text(small / "log.jsonl", "x" * 200_000 + "\n")
        assert str(err.value) == f"cannot write {small / 'log.jsonl'}: no space left on device"
        assert (small / "log.jsonl").read_text() == "first\n"
