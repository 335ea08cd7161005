"""The trackers' caption table on a video dataset: each clip's picture is a strip of its frames, not a warning;
the one set of picture and clip suffixes (rlcap.data.media) that feature extraction and the report share."""

import json
import logging

import pytest

from rlcap.data.media import IMAGE_SUFFIXES, VIDEO_SUFFIXES, frame_strip, is_video
from rlcap.methods import load_run_config
from rlcap.report.media import picture
from rlcap.train.validation import _pictures
from tests.tiny import make_tiny_clips


def test_the_caption_table_shows_each_clip_as_a_strip_of_its_frames(tmp_path, caplog):
    ann, _ = make_tiny_clips(tmp_path)
    ids = tuple(v["video_id"] for v in json.loads(ann.read_text())["videos"] if v["split"] == "validate")[:3]  # MSR-VTT's name
    d = load_run_config(None, [f"data.dataset={ann}"]).data
    with caplog.at_level(logging.WARNING, logger="rlcap.train.validation"):
        pictures = _pictures(str(ann), d.format, d.coco_splits, d.columns(), "val", ids)
    assert not caplog.records  # before, each clip was "no picture ... cannot identify image file"
    assert set(pictures) == set(ids)
    first = pictures[ids[0]]
    strip = frame_strip(ann.parent / "videos" / f"{ids[0]}.mp4")
    assert first.mode == "RGB" and first.width > 3 * first.height  # 4 frames side by side
    assert max(first.size) <= 256 and abs(first.width / first.height - strip.width / strip.height) < 0.05
    assert len({pictures[i].tobytes() for i in ids}) == len(ids)  # each clip its own frames
    uri, what = picture(ann.parent / "videos" / f"{ids[0]}.mp4")  # the report's gallery: the same strip
    assert uri.startswith("data:image/jpeg;base64,") and what == "frames of the clip"


def test_an_unreadable_clip_is_one_value_error_and_suffixes_are_one_set(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video")
    with pytest.raises(ValueError, match="broken.mp4"):
        frame_strip(bad)
    assert is_video(bad) and is_video("a/B.MKV") and not is_video("a/b.gif") and not is_video("c.png")
    assert not set(IMAGE_SUFFIXES) & set(VIDEO_SUFFIXES)
