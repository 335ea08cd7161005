"""Which files are pictures and which are clips, one set of suffixes for every command (feature extraction, the
report's gallery, the trackers' caption table), and a clip shown as one picture: frames spread over it, side by
side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcap.data.embedded import EmbeddedImage

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg")


def is_video(path: str | Path | EmbeddedImage) -> bool:
    """Whether ``path`` names a clip (a picture a datasets dataset stores is never one)."""
    return not isinstance(path, EmbeddedImage) and Path(path).suffix.lower() in VIDEO_SUFFIXES


def frame_strip(path: str | Path, frames: int = 4, height: int = 80) -> Any:
    """``frames`` frames spread evenly over the clip ``path`` (its first and last among them), side by side with
    2 white pixels between them, ``height`` pixels high: a PIL image. ValueError for a clip without frames or one
    FFmpeg cannot read (its error's words in it)."""
    import av
    from PIL import Image

    try:
        with av.open(str(path)) as container:
            decoded = [f.to_image() for f in container.decode(video=0)]
    except av.error.FFmpegError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    if not decoded:
        raise ValueError(f"{path}: no video frames")
    picks = [decoded[round(i * (len(decoded) - 1) / max(frames - 1, 1))] for i in range(min(frames, len(decoded)))]
    width = round(picks[0].width * height / picks[0].height)
    strip = Image.new("RGB", (width * len(picks) + 2 * (len(picks) - 1), height), "white")
    for i, frame in enumerate(picks):
        strip.paste(frame.resize((width, height)), (i * (width + 2), 0))
    return strip
