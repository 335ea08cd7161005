"""Statistics of a concepts dataset: its captions beside any other dataset's, its scenes, and the
human agreement of its test split (each held-out caption scored against the references)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import mean
from typing import NamedTuple

from rlcap.data.concepts.build import DATASET_FILE, load_concepts
from rlcap.data.synthetic.agreement import CaptionStats, caption_stats
from rlcap.errors import DataError
from rlcap.metrics import score_captions, tokenize
from rlcap.metrics.io import read_json


class SceneStats(NamedTuple):
    """Concepts per scene, over the scenes of one split (all when None)."""

    n_scenes: int
    concepts: float  # true concepts (content words of the held-out caption) per scene
    kept: float
    dropped: float
    distractors: float
    regions: float  # kept + distractors: what the model sees
    concept_vocab: int  # distinct true concepts (word, part of speech)


def scene_stats(concepts: Mapping[str, dict], split: str | None = None) -> SceneStats:
    scenes = [s for s in concepts.values() if split is None or s["split"] == split]
    if not scenes:
        raise DataError(f"no scenes in split {split!r}")
    per = {key: mean(len(s[key]) for s in scenes) for key in ("kept", "dropped", "distractors", "regions")}
    return SceneStats(
        n_scenes=len(scenes),
        concepts=per["kept"] + per["dropped"],
        concept_vocab=len({tuple(c) for s in scenes for c in s["kept"] + s["dropped"]}),
        **per,
    )


def captions_as_images(captions: Mapping[str, Sequence[str]], split: str = "all") -> list[dict]:
    """``{id: [captions]}`` as Karpathy-schema entries with tokens, for :func:`caption_stats`."""
    return [{"split": split, "sentences": [{"tokens": tokenize(c)} for c in caps]} for caps in captions.values()]


def dataset_caption_stats(folder: str | Path, split: str | None = None) -> CaptionStats:
    """Caption statistics of the references of a built folder (the held-out captions are not in it)."""
    images = read_json(Path(folder) / DATASET_FILE)["images"]
    chosen = [im for im in images if split is None or im["split"] == split]
    return caption_stats(captions_as_images({str(k): [s["raw"] for s in im["sentences"]]
                                             for k, im in enumerate(chosen)}))


def held_out_agreement(folder: str | Path, metrics: Sequence[str], split: str = "test") -> dict[str, float]:
    """Corpus scores of each held-out caption of ``split`` against the image's references."""
    concepts = load_concepts(folder)
    images = read_json(Path(folder) / DATASET_FILE)["images"]
    refs = {str(im["id"]): [s["raw"] for s in im["sentences"]] for im in images if im["split"] == split}
    if not refs:
        raise DataError(f"{folder}: no images in split {split!r}")
    preds = {i: [concepts[i]["held_out"]] for i in refs}
    return score_captions(refs, preds, list(metrics)).corpus
