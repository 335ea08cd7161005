"""The "shapes" benchmark: rlcap's embedded synthetic captioning dataset.

``generate_shapes(ShapesConfig(), "data/shapes")`` writes ``images/<imgid>.png`` and
``dataset_shapes.json`` in the Karpathy schema (plus each image's ``scene`` and each sentence's
``annotator``), and ``questions.json``, ``questions_every.json``, ``questions_main_every.json`` and
``questions_pair_every.json``, multiple-choice questions from each scene's ground truth
(:mod:`rlcap.data.synthetic.questions`: about the two main objects, about every object, both sets', both with the
count asked once). Image ``imgid`` is a function of ``(seed, imgid)`` only, so the output does
not depend on the number of workers. Ids ``0 .. n_train-1`` are the train split, then val, then test.
A ``manifest.json`` records the config and which images the folder may hold from rlcap's
generations (``images_written``: ``images/0.png`` to ``images/<images_written - 1>.png``); it is
written first, marked incomplete, and again last, marked complete. Rerunning with the same config
over a complete folder does nothing; with another config it regenerates, and removes only images
an earlier generation wrote (by that record), never another file. A folder whose
``manifest.json`` this generator did not write, or which holds numbered images with no manifest,
is refused. :func:`check_settings` refuses a folder generated with other settings (what
``rlcap bench`` and ``rlcap demo`` do unless given ``--regenerate``).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import random
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from rlcap.data.synthetic.annotators import ANNOTATOR_VERSIONS, CAPTIONS_VERSION, caption_scene
import rlcap.data.synthetic.manifest as manifests
from rlcap.data.synthetic.captions import Caption
from rlcap.data.synthetic.questions import QUESTION_SETS, write_questions
from rlcap.data.synthetic.render import render_scene
from rlcap.data.synthetic.scenes import Scene, sample_scene
from rlcap.errors import ConfigError, DataError
from rlcap.files import write_json

logger = logging.getLogger(__name__)

DATASET_FILE = "dataset_shapes.json"
MANIFEST_FILE = manifests.MANIFEST_FILE
IMAGE_DIR = "images"
# Bump when a change to sampling, drawing or captions changes the output for the same config.
GENERATOR_VERSION = 3
CAPTIONS_PER_IMAGE = 5
CHUNK = 64  # images per worker task


@dataclass(frozen=True)
class ShapesConfig:
    """What to generate. Every field but ``workers`` changes the output."""

    seed: int = field(default=0, metadata={"help": "random seed; image i depends on (seed, i)"})
    n_train: int = field(default=10_000, metadata={"help": "training images"})
    n_val: int = field(default=1_000, metadata={"help": "validation images"})
    n_test: int = field(default=1_000, metadata={"help": "test images"})
    image_size: int = field(default=128, metadata={"help": "side of the square PNG images, pixels"})
    max_objects: int = field(default=4, metadata={"help": "objects per image, 1 to this (<= 4)"})
    textures: bool = field(default=True, metadata={"help": "striped, dotted, checkered objects"})
    captions: int = field(default=CAPTIONS_VERSION, metadata={
        "help": "annotators' version: 2 names two objects and their relation, 1 the salient object "
                "(docs/SHAPES.md, Caption versions)"})
    workers: int = field(default=2, metadata={"help": "drawing processes (output unchanged)"})

    def __post_init__(self) -> None:
        for name in ("n_train", "n_val", "n_test"):
            if getattr(self, name) < 0:
                raise ConfigError(f"shapes: {name} must be >= 0, got {getattr(self, name)}")
        if self.n_images < 1:
            raise ConfigError("shapes: n_train + n_val + n_test must be >= 1")
        if self.image_size < 32:
            raise ConfigError(f"shapes: image_size must be >= 32, got {self.image_size}")
        if not 1 <= self.max_objects <= 4:
            raise ConfigError(f"shapes: max_objects must be in 1..4, got {self.max_objects}")
        if self.captions not in ANNOTATOR_VERSIONS:
            raise ConfigError(f"shapes: captions must be one of {sorted(ANNOTATOR_VERSIONS)}, got {self.captions}")
        if self.workers < 1:
            raise ConfigError(f"shapes: workers must be >= 1, got {self.workers}")

    @property
    def n_images(self) -> int:
        return self.n_train + self.n_val + self.n_test

    def output_dict(self) -> dict:
        """The fields that determine the output (all but ``workers``)."""
        return {k: v for k, v in asdict(self).items() if k != "workers"}

    def split_of(self, imgid: int) -> str:
        if imgid < self.n_train:
            return "train"
        return "val" if imgid < self.n_train + self.n_val else "test"


def image_rng_seed(seed: int, imgid: int, stream: str) -> str:
    """A string seed: ``random.Random`` hashes it with SHA-512, the same on every platform."""
    return f"shapes/{seed}/{imgid}/{stream}"


def make_image(config: ShapesConfig, imgid: int) -> tuple[Scene, Image.Image, list[Caption]]:
    """Image ``imgid``: its scene, its picture and its five captions (nothing is written)."""
    scene = sample_scene(random.Random(image_rng_seed(config.seed, imgid, "scene")),
                         config.max_objects, config.textures)
    image = render_scene(scene, config.image_size,
                         random.Random(image_rng_seed(config.seed, imgid, "render")))
    captions = caption_scene(scene, random.Random(image_rng_seed(config.seed, imgid, "captions")), config.captions)
    return scene, image, captions


def _build_record(task: tuple[ShapesConfig, str, int]) -> dict:
    """Draw, save and describe one image (runs in a worker process)."""
    config, image_dir, imgid = task
    scene, image, captions = make_image(config, imgid)
    image.save(Path(image_dir) / f"{imgid}.png", format="PNG")
    sentids = [imgid * CAPTIONS_PER_IMAGE + k for k in range(len(captions))]
    return {
        "imgid": imgid,
        "filename": f"{imgid}.png",
        "filepath": IMAGE_DIR,
        "split": config.split_of(imgid),
        "sentids": sentids,
        "sentences": [{"tokens": c.tokens, "raw": c.raw, "imgid": imgid, "sentid": s,
                       "annotator": c.annotator} for c, s in zip(captions, sentids)],
        "scene": scene.to_dict(),
    }


def read_manifest(out_dir: str | Path) -> dict[str, Any] | None:
    """The folder's shapes manifest; None when it has none. DataError when its ``manifest.json``
    was not written by this generator (unreadable, or another tool's)."""
    return manifests.read_manifest(out_dir, __name__, "shapes")


def other_settings(config: ShapesConfig, out_dir: str | Path) -> dict[str, tuple[Any, Any]]:
    """setting -> (the folder's, ``config``'s) for every output setting (and the generator's
    version) that differs from what the folder's data was generated with; empty when the folder
    holds no shapes data or data of these settings."""
    return manifests.other_settings(read_manifest(out_dir), GENERATOR_VERSION, config.output_dict())


def check_settings(config: ShapesConfig, out_dir: str | Path, flag: str = "--regenerate") -> None:
    """Refuse (DataError, one line naming the settings and ``flag``) a folder whose shapes data was
    generated with other settings: regenerating it replaces a user's data."""
    manifests.refuse_other_settings(out_dir, "shapes", other_settings(config, out_dir), flag)


def is_complete(config: ShapesConfig, out_dir: str | Path) -> bool:
    """True when ``out_dir`` holds a finished dataset generated with this config."""
    out = Path(out_dir)
    try:
        manifest = read_manifest(out)
    except DataError:
        return False
    if manifest is None or manifest.get("complete", True) is not True:  # (manifests before "complete": written last)
        return False
    if (manifest.get("version"), manifest.get("config")) != (GENERATOR_VERSION,
                                                             config.output_dict()):
        return False
    if not (out / DATASET_FILE).is_file():
        return False
    return all((out / IMAGE_DIR / f"{i}.png").is_file() for i in range(config.n_images))


def generate_shapes(config: ShapesConfig, out_dir: str | Path,
                    progress: Callable[[int], None] | None = None) -> Path:
    """Write the dataset to ``out_dir`` (skipped if already complete); return the JSON path.

    ``progress(n)`` is called after every ``n`` newly written images (for a progress bar).
    """
    out = Path(out_dir)
    if is_complete(config, out):
        logger.info("%s is up to date (%d images)", out, config.n_images)
        if not all((out / name).is_file() for name in QUESTION_SETS.values()):  # (generated before they were)
            write_questions(out, load_shapes(out)["images"], config.seed)
        return out / DATASET_FILE
    start = time.perf_counter()
    image_dir = out / IMAGE_DIR
    written = max(_images_written(out), config.n_images)
    record = {"generator": __name__, "version": GENERATOR_VERSION, "config": config.output_dict()}
    try:
        image_dir.mkdir(parents=True, exist_ok=True)
        # first: which images the folder may now hold from rlcap, should this run be killed
        write_json(out / MANIFEST_FILE, {**record, "complete": False, "images_written": written})
    except OSError as exc:
        raise DataError(f"cannot write the shapes dataset to {out}: {exc}") from exc
    records = _build_all(config, image_dir, progress)
    _remove_stale_images(image_dir, config.n_images, written)
    write_json(out / DATASET_FILE, {"dataset": "shapes", "images": records})
    write_questions(out, records, config.seed)  # the scenes' multiple-choice questions (qa_utility, QA-acc)
    seconds = time.perf_counter() - start
    write_json(out / MANIFEST_FILE, {**record, "complete": True, "images_written": config.n_images,
                                     "n_images": len(records), "seconds": round(seconds, 1),
                                     "workers": config.workers})
    logger.info("wrote %d shapes images to %s in %.1f s", len(records), out, seconds)
    return out / DATASET_FILE


def _build_all(config: ShapesConfig, image_dir: Path,
               progress: Callable[[int], None] | None) -> list[dict]:
    tasks = [(config, str(image_dir), i) for i in range(config.n_images)]
    records: list[dict] = []
    if config.workers == 1:
        for task in tasks:
            records.append(_build_record(task))
            if progress:
                progress(1)
        return records
    with multiprocessing.Pool(config.workers) as pool:
        for record in pool.imap(_build_record, tasks, chunksize=CHUNK):
            records.append(record)
            if progress:
                progress(1)
    return records


def _images_written(out: Path) -> int:
    """How many images (ids from 0) the folder may hold from earlier generations, by its manifest.
    A folder with numbered images but no manifest is refused: those images are not rlcap's."""
    manifest = read_manifest(out)
    if manifest is not None:
        return int(manifest.get("images_written", manifest.get("n_images", 0)))
    image_dir = out / IMAGE_DIR
    numbered = [p.name for p in image_dir.glob("*.png") if re.fullmatch(r"\d+", p.stem)] if image_dir.is_dir() else []
    if numbered or (out / DATASET_FILE).exists():
        found = f"{IMAGE_DIR}/{numbered[0]}" if numbered else DATASET_FILE
        raise DataError(f"{out} holds {found} but no {MANIFEST_FILE}: it was not generated by rlcap here, "
                        f"so generating would overwrite it; give a folder of its own to the shapes data")
    return 0


def _remove_stale_images(image_dir: Path, n_images: int, written: int) -> None:
    """Delete ``<id>.png`` for ``n_images <= id < written``: images an earlier, larger generation
    wrote (by the manifest's record), and no other file."""
    for i in range(n_images, written):
        (image_dir / f"{i}.png").unlink(missing_ok=True)


def load_shapes(out_dir: str | Path) -> dict:
    """The dataset JSON of a generated folder."""
    path = Path(out_dir) / DATASET_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read the shapes dataset {path}: {exc} "
                        f"(generate it with `rlcap data shapes --out {out_dir}`)") from exc

