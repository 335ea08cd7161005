"""The report of an HRL run on video: frame strips in the gallery and captions cut where the internal critic
ends a segment."""

from __future__ import annotations

import re

import pytest

from rlcap import api
from rlcap.report import write_report
from rlcap.report.collect import collect
from rlcap.report.page import hrl_segments
from tests.tiny import make_tiny_clips, tiny_hrl_xe

pytestmark = pytest.mark.slow  # trains tiny runs (make test-fast leaves them out)


def test_hrl_report_shows_frames_and_segments(tmp_path):
    ann, feats = make_tiny_clips(tmp_path)
    best = tiny_hrl_xe(tmp_path, ann, feats)
    api.evaluate(best, out_dir=best.parent / "eval_test")
    data = collect(best.parent)
    system = data.systems[0]
    cuts = hrl_segments(system, system.captions)
    assert set(cuts) == {i for i, c in system.captions.items() if c.split()}
    for i, parts in cuts.items():
        assert " ".join(parts) == system.captions[i] and all(parts)  # the caption, cut, nothing lost
    page = write_report(best.parent, tmp_path / "hrl.html").read_text(encoding="utf-8")
    assert page.count('class="item"') == 4  # the 4 test clips
    assert page.count("data:image/jpeg;base64,") == 4 and "frames of the clip" in page
    shown_cuts = sum(len(p) - 1 for p in cuts.values())
    assert shown_cuts > 0 and len(re.findall(r'class="seg"', page)) == shown_cuts  # the critic cut somewhere
