"""A random (untrained) QA reader saved as a transformers folder, for the reward's, the metric's and the CLI's
tests: what ``rlcap data reader`` writes, without the training."""

from __future__ import annotations

from pathlib import Path

from rlcap.models.hf.build_reader import build_reader_model, reader_tokenizer


def make_tiny_reader(folder: Path, texts: list[str], seed: int = 3) -> Path:
    tokenizer = reader_tokenizer(texts)
    build_reader_model(len(tokenizer), "small", seed=seed).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
