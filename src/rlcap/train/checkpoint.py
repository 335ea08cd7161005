"""Checkpoints: weights as safetensors, config and vocabulary as JSON, trainer state.

A checkpoint is a folder::

    model.safetensors   weights
    config.json         the full run config (rebuilds the model) plus feature sizes
    vocab.json          the vocabulary
    trainer.pt          optimizer, scheduler, random-generator and data-order state
    checkpoint.json     written last: step, epoch, metrics; its presence marks a complete checkpoint

Every file is written to a temporary name and renamed into place, and ``checkpoint.json``
goes last, so a run killed mid-write leaves the previous complete checkpoint readable.
"""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rlcap.data.vocab import Vocab
from rlcap.errors import RlcapError

MANIFEST = "checkpoint.json"


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


class Checkpoint(NamedTuple):
    weights: dict[str, torch.Tensor]
    config: dict[str, Any]
    vocab: Vocab
    trainer: dict[str, Any] | None
    manifest: dict[str, Any]


def save_checkpoint(folder: str | Path, model: torch.nn.Module, config: dict[str, Any], vocab: Vocab,
                    trainer: dict[str, Any] | None, manifest: dict[str, Any]) -> Path:
    """Write a complete checkpoint into ``folder`` (see the module docstring)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)  # incomplete until the manifest is back
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    tmp = folder / "model.safetensors.tmp"
    save_file(weights, str(tmp))
    os.replace(tmp, folder / "model.safetensors")
    _atomic_write(folder / "config.json", json.dumps(config, indent=2).encode())
    _atomic_write(folder / "vocab.json", vocab.to_json().encode())
    if trainer is not None:
        buf = io.BytesIO()
        torch.save(trainer, buf)
        _atomic_write(folder / "trainer.pt", buf.getvalue())
    _atomic_write(folder / MANIFEST, json.dumps(manifest, indent=2).encode())
    return folder


def is_complete(folder: str | Path) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def load_checkpoint(folder: str | Path, with_trainer: bool = True) -> Checkpoint:
    folder = Path(folder)
    if not folder.is_dir():
        raise RlcapError(f"checkpoint folder not found: {folder}")
    if not is_complete(folder):
        raise RlcapError(f"{folder} is not a complete checkpoint (no {MANIFEST})")
    try:
        weights = load_file(str(folder / "model.safetensors"))
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RlcapError(f"cannot read checkpoint {folder}: {exc}") from exc
    vocab = Vocab.load(folder / "vocab.json")
    trainer = None
    if with_trainer and (folder / "trainer.pt").is_file():
        trainer = torch.load(folder / "trainer.pt", weights_only=False)
    return Checkpoint(weights, config, vocab, trainer, manifest)
