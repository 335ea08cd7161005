"""A checkpoint's data for a diagnostic: the training split (the reward's references) and the split measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcap.api import check_feature_dims, check_feature_image_size, checkpoint_data_config
from rlcap.data.loader import CaptionData, load_data
from rlcap.data.vocab import Vocab


def checkpoint_data(checkpoint: str | Path, config: dict[str, Any], vocab: Vocab, split: str,
                    overrides: list[str] | None = None) -> CaptionData:
    """``train`` and ``split`` of the checkpoint's data, as ``rlcap eval`` finds and checks it.

    Paths are resolved by :func:`rlcap.api.checkpoint_data_config` (``overrides``: ``key=value``,
    e.g. ``features=other.h5``); features of another image size or dimension than the checkpoint
    was trained on are refused. A split the dataset has no images in is a :class:`DataError` naming
    the splits it has."""
    data_cfg = checkpoint_data_config(checkpoint, config, overrides)
    check_feature_image_size(checkpoint, config, data_cfg.features)
    data = load_data(data_cfg, tuple(dict.fromkeys(("train", split))), vocab=vocab)
    check_feature_dims(checkpoint, config, data)
    return data


def reward_references(data: CaptionData, split: str) -> dict[str, list[str]]:
    """image id -> references, for a reward scoring captions of ``split``: the training images' and the
    split's own (CIDEr-D scores an image against the references it was built with, so its document
    frequencies then count both, as in :func:`rlcap.diagnose.value_samples.diagnose_value`)."""
    train, measured = data.splits["train"], data.splits[split]
    return {**dict(zip(train.ids, train.refs)), **dict(zip(measured.ids, measured.refs))}
