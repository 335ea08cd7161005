"""Every benchmark script answers --help (and so imports cleanly and does no work at import time)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if p.name != "benchdoc.py")  # benchdoc: their shared helpers


def test_there_are_scripts():
    assert len(SCRIPTS) >= 15


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_help(script, tmp_path):
    before = (BENCHMARKS.parent / "docs" / "BENCHMARKS.md").read_bytes()
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ") and script.name in done.stdout.splitlines()[0]
    assert (BENCHMARKS.parent / "docs" / "BENCHMARKS.md").read_bytes() == before  # --help wrote nothing
