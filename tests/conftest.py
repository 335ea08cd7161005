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


def work_unit(item: pytest.Item) -> str:
    """What `make test` (``--dist loadgroup``) hands one worker whole: the tests sharing a session fixture
    of :data:`SHARED_FIXTURES`, those that call Java (one METEOR process a worker), or else a test file (its
    module fixtures are built once)."""
    shared = [name for name in SHARED_FIXTURES if name in getattr(item, "fixturenames", ())]
    if shared:
        return shared[0]
    return "java" if item.get_closest_marker("java") else item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which names each test's group from these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test in its :func:`work_unit`; the units holding a ``slow`` test first (in the order they are
    collected; `make test` keeps this order, ``--no-loadscope-reorder``), so that the workers start on the
    long units and the short ones even out the end."""
    units = {item.nodeid: work_unit(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(units[item.nodeid]))
    slow = {units[item.nodeid] for item in items if item.get_closest_marker("slow")}
    first = {unit: index for index, unit in enumerate(dict.fromkeys(units[item.nodeid] for item in items))}
    items.sort(key=lambda item: (units[item.nodeid] not in slow, first[units[item.nodeid]]))


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
