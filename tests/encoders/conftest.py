"""Tiny generated images for the extraction tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image


def write_images(folder: Path, n: int, start: int = 0, size: tuple[int, int] = (48, 40)) -> dict[str, Path]:
    """n distinct small PNGs named img<k>.png; returns id -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    images = {}
    for k in range(start, start + n):
        rng = np.random.default_rng(k)
        pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
        path = folder / f"img{k}.png"
        Image.fromarray(pixels).save(path)
        images[f"img{k}"] = path
    return images


@pytest.fixture
def make_images():
    """``make_images(folder, n, start=0)`` writes n distinct small PNGs; returns id -> path."""
    return write_images


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny inputs gain nothing from intra-op threads, and on a busy shared machine spinning
    OpenMP threads make them many times slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
