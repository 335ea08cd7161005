"""The gallery's pictures: a thumbnail of each image, a strip of frames of each video, embedded in the page
as JPEG data URIs (so the page is one file that opens anywhere, with no network)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

from rlcap.data.embedded import EmbeddedImage

VIDEO_SUFFIXES = {".mp4", ".avi", ".mkv", ".webm", ".mov", ".gif"}


def _data_uri(image) -> str:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def thumbnail(path: Path | io.BytesIO, side: int = 160) -> str:
    """An image's thumbnail (longest side ``side`` pixels) as a data URI."""
    from PIL import Image

    with Image.open(path) as img:
        img.thumbnail((side, side))
        return _data_uri(img)


def frame_strip(path: Path, frames: int = 4, height: int = 80) -> str:
    """``frames`` frames spread evenly over a video, side by side, ``height`` pixels high, as a data URI."""
    import av
    from PIL import Image

    with av.open(str(path)) as container:
        decoded = [f.to_image() for f in container.decode(video=0)]
    if not decoded:
        raise ValueError(f"{path}: no video frames")
    picks = [decoded[round(i * (len(decoded) - 1) / max(frames - 1, 1))] for i in range(min(frames, len(decoded)))]
    width = round(picks[0].width * height / picks[0].height)
    strip = Image.new("RGB", (width * len(picks) + 2 * (len(picks) - 1), height), "white")
    for i, frame in enumerate(picks):
        strip.paste(frame.resize((width, height)), (i * (width + 2), 0))
    return _data_uri(strip)


def picture(path: Path | EmbeddedImage | None) -> tuple[str | None, str]:
    """(data URI or None, what it is or why it is missing) for an image or video file, or a picture stored in a
    datasets dataset's own files (read there)."""
    if path is None:
        return None, "no file name in the dataset"
    if isinstance(path, EmbeddedImage):
        try:
            return thumbnail(io.BytesIO(path.read())), "the image"
        except Exception as exc:  # an unreadable picture is shown as missing, not the end of the report
            return None, f"unreadable: {path} ({exc.__class__.__name__})"
    if not path.exists():
        return None, f"not found: {path}"
    try:
        if path.suffix.lower() in VIDEO_SUFFIXES:
            return frame_strip(path), "frames of the clip"
        return thumbnail(path), "the image"
    except Exception as exc:  # an unreadable file is shown as missing, not the end of the report
        return None, f"unreadable: {path} ({exc.__class__.__name__})"
