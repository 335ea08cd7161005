"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ``shared`` folder beside the repository (data, papers); tests skip without it."""
    path = (REPO / ".." / "shared").resolve()
    if not path.is_dir():
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture
def tiny_data(tmp_path):
    """(dataset.json, feats.h5) of a tiny captioning task made fresh in tmp_path (see tests/tiny.py)."""
    from tests.tiny import make_tiny_dataset

    return make_tiny_dataset(tmp_path)
