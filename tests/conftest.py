"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ``shared`` folder beside the repository (COCO captions and reference scores).

    The parity tests are the point of the metrics package, so a missing folder fails them loudly
    rather than skipping: clone rlcap next to ``shared/`` (as CI does)."""
    path = (REPO / ".." / "shared").resolve()
    if not path.is_dir():
        pytest.fail(f"{path} not found: the parity tests need ../shared beside the repository")
    return path


@pytest.fixture
def tiny_data(tmp_path):
    """(dataset.json, feats.h5) of a tiny captioning task made fresh in tmp_path (see tests/tiny.py)."""
    from tests.tiny import make_tiny_dataset

    return make_tiny_dataset(tmp_path)
