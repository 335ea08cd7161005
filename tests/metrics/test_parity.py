"""Parity with pycocoevalcap 1.2 on 5,000 COCO images (expected values in ../shared)."""

from __future__ import annotations

import json
import shutil

import pytest

from rlcap.metrics import score_captions

NO_JAVA = ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L", "CIDEr"]


@pytest.fixture(scope="module")
def report(coco5k):
    return score_captions(coco5k["refs"], coco5k["preds"], NO_JAVA)


@pytest.mark.parametrize("name", NO_JAVA)
def test_corpus_scores_match_pycocoevalcap(report, coco5k, name):
    assert report.corpus[name] == pytest.approx(coco5k["expected"][name], abs=1e-9)


@pytest.mark.parametrize("name", NO_JAVA)
def test_per_image_scores_match_pycocoevalcap(report, coco5k, name):
    expected = dict(zip((str(i) for i in coco5k["per_image"]["image_ids"]), coco5k["per_image"][name]))
    worst = max(abs(report.per_image[i][name] - expected[i]) for i in expected)
    assert worst < 1e-9


@pytest.mark.java
@pytest.mark.skipif(shutil.which("java") is None, reason="java not on PATH")
def test_meteor_matches_pycocoevalcap(coco5k):
    report = score_captions(coco5k["refs"], coco5k["preds"], ["METEOR"])
    assert report.corpus["METEOR"] == pytest.approx(coco5k["expected"]["METEOR"], abs=1e-4)
    expected = dict(zip((str(i) for i in coco5k["per_image"]["image_ids"]), coco5k["per_image"]["METEOR"]))
    assert max(abs(report.per_image[i]["METEOR"] - expected[i]) for i in expected) < 1e-4


# Scores of one image that do not depend on the other images of the set (CIDEr-D's document frequencies do)
ON_ITS_OWN = ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L"]


@pytest.mark.java
@pytest.mark.skipif(shutil.which("java") is None, reason="java not on PATH")
def test_rlcap_score_default_set_matches_pycocoevalcap_per_image(coco5k, tmp_path):
    """`rlcap score` without --metrics: pycocoevalcap's set (METEOR with Java, SPICE by the port), each
    image's scores that depend on it alone equal to pycocoevalcap's, on 300 of the 5,000 images (the
    whole set's per-image scores, CIDEr-D's too, are the tests above, through the same scorer)."""
    from rlcap.cli import main

    ids = [str(i) for i in coco5k["per_image"]["image_ids"]][::16][:300]
    refs, preds, out = tmp_path / "refs.json", tmp_path / "preds.json", tmp_path / "scores.json"
    refs.write_text(json.dumps({i: coco5k["refs"][i] for i in ids}))
    preds.write_text(json.dumps({i: coco5k["preds"][i] for i in ids}))
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert list(result["corpus"]) == ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE"]
    assert result["spice_impl"] == "python"
    assert sorted(result["per_image"]) == sorted(ids)
    for name in ON_ITS_OWN:
        tolerance = 1e-4 if name == "METEOR" else 1e-9
        expected = dict(zip((str(i) for i in coco5k["per_image"]["image_ids"]), coco5k["per_image"][name]))
        worst = max(abs(result["per_image"][i][name] - expected[i]) for i in ids)
        assert worst < tolerance, name
