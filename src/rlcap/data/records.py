"""The caption record every reader returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcap.data.embedded import EmbeddedImage

SPLITS = ("train", "val", "test", "restval")


@dataclass
class ImageRecord:
    """One image (or video) with its human captions.

    ``id`` is always a string (COCO's integer ids are converted); feature stores are keyed by it.
    ``captions`` are the raw reference strings; ``tokens`` the tokenized, lower-cased words of each
    (the same tokenization as evaluation, see :mod:`rlcap.metrics.tokenize`).
    """

    id: str
    split: str
    captions: list[str]
    tokens: list[list[str]] = field(default_factory=list)
    filename: str | None = None
    image: EmbeddedImage | None = None  # a picture stored in the dataset's own files (a datasets dataset), or None
