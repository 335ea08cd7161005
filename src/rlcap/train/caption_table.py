"""The caption table a run sends its trackers at each validation (``track.captions``): the first N pictures of the
validation split, each with its greedy caption, that caption's scores against the picture's references, and one
reference, so that a template or a hallucination shows at the epoch it starts, beside the curves."""

from __future__ import annotations

import functools
import io
import logging
from pathlib import Path
from typing import Any, Protocol

from rlcap.data.hf_datasets import Columns
from rlcap.data.loader import CaptionData
from rlcap.decoding.options import Decoding
from rlcap.decoding.split import decode_split
from rlcap.devices import Precision
from rlcap.metrics.scoring import score_captions
from rlcap.run_config import RunConfig
from rlcap.track.base import CaptionRow
from rlcap.train.checkpoint import POLICY

log = logging.getLogger(__name__)

TABLE_METRICS = ("CIDEr", "Bleu_4")  # per caption: CIDEr-D, and BLEU-4 (no Java, no spaCy)


class Captioning(Protocol):
    """What the table reads of a run's session (rlcap.train.session.Session)."""

    parts: dict[str, Any]
    data: CaptionData
    cfg: RunConfig
    decoding: Decoding
    precision: Precision


def caption_rows(session: Captioning) -> list[CaptionRow]:
    """The table's rows: the first ``track.captions`` images of ``val.split``, captioned greedily by the policy (one
    process; none for a session without a policy).
    Scores are CIDEr-D and BLEU-4 of each caption against its picture's references, the document frequencies those
    of the N pictures' references (so a CIDEr-D here is not the validation's: it compares epochs, not runs)."""
    if POLICY not in session.parts:
        return []
    model, data, cfg = session.parts[POLICY].module, session.data, session.cfg
    split = data.splits[cfg.val.split]
    count = min(cfg.track.captions, len(split.ids))
    predictions = decode_split(model, split, data.vocab, session.decoding.as_greedy(), batch_size=cfg.val.batch_size,
                               limit=count, precision=session.precision)
    ids = list(split.ids[:count])
    refs = {i: list(r) for i, r in zip(ids, split.refs[:count])}
    per_image = score_captions(refs, {i: [predictions[i]] for i in ids}, list(TABLE_METRICS)).per_image
    d = cfg.data
    pictures = _pictures(d.dataset, d.format, d.coco_splits, d.columns(), cfg.val.split, tuple(ids))
    return [CaptionRow(i, pictures.get(i), predictions[i],
                       {("CIDEr-D" if k == "CIDEr" else k): float(per_image[i][k]) for k in TABLE_METRICS},
                       refs[i][0] if refs[i] else "") for i in ids]


@functools.lru_cache(maxsize=4)
def _pictures(dataset: str, fmt: str, coco_splits: str | None, columns: Columns, split: str,
              ids: tuple[str, ...]) -> dict:
    """id -> the picture (a PIL image, 256 pixels at most a side) of each of ``ids`` the dataset holds a readable one
    for; read once per run (the same pictures at every validation)."""
    from PIL import Image

    from rlcap.data.embedded import read_picture_bytes
    from rlcap.data.readers import raw_captions, read_dataset

    path = Path(dataset)
    with raw_captions():
        records = {r.id: r for r in read_dataset(path, fmt, coco_splits, columns)
                   if r.split == split and r.id in ids}
    folder = path if path.is_dir() else path.parent
    found = {}
    for i, record in records.items():
        source = record.image if record.image is not None else (folder / record.filename if record.filename else None)
        if source is None:
            continue
        try:
            with Image.open(io.BytesIO(read_picture_bytes(source))) as image:
                image.thumbnail((256, 256))
                found[i] = image.convert("RGB")
        except (OSError, ValueError) as exc:  # a missing or unreadable picture: a row without one
            log.warning("caption table: no picture for %s (%s)", i, exc)
    return found
