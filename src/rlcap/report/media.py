"""The gallery's pictures: a thumbnail of each image, a strip of frames of each video, embedded in the page
as JPEG data URIs (so the page is one file that opens anywhere, with no network)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

from rlcap.data.embedded import EmbeddedImage
from rlcap.data.media import frame_strip, is_video


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


def clip_strip(path: Path) -> str:
    """Frames spread over a clip, side by side (:func:`rlcap.data.media.frame_strip`), as a data URI."""
    return _data_uri(frame_strip(path))


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
        if is_video(path):
            return clip_strip(path), "frames of the clip"
        return thumbnail(path), "the image"
    except Exception as exc:  # an unreadable file is shown as missing, not the end of the report
        return None, f"unreadable: {path} ({exc.__class__.__name__})"
