"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Session fixtures that several test files share: under `pytest -n N` (make test) the tests that use one
# run in one worker, which builds it once.
SHARED_FIXTURES = ("recipe_runs", "reported")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker keeps to one core (round robin over the cores this process may use),
    so that its training runs (``threads: auto``) take one thread and the workers do not fight."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...
    if worker and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in SHARED_FIXTURES:
            if name in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(name))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ``shared`` folder beside the repository: COCO val2014's human captions, the scores
    pycocoevalcap gives on 5,000 of them, and the official SPICE parser's tuples (the parity tests).

    Without it those tests skip, each saying what is missing; under CI (``CI`` set, as ``.ci/run``
    runs), where the folder is always laid beside the clone, a missing folder fails them instead."""
    path = (REPO / ".." / "shared").resolve()
    if not path.is_dir():
        message = (f"{path} not found: the parity tests read COCO captions and pycocoevalcap's scores "
                   "from a shared/ folder beside the repository")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def tiny_data(tmp_path):
    """(dataset.json, feats.h5) of a tiny captioning task made fresh in tmp_path (see tests/tiny.py)."""
    from tests.tiny import make_tiny_dataset

    return make_tiny_dataset(tmp_path)


@pytest.fixture(scope="session")
def tiny_xe(tmp_path_factory):
    """``tiny_xe(epochs)``: (dataset, feats, best checkpoint) of an XE run on the tiny task, trained
    once per number of epochs for the whole test session (tests read it, never write to it)."""
    from tests.tiny import tiny_xe_run

    runs: dict[int, tuple] = {}

    def get(epochs: int = 2) -> tuple:
        if epochs not in runs:
            runs[epochs] = tiny_xe_run(tmp_path_factory.mktemp(f"xe_{epochs}_epochs"), epochs=epochs)
        return runs[epochs]

    return get
