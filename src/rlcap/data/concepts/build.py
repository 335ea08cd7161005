"""``build_concepts``: a captioning dataset whose "images" are noisy sets of scene concepts.

For every image of a caption file, caption 0 is held out and describes the scene; its content
words (:mod:`rlcap.data.concepts.extract`) are the scene's concepts, which pass through perception
noise (:mod:`rlcap.data.concepts.noise`) and become region features (GloVe vector + part of
speech, :mod:`rlcap.data.concepts.features`). The other captions are the references. The output
folder holds what every other dataset has, so every model and command reads it unchanged:

* ``feats.h5``: the feature store (``HDF5FeatureWriter``; regions padded, with their counts);
* ``dataset_concepts.json``: the Karpathy split file (references only; no held-out caption);
* ``concepts.json``: per image its held-out caption, kept, dropped and distractor concepts and the
  regions in store order, for inspection and the statistics;
* ``manifest.json``, written last: the build's settings; a rerun with the same ones does nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rlcap.data.concepts.extract import Concept, extract_concepts
from rlcap.data.concepts.features import FEATURE_DIM, region_features
from rlcap.data.concepts.glove import load_glove
from rlcap.data.concepts.noise import Cooccurrence, Noise, Perceived, parse_distractors, perceive, scene_rng
from rlcap.data.concepts.sources import read_caption_file
from rlcap.data.concepts.splits import SceneText, make_splits
from rlcap.data.features import HDF5FeatureWriter
from rlcap.errors import ConfigError
from rlcap.files import check_writable, new_folders, write_json
from rlcap.progress import track

log = logging.getLogger(__name__)

DATASET_FILE = "dataset_concepts.json"
FEATURES_FILE = "feats.h5"
CONCEPTS_FILE = "concepts.json"
MANIFEST_FILE = "manifest.json"
BUILD_VERSION = 1  # bump when the same settings would give other output
_CHUNK = 1024  # scenes per feature-store write


@dataclass(frozen=True)
class ConceptsConfig:
    """How a concepts dataset is built; every field changes the output."""

    seed: int = field(default=0, metadata={"help": "random seed of the splits and of every scene's noise"})
    drop: float = field(default=0.2, metadata={"help": "probability that a true concept is missed (one always stays)"})
    distractors: str = field(default="1-2", metadata={
        "help": "distractor concepts added per scene, LO-HI drawn uniformly, or N; drawn from concepts "
                "that co-occur with the scene's remaining ones in training scenes"})
    n_val: int = field(default=2500, metadata={
        "help": "validation images (test and validation may take at most half of the images)"})
    n_test: int = field(default=5000, metadata={"help": "test images (without --agreement; sized for COCO)"})
    agreement: str | None = field(default=None, metadata={
        "help": "human-agreement file ([{image_id, candidate, references}], e.g. COCO's "
                "human_agreement_5k.json): its images are the test split, with its held-out captions"})
    max_train_images: int = field(default=0, metadata={"help": "keep only this many training images (0: all)"})

    @property
    def noise(self) -> Noise:
        lo, hi = parse_distractors(self.distractors)
        return Noise(self.drop, lo, hi)


class BuildResult(NamedTuple):
    dataset: Path
    features: Path
    n_images: dict[str, int]
    skipped: bool  # the folder was already up to date


def build_concepts(captions_path: str | Path, out_dir: str | Path, config: ConceptsConfig) -> BuildResult:
    """Build (or reuse) the dataset in ``out_dir``. Tagging the held-out captions is most of the time
    (about a minute for COCO's 40,504 on two cores); it shows a progress bar (log lines off a terminal)."""
    out = Path(out_dir)
    noise = config.noise  # invalid settings fail before any work
    manifest = {"version": BUILD_VERSION, **asdict(config), "captions": str(Path(captions_path).resolve()),
                "agreement": str(Path(config.agreement).resolve()) if config.agreement else None}
    if _is_complete(out, manifest):
        return BuildResult(out / DATASET_FILE, out / FEATURES_FILE, _split_counts(out), True)
    check_writable(out, folder=True)  # a read-only or full disk found before the tagging, not after it
    # 1. scenes and splits
    scenes = make_splits(read_caption_file(captions_path), config.seed, config.n_val, config.n_test,
                         config.agreement, config.max_train_images)
    sizes = {split: sum(s.split == split for s in scenes) for split in ("train", "val", "test")}
    log.info("splits: %d train, %d val, %d test scenes", sizes["train"], sizes["val"], sizes["test"])
    # 2. concepts of each held-out caption, those GloVe has
    glove = load_glove()
    tagged = track(extract_concepts(s.held_out for s in scenes), len(scenes), "tagging", unit="caption")
    concepts = [[c for c in found if c.word in glove] for found in tagged]
    # 3. noise: distractors from the co-occurrences of the training scenes
    cooc = Cooccurrence(c for s, c in zip(scenes, concepts) if s.split == "train")
    perceived = [perceive(c, cooc, noise, scene_rng(config.seed, s.id)) for s, c in zip(scenes, concepts)]
    # 4. features, the split file, the inspection file, then the manifest
    with new_folders(out):  # (a folder made here and left empty by a failure is removed)
        (out / MANIFEST_FILE).unlink(missing_ok=True)
        _write_features(out / FEATURES_FILE, scenes, perceived, config)
        write_json(out / DATASET_FILE, _karpathy(scenes))
        write_json(out / CONCEPTS_FILE, {s.id: _inspection(s, p) for s, p in zip(scenes, perceived)})
        write_json(out / MANIFEST_FILE, manifest)
    return BuildResult(out / DATASET_FILE, out / FEATURES_FILE, _split_counts(out), False)


def _write_features(path: Path, scenes: list[SceneText], perceived: list[Perceived], config: ConceptsConfig) -> None:
    glove = load_glove()
    max_regions = max(len(p.regions) for p in perceived)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    attrs = {"encoder": "concepts: GloVe 6B 50d + part-of-speech one-hot (noun, verb, adj)",
             "seed": config.seed, "drop": config.drop, "distractors": config.distractors}
    with HDF5FeatureWriter(tmp, FEATURE_DIM, FEATURE_DIM, max_regions, attrs=attrs) as writer:
        for start in range(0, len(scenes), _CHUNK):
            chunk = range(start, min(start + _CHUNK, len(scenes)))
            att = np.zeros((len(chunk), max_regions, FEATURE_DIM), dtype=np.float32)  # (b, N, 53)
            counts = np.array([len(perceived[i].regions) for i in chunk], dtype=np.int32)
            for row, i in enumerate(chunk):
                att[row, :counts[row]] = region_features(perceived[i].regions, glove)
            fc = att.sum(axis=1) / counts[:, None]  # (b, 53) mean of the real regions
            writer.write([scenes[i].id for i in chunk], fc, att, counts)
    tmp.replace(path)


def _karpathy(scenes: list[SceneText]) -> dict:
    return {"dataset": "concepts", "images": [
        {"id": s.id, "split": s.split, "sentences": [{"raw": r} for r in s.references]} for s in scenes]}


def _pairs(concepts: list[Concept]) -> list[list[str]]:
    return [[c.word, c.pos] for c in concepts]


def _inspection(scene: SceneText, p: Perceived) -> dict:
    return {"split": scene.split, "held_out": scene.held_out, "kept": _pairs(p.kept),
            "dropped": _pairs(p.dropped), "distractors": _pairs(p.distractors), "regions": _pairs(p.regions)}


def _is_complete(out: Path, manifest: dict) -> bool:
    try:
        return json.loads((out / MANIFEST_FILE).read_text(encoding="utf-8")) == manifest and all(
            (out / name).is_file() for name in (DATASET_FILE, FEATURES_FILE, CONCEPTS_FILE))
    except (OSError, ValueError):
        return False


def _split_counts(out: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in json.loads((out / CONCEPTS_FILE).read_text(encoding="utf-8")).values():
        counts[item["split"]] = counts.get(item["split"], 0) + 1
    return counts


def load_concepts(dataset: str | Path) -> dict[str, dict]:
    """The ``concepts.json`` beside a built ``dataset_concepts.json`` (or in the folder given)."""
    path = Path(dataset)
    path = (path if path.is_dir() else path.parent) / CONCEPTS_FILE
    if not path.is_file():
        raise ConfigError(f"{path}: not found; is this a folder built by `rlcap data concepts`?")
    return json.loads(path.read_text(encoding="utf-8"))
