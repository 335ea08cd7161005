"""A full disk during ``rlcap features`` ends in one line, leaves a store whose rows all read, and a
second run resumes it: through an injected ENOSPC, and on a real small tmpfs where the test may
mount one (tests/mounts.py; run in a child process, since HDF5 may crash on a failed write)."""

from __future__ import annotations

import errno
import re
import subprocess
import sys

import pytest

from rlcap.cli import main
from rlcap.data.features import HDF5FeatureWriter, open_feature_store
from tests.encoders.conftest import write_images
from tests.mounts import CAN_MOUNT, NO_MOUNT, tmpfs
from tests.train.killing import REPO


def _all_rows_read(store) -> int:
    with open_feature_store(store) as features:
        ids = features.ids()
        loaded = features.load_all(ids)
        assert loaded.fc.shape[0] == len(ids)
        return len(ids)


def test_injected_enospc_is_one_line_and_the_rerun_resumes(tmp_path, monkeypatch, capsys):
    write_images(tmp_path / "im", 6)
    store = tmp_path / "feats.h5"
    argv = ["features", str(tmp_path / "im"), "--out", str(store), "--image-size", "64", "--batch-size", "2"]
    write = HDF5FeatureWriter.write

    def full_after_four_rows(self, ids, *args, **kwargs):
        if len(self) >= 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(self, ids, *args, **kwargs)

    monkeypatch.setattr(HDF5FeatureWriter, "write", full_after_four_rows)
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (f"rlcap features: error: cannot write {store}: no space left on device; the 4 rows written "
                       "before are kept: make room, then run the same command again to resume")
    assert _all_rows_read(store) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feats.h5", "im"]  # no lock, no temporary file
    monkeypatch.setattr(HDF5FeatureWriter, "write", write)
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("4 already present, 0 skipped")
    assert _all_rows_read(store) == 6


@pytest.mark.skipif(not CAN_MOUNT, reason=NO_MOUNT)
def test_full_tmpfs_is_one_line_and_the_rerun_resumes(tmp_path):
    write_images(tmp_path / "im", 12)
    with tmpfs(tmp_path / "disk", size="2m") as disk:
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * (1300 * 1024))  # about 700 KB left: a few batches fit
        store = disk / "feats.h5"
        argv = [sys.executable, "-m", "rlcap.cli", "features", str(tmp_path / "im"), "--out", str(store),
                "--image-size", "64", "--batch-size", "2", "--threads", "1"]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        assert done.returncode == 2, done.stderr
        line = done.stderr.splitlines()[-1]
        match = re.fullmatch(rf"rlcap features: error: cannot write {re.escape(str(store))}: no space left on device "
                             r"\(\d+\.\d MB free, 2 more rows need about \d+\.\d MB\); the (\d+) rows written before "
                             r"are kept: make room, then run the same command again to resume", line)
        assert match, line
        kept = int(match.group(1))
        assert 0 < kept < 12 and _all_rows_read(store) == kept
        assert sorted(p.name for p in disk.iterdir()) == ["ballast", "feats.h5"]
        ballast.unlink()
        done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1].endswith(f"{kept} already present, 0 skipped")
        assert _all_rows_read(store) == 12
