"""How `make test` spreads the suite over its workers (tests/conftest.py)."""

import subprocess
import sys
from pathlib import Path

from tests.conftest import work_unit

REPO = Path(__file__).resolve().parents[1]


def test_make_test_hands_each_worker_whole_units(request):
    """Under `make test` (pytest-xdist, ``--dist loadgroup``) every test is sent with its work unit's group,
    so that a file's module fixtures are built by one worker. A pytest that drops the group (pytest 9.2
    with pytest-xdist 3.8 did) fails here rather than making the suite silently slower. Run any other way,
    the test runs itself under `make test`'s options in a child pytest, and that run must pass."""
    if getattr(request.config.option, "loadgroup", False):  # (set in the workers by pytest-xdist)
        assert request.node.nodeid.endswith("@" + work_unit(request.node))
        return
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                            "--no-loadscope-reorder", "-p", "no:cacheprovider", f"{request.node.nodeid}"],
                           capture_output=True, text=True, cwd=REPO, timeout=300)
    assert child.returncode == 0 and "1 passed" in child.stdout, child.stdout[-2000:] + child.stderr[-2000:]
