"""A checkpoint's data for a diagnostic: the training split (the reward's references) and the split measured."""

from __future__ import annotations

from rlcap.data.loader import CaptionData
from rlcap.eval.open_run import OpenRun


def checkpoint_data(run: OpenRun, split: str, overrides: list[str] | None = None) -> CaptionData:
    """``train`` and ``split`` of the run's data, as ``rlcap eval`` finds and checks it
    (:meth:`rlcap.eval.open_run.OpenRun.data`; ``overrides``: ``key=value``, e.g. ``features=other.h5``):
    features of another image size or dimension than the checkpoint was trained on are refused. A split
    the dataset has no images in is a :class:`DataError` naming the splits it has."""
    return run.data(tuple(dict.fromkeys(("train", split))), overrides)


def reward_references(data: CaptionData, split: str) -> dict[str, list[str]]:
    """image id -> references, for a reward scoring captions of ``split``: the training images' and the
    split's own (CIDEr-D scores an image against the references it was built with, so its document
    frequencies then count both, as in :func:`rlcap.diagnose.value_samples.diagnose_value`)."""
    train, measured = data.splits["train"], data.splits[split]
    return {**dict(zip(train.ids, train.refs)), **dict(zip(measured.ids, measured.refs))}
