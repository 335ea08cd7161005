"""`rlcap eval --objects FILE` adds CHAIR_i, CHAIR_s, Coverage and Colour-err to the scores, the same as
`rlcap score` gives on the same captions; the report shows them, and the template share beside the diversity."""

from __future__ import annotations

import json

import pytest

from rlcap.cli import main
from rlcap.data.objects import read_object_truth
from rlcap.metrics import score_captions
from rlcap.report.stats import diversity


def test_the_template_share_at_a_glance_by_hand():
    d = diversity(["a red circle to the right of it", "a star to the right of it", "a blue star", "x"])
    # "to the right of" and "the right of it" are each in 2 captions: the tie goes to the first sorted
    assert d["template"] == "the right of it"
    assert d["template_share"] == pytest.approx(2 / 4)  # the two captions that hold "to the right of ..."
    assert diversity(["a b", "c"])["template"] == "" and diversity([])["template_share"] == 0.0


def _objects_file(dataset, path):
    """A shapes-format objects file for the tiny dataset: each picture holds the one object of its first
    reference ("A red circle.")."""
    images = []
    for im in json.loads(dataset.read_text())["images"]:
        colour, shape = im["sentences"][0]["raw"].rstrip(".").split()[1:3]
        obj = {"shape": shape, "colour": colour, "size": "medium", "texture": None, "x": 0.5, "y": 0.5, "radius": 0.1}
        images.append({"imgid": im["imgid"], "scene": {"background": "white", "objects": [obj]}})
    path.write_text(json.dumps({"images": images}))
    return path


def test_eval_with_objects_scores_chair_as_score_does_and_the_report_shows_it(tiny_xe, tmp_path, capsys):
    dataset, _, best = tiny_xe(2)
    objects = _objects_file(dataset, tmp_path / "objects.json")
    out = tmp_path / "eval"
    assert main(["eval", str(best), "--objects", str(objects), "--out", str(out)]) == 0
    scores = json.loads((out / "scores.json").read_text())["model"]
    predictions = {str(p["image_id"]): [p["caption"]] for p in json.loads((out / "predictions.json").read_text())}
    refs = {str(im["imgid"]): [s["raw"] for s in im["sentences"]] for im in json.loads(dataset.read_text())["images"]}
    names = ["CHAIR_i", "CHAIR_s", "Coverage", "Colour-err"]
    expected = score_captions({i: refs[i] for i in predictions}, predictions, names,
                              objects=read_object_truth(objects)).corpus
    assert {n: scores[n] for n in names} == pytest.approx(expected)
    assert "CHAIR_i" in capsys.readouterr().out
    assert main(["report", str(out), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "CHAIR_i" in page and "Coverage" in page and "template share" in page
    assert "coverage 1.00" in page or "coverage 0.00" in page  # a gallery caption's (one object a picture)
