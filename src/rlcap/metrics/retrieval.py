"""Cross-modal retrieval metrics from an image-text similarity matrix (numpy only).

``similarity`` is (I, C): image i against caption c. ``caption_image`` (C,) gives the image
index of each caption, so an image may have several captions. Ranks count the items scored
strictly higher than the right one, plus 1 (ties are resolved in the query's favour).
Text-to-image: each caption retrieves its image among all images. Image-to-text: each image
retrieves its best-ranked caption among all captions (as VSE++ and CLIP evaluations do).
"""

from __future__ import annotations

import numpy as np

from rlcap.errors import DataError

RECALL_AT = (1, 5, 10)


def retrieval_metrics(similarity: np.ndarray, caption_image: np.ndarray) -> dict[str, float]:
    """R@1, R@5, R@10 (in %), median rank and MRR, for "t2i" and "i2t"."""
    sim = np.asarray(similarity, dtype=np.float64)  # (I, C)
    owner = np.asarray(caption_image, dtype=np.int64)  # (C,)
    if sim.ndim != 2 or owner.shape != (sim.shape[1],):
        raise DataError(f"similarity must be (images, captions) with one image index per caption; got {sim.shape} and {owner.shape}")
    if owner.size and (owner.min() < 0 or owner.max() >= sim.shape[0]):
        raise DataError(f"caption_image holds indices outside 0..{sim.shape[0] - 1}")
    right = sim[owner, np.arange(sim.shape[1])]  # (C,) score of each caption's own image
    t2i = 1 + (sim > right[None, :]).sum(axis=0)  # (C,)
    caption_rank = 1 + (sim[owner] > right[:, None]).sum(axis=1)  # (C,) rank among all captions
    i2t = np.full(sim.shape[0], np.iinfo(np.int64).max)
    np.minimum.at(i2t, owner, caption_rank)
    i2t = i2t[np.isin(np.arange(sim.shape[0]), owner)]  # images without a caption are skipped
    out: dict[str, float] = {}
    for name, ranks in (("t2i", t2i), ("i2t", i2t)):
        for k in RECALL_AT:
            out[f"{name}_R@{k}"] = float(100.0 * np.mean(ranks <= k))
        out[f"{name}_MedR"] = float(np.median(ranks))
        out[f"{name}_MRR"] = float(np.mean(1.0 / ranks))
    return out
