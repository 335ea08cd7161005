"""CLIP-S and RefCLIP-S of captions ([Hessel21]) with a local CLIP: the embedding part (torch), the formulas
being :mod:`rlcap.metrics.clip_score`'s.

The CLIP is loaded as the retrieval rewards load theirs (:class:`rlcap.models.retriever.ClipRetriever`: a local
``save_pretrained`` folder, its own tokenizer and image processor); captions and references are read with the
prefix ``"A photo depicts "``, images through the CLIP's own resizing, cropping and normalisation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from rlcap.encoders.hf import local_folder
from rlcap.encoders.images import load_image, to_rgb
from rlcap.errors import DataError
from rlcap.metrics.clip_score import CLIP_S_WEIGHT, clip_scores, with_prefix
from rlcap.models.retriever import ClipRetriever, is_clip_folder

IMAGE_BATCH = 64  # images per forward pass, as the authors' extract_all_images


def load_clip(folder: str | Path, device: str = "cpu") -> ClipRetriever:
    """The CLIP of ``folder`` (``hf:DIR`` or DIR), refused with one line when there is no such folder or it holds
    no CLIP."""
    path = local_folder(folder)
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise DataError(f"{folder}: the CLIP folder {what}; CLIP-S reads a local CLIP folder (config.json with "
                        "model_type 'clip', as save_pretrained writes it)")
    if not is_clip_folder(path):
        raise DataError(f"{folder}: CLIP-S reads a CLIP folder (config.json with model_type 'clip', as "
                        "save_pretrained writes it); this one holds none")
    return ClipRetriever(path, device)


def score_with_clip(clip: ClipRetriever, captions: Mapping[str, str], images: Mapping[str, Any],
                    references: Mapping[str, list[str]] | None = None, weight: float = CLIP_S_WEIGHT,
                    ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """CLIP-S (and RefCLIP-S with ``references``) of one caption per image: ``captions`` id -> caption,
    ``images`` id -> its picture (a file, or anything :func:`rlcap.encoders.images.load_image` reads),
    ``references`` id -> its reference captions. Returns ``({metric: corpus value}, {id: {metric: value}})``."""
    ids = list(captions)
    check_pictures(ids, images)
    text = clip.embed_captions([with_prefix(captions[i]) for i in ids])  # (N, D) unit rows
    pictures = torch.cat([clip.embed_images([_picture(images[i]) for i in ids[s:s + IMAGE_BATCH]])
                          for s in range(0, len(ids), IMAGE_BATCH)]) if ids else torch.zeros_like(text)  # (N, D)
    cosines = (text * pictures).sum(dim=1).double().numpy()  # (N,)
    best = None
    if references is not None:
        best = np.array([_best_reference(clip, text[k], references.get(i, []), i) for k, i in enumerate(ids)])
    return clip_scores(ids, cosines, best, weight)


def check_pictures(ids: Sequence[str], images: Mapping[str, Any]) -> None:
    """:class:`DataError` naming the first of ``ids`` that has no picture in ``images`` (id -> picture), or whose
    file is not there: what the callers check before they decode or score, so that a missing picture stops them
    at once rather than after the work."""
    missing = [i for i in ids if i not in images]
    if missing:
        raise DataError(f"image {missing[0]!r}: no picture for it ({len(missing)} of {len(ids)} captioned images "
                        "have none); CLIP-S reads every captioned image")
    gone = [i for i in ids if isinstance(images[i], (str, Path)) and not Path(images[i]).is_file()]
    if gone:
        raise DataError(f"image {gone[0]!r}: its picture {images[gone[0]]} is not there ({len(gone)} of {len(ids)} "
                        "captioned images' pictures are missing); CLIP-S reads every captioned image")


def _picture(source: Any) -> Image.Image:
    """An RGB picture from an image already read, or from what :func:`load_image` reads (a file)."""
    return to_rgb(source) if isinstance(source, Image.Image) else load_image(source)


def _best_reference(clip: ClipRetriever, caption: torch.Tensor, refs: list[str], image_id: str) -> float:
    """The caption's (D,) highest cosine with the embeddings of its references."""
    if not refs:
        raise DataError(f"image {image_id!r} has no reference captions; RefCLIP-S needs at least one")
    embedded = clip.embed_captions([with_prefix(r) for r in refs])  # (R, D)
    return float((embedded @ caption).max())


def split_pictures(data_cfg: Any, split: str | None, images: str | Path | None) -> dict[str, Any]:
    """id -> picture of each image of ``split`` (None: of every split) of the data ``data_cfg`` (a
    :class:`rlcap.data.loader.DataConfig`): its file under ``images`` (None: the caption file's folder, or a
    datasets dataset's own), or the picture the dataset stores."""
    from rlcap.data.readers import raw_captions, read_dataset

    with raw_captions():  # only the file names are read
        records = [r for r in read_dataset(data_cfg.dataset, data_cfg.format, data_cfg.coco_splits,
                                           data_cfg.columns()) if split is None or r.split == split]
    dataset = Path(data_cfg.dataset)
    folder = Path(images) if images is not None else dataset if dataset.is_dir() else dataset.parent
    unnamed = [r.id for r in records if not r.filename and r.image is None]
    if unnamed:
        raise DataError(f"image {unnamed[0]!r} of {data_cfg.dataset} names no file; CLIP-S reads the pictures")
    # a picture a datasets dataset stores in its own files is read there
    return {r.id: r.image if r.image is not None else folder / r.filename for r in records}


def clip_scores_of(clip: ClipRetriever, data_cfg: Any, split_data: Any, predictions: Mapping[str, str],
                   images: str | Path | None = None) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """CLIP-S and RefCLIP-S of ``predictions`` (id -> caption) of the images of ``split_data`` (a
    :class:`rlcap.data.loader.SplitData`: ids and references), their pictures found as :func:`split_pictures`
    finds them in the data ``data_cfg``: ``({metric: corpus value}, {id: {metric: value}})``."""
    captions = {i: predictions[i] for i in split_data.ids if i in predictions}
    references = dict(zip(split_data.ids, split_data.refs))
    return score_with_clip(clip, captions, _pictures(data_cfg, split_data, images), references)


def _pictures(data_cfg: Any, split_data: Any, images: str | Path | None) -> dict[str, Any]:
    """The pictures of the images of ``split_data``, from every split of the data (ids are unique across them)."""
    wanted = set(split_data.ids)
    return {i: p for i, p in split_pictures(data_cfg, None, images).items() if i in wanted}


def check_split_pictures(data_cfg: Any, split_data: Any, images: str | Path | None) -> None:
    """:func:`check_pictures` of every image of ``split_data``, found as :func:`clip_scores_of` finds them: before
    the split is decoded."""
    check_pictures(split_data.ids, _pictures(data_cfg, split_data, images))


def add_clip_scores(result: Any, clip: ClipRetriever, data_cfg: Any, split_data: Any,
                    images: str | Path | None) -> None:
    """Add CLIP-S and RefCLIP-S to an evaluation (:class:`rlcap.train.validation.Evaluation`: its corpus and
    per-image scores) of ``split_data``."""
    corpus, per_image = clip_scores_of(clip, data_cfg, split_data, result.predictions, images)
    result.corpus.update(corpus)
    for i, values in per_image.items():
        result.per_image.setdefault(i, {}).update(values)
