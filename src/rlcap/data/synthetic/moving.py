"""The "moving shapes" benchmark: rlcap's embedded synthetic video captioning dataset ([Wang18]'s setting).

``generate_moving_shapes(MovingShapesConfig(), "data/moving-shapes")`` writes ``videos/<id>.mp4``
(H.264, written with PyAV) and ``annotations.json`` in MSR-VTT's format (``videos`` with
``video_id`` and ``split``; ``sentences`` with ``video_id`` and ``caption``), plus each video's
``clip`` (objects and events) and each sentence's ``annotator`` and ``segments`` (the word at which
each event's part starts: the boundaries [Wang18]'s internal critic learns). Clip ``i`` depends on
``(seed, i)`` only; ids ``video0 .. video{n_train-1}`` are the train split, then val, then test. A
``manifest.json`` written last records the config; rerunning with it over a complete folder does
nothing.
"""

from __future__ import annotations

import logging
import multiprocessing
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rlcap.data.synthetic.clip_captions import caption_clip
import rlcap.data.synthetic.manifest as manifests
from rlcap.data.synthetic.clips import sample_clip, state_at
from rlcap.data.synthetic.render import render_scene
from rlcap.errors import ConfigError, DataError
from rlcap.files import write_json

logger = logging.getLogger(__name__)

ANNOTATIONS_FILE = "annotations.json"
MANIFEST_FILE = manifests.MANIFEST_FILE
VIDEO_DIR = "videos"
GENERATOR_VERSION = 1
CHUNK = 16


@dataclass(frozen=True)
class MovingShapesConfig:
    """What to generate. Every field but ``workers`` changes the output."""

    seed: int = field(default=0, metadata={"help": "random seed; clip i depends on (seed, i)"})
    n_train: int = field(default=6_000, metadata={"help": "training clips"})
    n_val: int = field(default=500, metadata={"help": "validation clips"})
    n_test: int = field(default=500, metadata={"help": "test clips"})
    image_size: int = field(default=64, metadata={"help": "side of the square frames, pixels"})
    min_frames: int = field(default=16, metadata={"help": "fewest frames of a clip"})
    max_frames: int = field(default=32, metadata={"help": "most frames of a clip"})
    fps: int = field(default=8, metadata={"help": "frame rate of the written videos"})
    max_objects: int = field(default=3, metadata={"help": "objects per clip, 1 to this (<= 3)"})
    captions: int = field(default=5, metadata={"help": "captions per clip (3 to 5 annotators)"})
    workers: int = field(default=2, metadata={"help": "drawing processes (output unchanged)"})

    def __post_init__(self) -> None:
        for name in ("n_train", "n_val", "n_test"):
            if getattr(self, name) < 0:
                raise ConfigError(f"moving-shapes: {name} must be >= 0, got {getattr(self, name)}")
        if self.n_videos < 1:
            raise ConfigError("moving-shapes: n_train + n_val + n_test must be >= 1")
        if self.image_size < 32 or self.image_size % 2:
            raise ConfigError(f"moving-shapes: image_size must be even and >= 32, got {self.image_size}")
        if not 8 <= self.min_frames <= self.max_frames:
            raise ConfigError(f"moving-shapes: need 8 <= min_frames <= max_frames, got {self.min_frames}, {self.max_frames}")
        if not 1 <= self.max_objects <= 3:
            raise ConfigError(f"moving-shapes: max_objects must be in 1..3, got {self.max_objects}")
        if not 3 <= self.captions <= 5:
            raise ConfigError(f"moving-shapes: captions must be in 3..5, got {self.captions}")
        if self.fps < 1 or self.workers < 1:
            raise ConfigError("moving-shapes: fps and workers must be >= 1")

    @property
    def n_videos(self) -> int:
        return self.n_train + self.n_val + self.n_test

    def output_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "workers"}

    def split_of(self, i: int) -> str:
        if i < self.n_train:
            return "train"
        return "validate" if i < self.n_train + self.n_val else "test"


def _rng(seed: int, i: int, stream: str) -> random.Random:
    return random.Random(f"moving-shapes/{seed}/{i}/{stream}")


def write_video(path: Path, frames: list[np.ndarray], fps: int) -> None:
    """RGB frames (H, W, 3) uint8 -> an H.264 MP4 at ``fps``."""
    import av

    tmp = path.with_suffix(".tmp.mp4")
    with av.open(str(tmp), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "18"}
        for pixels in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    tmp.replace(path)


def clip_and_captions(config: MovingShapesConfig, i: int):
    """Clip ``i``'s events and captions, without drawing it (what human agreement needs)."""
    rng = _rng(config.seed, i, "clip")
    clip = sample_clip(rng, rng.randint(config.min_frames, config.max_frames), config.max_objects)
    return clip, caption_clip(clip, _rng(config.seed, i, "captions"), config.captions)


def make_clip(config: MovingShapesConfig, i: int):
    """Clip ``i``: its events, its frames and its captions (nothing is written)."""
    clip, captions = clip_and_captions(config, i)
    frames = [np.asarray(render_scene(state_at(clip, t), config.image_size, _rng(config.seed, i, "render")))
              for t in range(clip.frames)]  # the same jitter in every frame
    return clip, frames, captions


def _build(task: tuple[MovingShapesConfig, str, int]) -> tuple[dict, list[dict]]:
    config, video_dir, i = task
    clip, frames, captions = make_clip(config, i)
    vid = f"video{i}"
    write_video(Path(video_dir) / f"{vid}.mp4", frames, config.fps)
    video = {"video_id": vid, "split": config.split_of(i), "filename": f"{VIDEO_DIR}/{vid}.mp4",
             "duration": round(clip.frames / config.fps, 3), "clip": clip.to_dict()}
    sentences = [{"video_id": vid, "caption": text, "annotator": a, "segments": starts, "sen_id": i * 5 + k}
                 for k, (a, text, starts) in enumerate(captions)]
    return video, sentences


def read_manifest(out_dir: str | Path) -> dict | None:
    """The folder's moving-shapes manifest; None when it has none (DataError when another tool's)."""
    return manifests.read_manifest(out_dir, __name__, "moving-shapes")


def check_settings(config: MovingShapesConfig, out_dir: str | Path, flag: str = "--regenerate") -> None:
    """Refuse (DataError, one line naming the settings and ``flag``) a folder whose moving-shapes
    data was generated with other settings: regenerating it replaces a user's data."""
    changes = manifests.other_settings(read_manifest(out_dir), GENERATOR_VERSION, config.output_dict())
    manifests.refuse_other_settings(out_dir, "moving-shapes", changes, flag)


def is_complete(config: MovingShapesConfig, out_dir: str | Path) -> bool:
    out = Path(out_dir)
    try:
        manifest = read_manifest(out)
    except DataError:
        return False
    if manifest is None or manifest.get("complete", True) is not True:  # (manifests before "complete": written last)
        return False
    if (manifest.get("version"), manifest.get("config")) != (GENERATOR_VERSION, config.output_dict()):
        return False
    return (out / ANNOTATIONS_FILE).is_file() and all(
        (out / VIDEO_DIR / f"video{i}.mp4").is_file() for i in range(config.n_videos))


def _refuse_foreign_data(out: Path) -> None:
    """A folder with clips or annotations but no manifest of ours: generating would overwrite a user's files."""
    if read_manifest(out) is not None:
        return
    clips = sorted((out / VIDEO_DIR).glob("video*.mp4")) if (out / VIDEO_DIR).is_dir() else []
    if clips or (out / ANNOTATIONS_FILE).exists():
        found = f"{VIDEO_DIR}/{clips[0].name}" if clips else ANNOTATIONS_FILE
        raise DataError(f"{out} holds {found} but no {MANIFEST_FILE}: it was not generated by rlcap here, "
                        f"so generating would overwrite it; give a folder of its own to the moving-shapes data")


def generate_moving_shapes(config: MovingShapesConfig, out_dir: str | Path,
                           progress: Callable[[int], None] | None = None) -> Path:
    """Write the dataset to ``out_dir`` (skipped when already complete); return the annotations' path.
    A folder holding clips that no manifest of this generator claims is refused."""
    out = Path(out_dir)
    if is_complete(config, out):
        logger.info("%s is up to date (%d clips)", out, config.n_videos)
        return out / ANNOTATIONS_FILE
    _refuse_foreign_data(out)
    start = time.perf_counter()
    record = {"generator": __name__, "version": GENERATOR_VERSION, "config": config.output_dict()}
    try:
        (out / VIDEO_DIR).mkdir(parents=True, exist_ok=True)
        # first: the folder's clips are rlcap's, should this run be killed
        write_json(out / MANIFEST_FILE, {**record, "complete": False})
    except OSError as exc:
        raise DataError(f"cannot write the moving-shapes dataset to {out}: {exc}") from exc
    tasks = [(config, str(out / VIDEO_DIR), i) for i in range(config.n_videos)]
    videos, sentences = [], []
    pool = multiprocessing.Pool(config.workers) if config.workers > 1 else None
    try:
        results = pool.imap(_build, tasks, chunksize=CHUNK) if pool else map(_build, tasks)
        for video, sents in results:
            videos.append(video)
            sentences.extend(sents)
            if progress:
                progress(1)
    finally:
        if pool:
            pool.close()
            pool.join()
    write_json(out / ANNOTATIONS_FILE, {"info": {"dataset": "moving-shapes"}, "videos": videos, "sentences": sentences})
    seconds = time.perf_counter() - start
    write_json(out / MANIFEST_FILE, {**record, "complete": True, "n_videos": len(videos),
                                     "seconds": round(seconds, 1), "workers": config.workers})
    logger.info("wrote %d moving-shapes clips to %s in %.1f s", len(videos), out, seconds)
    return out / ANNOTATIONS_FILE
