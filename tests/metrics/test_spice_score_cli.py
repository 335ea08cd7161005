"""SPICE and SPIDEr through `rlcap score` and `score_captions`, with the implementation named."""

from __future__ import annotations

import json

import pytest

from rlcap.errors import DataError
from rlcap.metrics import PYCOCOEVALCAP_METRICS, default_metrics, score_captions

pytest.importorskip("spacy")

REFS = {"1": ["A brown dog is lying on a couch.", "A dog on a sofa."], "2": ["A man riding a wave on a surfboard."]}
PREDS = {"1": ["A brown dog on a sofa."], "2": ["A surfer rides a big wave."]}


def test_score_captions_names_the_spice_implementation():
    report = score_captions(REFS, PREDS, ["CIDEr", "SPICE", "SPIDEr"])
    assert report.spice_impl == "python"
    for image in PREDS:
        values = report.per_image[image]
        assert values["SPIDEr"] == pytest.approx((values["CIDEr"] + values["SPICE"]) / 2)
    assert score_captions(REFS, PREDS, ["CIDEr"]).spice_impl is None


def test_unknown_spice_implementation_lists_the_choices():
    with pytest.raises(DataError, match="python, official-jar"):
        score_captions(REFS, PREDS, ["SPICE"], spice_impl="java")


def test_default_set_is_pycocoevalcaps():
    assert set(default_metrics()) <= set(PYCOCOEVALCAP_METRICS)
    assert "SPICE" in default_metrics()


def test_rlcap_score_writes_spice_and_its_implementation(tmp_path, capsys):
    from rlcap.cli import main

    refs, preds, out = tmp_path / "refs.json", tmp_path / "preds.json", tmp_path / "out.json"
    refs.write_text(json.dumps(REFS))
    preds.write_text(json.dumps(PREDS))
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "SPICE,SPIDEr",
                 "--out", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    assert result["spice_impl"] == "python"
    assert 0 < result["corpus"]["SPICE"] <= 1
    assert "spice_impl: python" in capsys.readouterr().out
