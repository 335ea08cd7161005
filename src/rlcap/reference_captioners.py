"""Reference captioners that need no training: the nearest-neighbour captioner.

The nearest-neighbour baseline (Devlin et al. 2015, "Exploring nearest neighbor approaches for
image captioning") copies a caption of the training image closest to the test image in encoder
feature space (cosine similarity of the pooled vectors). Among that image's captions it takes
the one with the highest consensus: the CIDEr-D of each caption against the image's other
captions, with document frequencies taken from all the caption sets so compared.
"""

from __future__ import annotations

import torch

from rlcap.data.loader import SplitData


def nearest_images(train: SplitData, query: SplitData, chunk: int = 1024) -> torch.Tensor:
    """For each query image, the row of the most similar training image: (Nq,) long."""
    keys = torch.nn.functional.normalize(train.fc.float(), dim=1)          # (Nt, D)
    out = []
    for start in range(0, len(query), chunk):
        q = torch.nn.functional.normalize(query.fc[start:start + chunk].float(), dim=1)  # (c, D)
        out.append((q @ keys.T).argmax(dim=1))                            # (c,)
    return torch.cat(out)


def consensus_captions(split: SplitData, rows: list[int]) -> dict[int, str]:
    """For each image row, its caption with the highest CIDEr-D against its other captions."""
    from rlcap.metrics import score_captions

    refs, preds, owner = {}, {}, {}
    for row in rows:
        caps = split.refs[row]
        if len(caps) == 1:
            continue
        for i, cap in enumerate(caps):
            key = f"{row}#{i}"
            refs[key] = caps[:i] + caps[i + 1:]
            preds[key] = [cap]
            owner[key] = (row, i)
    best: dict[int, tuple[float, int]] = {}
    if preds:
        report = score_captions(refs, preds, ["CIDEr"])
        for key, (row, i) in owner.items():
            score = report.per_image[key]["CIDEr"]
            if row not in best or score > best[row][0]:
                best[row] = (score, i)
    return {row: split.refs[row][best[row][1]] if row in best else split.refs[row][0] for row in rows}


def nearest_neighbour_predictions(train: SplitData, query: SplitData) -> dict[str, str]:
    """Image id -> the consensus caption of its nearest training image."""
    nearest = nearest_images(train, query).tolist()
    chosen = consensus_captions(train, sorted(set(nearest)))
    return {image_id: chosen[row] for image_id, row in zip(query.ids, nearest)}
