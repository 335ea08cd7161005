"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
