"""The trackers' caption table on a video dataset: each clip's picture is a strip of its frames, not a warning."""

import json
import logging

from rlcap.methods import load_run_config
from rlcap.report.media import frame_strip_image
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
    strip = frame_strip_image(ann.parent / "videos" / f"{ids[0]}.mp4")
    assert first.mode == "RGB" and first.width > 3 * first.height  # 4 frames side by side
    assert max(first.size) <= 256 and abs(first.width / first.height - strip.width / strip.height) < 0.05
    assert len({pictures[i].tobytes() for i in ids}) == len(ids)  # each clip its own frames
