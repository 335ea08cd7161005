"""Video files to frame features: frames sampled with PyAV (whose wheel ships FFmpeg), each frame
through the frozen image encoder, into the feature store with a frame axis.

A video is stored like an image whose regions are its frames, in order: ``att`` (F, D) holds one
pooled vector of the image encoder (EfficientNet-Lite0 by default, or ``hf:DIR``) per sampled frame
(``att_count`` = the frames read), ``fc`` their mean. Every captioner that attends over regions therefore attends over frames unchanged, and the
video models of [Wang18] read the frame axis in order.

Sampling: ``n_frames`` frames evenly spaced over the whole clip (the centre of each of n equal
parts), or ``fps`` frames per second of video time ([Wang18 sec. 4.1]: 3 fps), capped at ``max_frames``.
Encoding is resumable as for images (:func:`rlcap.encoders.extract.extract_features`): ids already
in the store with an unchanged file are skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from rlcap.data.features import HDF5FeatureWriter
from rlcap.data.features.fingerprint import fingerprint
from rlcap.encoders.efficientnet import check_image_size
from rlcap.encoders.extract import ON_ERROR, ExtractStats, _todo, encoder_location, write_rows
from rlcap.encoders.load import DEFAULT_ENCODER, CountsRegions, load_encoder
from rlcap.errors import ConfigError, DataError

logger = logging.getLogger(__name__)



def read_frames(path: str | Path, n_frames: int = 16, fps: float | None = None, max_frames: int = 64) -> list[Image.Image]:
    """Decode ``path`` and keep ``n_frames`` evenly spaced frames, or ``fps`` frames per second
    (at most ``max_frames``). One :class:`DataError` line for a missing, corrupt or empty video."""
    try:
        import av
    except ImportError as exc:  # pragma: no cover - a main dependency
        raise DataError("reading videos needs PyAV: pip install av") from exc
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such video file")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise DataError(f"{path}: no video stream")
            stream = container.streams.video[0]
            frames = [(float(f.time) if f.time is not None else i, f.to_image())
                      for i, f in enumerate(container.decode(stream))]
    except DataError:
        raise
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot decode the video ({exc.__class__.__name__}: {exc})") from None
    if not frames:
        raise DataError(f"{path}: the video has no frames")
    return [frames[i][1].convert("RGB") for i in frame_indices([t for t, _ in frames], n_frames, fps, max_frames)]


def frame_indices(times: list[float], n_frames: int, fps: float | None, max_frames: int) -> list[int]:
    """Which of the decoded frames (their times in seconds, increasing) to keep."""
    count = len(times)
    if fps is not None:
        if fps <= 0:
            raise ConfigError(f"fps must be positive, got {fps}")
        duration = times[-1] - times[0]
        wanted = [times[0] + k / fps for k in range(int(duration * fps) + 1)][:max_frames]
        return [int(np.argmin([abs(t - w) for t in times])) for w in wanted]
    if n_frames < 1:
        raise ConfigError(f"n_frames must be at least 1, got {n_frames}")
    return [min(count - 1, int((k + 0.5) * count / n_frames)) for k in range(n_frames)]


def extract_video_features(videos: Mapping[str, str | Path], out: str | Path, image_size: int | None = 128,
                           n_frames: int = 16, fps: float | None = None, max_frames: int = 64,
                           frame_batch: int = 64, progress: Callable[[int], None] | None = None,
                           on_error: str = "raise", dtype: str = "float16",
                           encoder: str = DEFAULT_ENCODER) -> ExtractStats:
    """Encode ``videos`` (id -> file) into the HDF5 store ``out``, on the CPU: per video, its sampled frames'
    pooled vectors (``fc`` of ``encoder``, :mod:`rlcap.encoders.load`) as ``att`` (F, D) and their mean as
    ``fc``. Resumable; ``progress(n)`` after each video; ``on_error``: ``raise`` or ``skip`` (listed in the
    stats) for an unreadable video. ``image_size``: EfficientNet-Lite0's (an ``hf:`` model's is its own)."""
    if on_error not in ON_ERROR:
        raise ConfigError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    if image_size is not None:
        check_image_size(image_size)
    started = time.perf_counter()
    frames_max = max_frames if fps is not None else n_frames
    model = load_encoder(encoder, image_size if encoder == DEFAULT_ENCODER else None)
    if isinstance(model, CountsRegions):  # (a frame's pooled vector is a row of a video's store)
        raise ConfigError(f"--encoder {encoder}: a vision-language model's store holds each picture's image tokens, "
                          "which make no frame vector: encode videos with efficientnet-lite0 or an hf: vision model")
    attrs = {**model.records(), "frames": "att rows are frames",
             "sampling": f"{fps} fps" if fps is not None else f"{n_frames} evenly spaced frames"}
    if attrs.get("resize") == "whole image, bicubic":
        attrs["resize"] = "whole frame, bicubic"
    stats = ExtractStats()
    with HDF5FeatureWriter(out, model.fc_dim, model.fc_dim, frames_max, dtype=dtype, attrs=attrs,
                           noted=encoder_location(encoder)) as writer:
        todo, stats.changed = _todo(videos, writer)
        stats.already_done = len(videos) - len(todo)
        if stats.already_done and progress:
            progress(stats.already_done)
        for video_id, path in todo:
            try:
                stamp = fingerprint(path)
                frames = read_frames(path, n_frames, fps, max_frames)
            except DataError as exc:
                if on_error == "raise":
                    raise
                logger.warning("skipped %s: %s", video_id, exc)
                stats.failed.append((video_id, str(exc)))
                writer.record_skipped([(video_id, str(exc))])
                if progress:
                    progress(1)
                continue
            per_frame = torch.cat([model.features(torch.from_numpy(model.prepare(frames[i:i + frame_batch])))[0]
                                   for i in range(0, len(frames), frame_batch)])  # (F, D) each frame's pooled vector
            att = np.zeros((1, frames_max, model.fc_dim), dtype=np.float32)
            att[0, :len(frames)] = per_frame.numpy()
            write_rows(writer, [video_id], per_frame.mean(0, keepdim=True).numpy(), att, np.array([len(frames)]),
                       fingerprints=[stamp])
            stats.encoded += 1
            if progress:
                progress(1)
    stats.seconds = time.perf_counter() - started
    logger.info("encoded %d videos in %.1fs, %d failed", stats.encoded, stats.seconds, len(stats.failed))
    return stats
