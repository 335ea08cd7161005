"""Tiny transformers captioners with a tokenizer trained on the tiny dataset's captions (tests/tiny.py), saved as
a downloaded captioner's folder (rlcap.models.hf_build): what `model.arch: hf` runs on in the tests."""

from __future__ import annotations

import json
from pathlib import Path

from rlcap.models.hf_build import build_captioner



def save_captioner(kind: str, folder: Path, dataset: Path, seed: int = 0) -> Path:
    """A tiny ``kind`` (vision_encoder_decoder, blip or git) whose word-level tokenizer knows ``dataset``'s words."""
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    return build_captioner(kind, folder, captions, size="tiny", seed=seed, tokenizer="word")
