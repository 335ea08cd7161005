"""A transformers policy's weights as a checkpoint's ``hf/`` folder that ``from_pretrained`` loads, written so that
the frozen image tower, which no step changes, is not written again at every save.

The folder's weights are two files and transformers' index of them: ``model-text.safetensors``, everything the
run trains or could (written by ``save_pretrained``, which leaves out tied weights as transformers does), and
``model-tower.safetensors``, the frozen tower, whose digest (:func:`rlcap.encoders.hf.tower_digest`) the index
records. A save whose previous checkpoint of the same name holds the same tower hard-links that file (a copy where
the file system cannot link): a checkpoint is still a folder of its own, as the atomic save wants (no file of a
checkpoint is ever written in place, so a link shared with the checkpoint it replaces is never changed).
``benchmarks/bench_checkpoint_save.py`` measures what this saves (docs/BENCHMARKS.md)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from rlcap.errors import RlcapError
from rlcap.models.file_pages import save_dropping_pages

TEXT_FILE = "model-text.safetensors"
TOWER_FILE = "model-tower.safetensors"
INDEX = "model.safetensors.index.json"  # transformers' name: from_pretrained reads it where no model.safetensors is


def write_weights(model: Any, state: dict[str, torch.Tensor], tower: Mapping[str, torch.Tensor], prefix: str,
                  digest: str, folder: Path, previous: Path | None) -> None:
    """Write ``model``'s weights into ``folder``: ``state`` (its own, the tower left out) by ``save_pretrained``,
    the ``tower``'s weights (under ``prefix`` in the model, ``digest`` theirs) linked from ``previous`` (the hf/
    folder of the checkpoint this save replaces, None: none) when it holds the same tower, else written; then the
    index."""
    # 1. what trains, and the model's config and generation config
    model.save_pretrained(folder, state_dict=state, max_shard_size="1000GB")
    if not (folder / "model.safetensors").is_file():
        raise RlcapError(f"{folder}: save_pretrained wrote no model.safetensors (a sharded save is not expected)")
    os.replace(folder / "model.safetensors", folder / TEXT_FILE)
    # 2. the frozen tower: from the previous checkpoint when it is the same
    tower_keys = [f"{prefix}.{key}" for key in tower]
    if not _linked_tower(previous, folder, digest):
        weights = {f"{prefix}.{k}": v.detach().to("cpu").contiguous() for k, v in tower.items()}
        save_dropping_pages(weights, folder / TOWER_FILE, metadata={"format": "pt"})  # (a tower kept aside as a view
        # of its loaded file is read one weight at a time: rlcap.models.file_pages)
    # 3. the index from_pretrained reads
    with safe_open(str(folder / TEXT_FILE), "pt") as text:
        weight_map = {**{key: TEXT_FILE for key in text.keys()}, **{key: TOWER_FILE for key in tower_keys}}
    total = sum((folder / name).stat().st_size for name in (TEXT_FILE, TOWER_FILE))
    index = {"metadata": {"total_size": total, "tower_digest": digest}, "weight_map": weight_map}
    (folder / INDEX).write_text(json.dumps(index, indent=2), encoding="utf-8")


def _linked_tower(previous: Path | None, folder: Path, digest: str) -> bool:
    """Whether ``previous`` holds a tower of ``digest``, now linked (or copied) into ``folder``."""
    if previous is None or not (previous / INDEX).is_file() or not (previous / TOWER_FILE).is_file():
        return False
    try:
        recorded = json.loads((previous / INDEX).read_text(encoding="utf-8"))["metadata"].get("tower_digest")
    except (OSError, ValueError, KeyError):
        return False  # (an unreadable index: the tower is written anew)
    if recorded != digest:
        return False
    try:
        os.link(previous / TOWER_FILE, folder / TOWER_FILE)
    except OSError:  # a file system without hard links
        shutil.copyfile(previous / TOWER_FILE, folder / TOWER_FILE)
    return True


def generation_settings(decode: Mapping[str, Any]) -> dict[str, Any]:
    """A run's ``decode`` section as transformers' generation settings, so that ``generate()`` decodes as
    ``rlcap eval`` does: its beam size, its most tokens (EOS included, as rlcap's ``max_len`` counts steps), its
    n-gram blocking, and its length penalty, which both divide a finished caption's summed log-probability by its
    length (EOS counted, BOS not) to that power (0: off, where transformers' default of 1.0 ranks otherwise).
    A run that decodes greedily exports neither (whatever the folder it started from set): rlcap's greedy
    decoding blocks no n-gram, and transformers refuses to save a length penalty other than its default
    without beams. Sampling is off, as ``rlcap eval`` decodes greedily or by beam search: a folder whose generation
    config samples (Gemma 3's released one: top-k 64, top-p 0.95) would otherwise export a ``generate()`` that
    draws other captions; its top-k and top-p go back to transformers' defaults, which read nothing then."""
    keys = {"beam_size": "num_beams", "max_len": "max_new_tokens", "length_penalty": "length_penalty",
            "no_repeat_ngram": "no_repeat_ngram_size"}
    settings: dict[str, Any] = {"do_sample": False, "top_k": 50, "top_p": 1.0}
    settings.update({theirs: decode[ours] for ours, theirs in keys.items() if ours in decode})
    if settings.get("num_beams", 1) <= 1:
        settings.update(no_repeat_ngram_size=0, length_penalty=1.0)  # (transformers' defaults: off, unset)
    return settings
