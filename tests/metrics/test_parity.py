"""Parity with pycocoevalcap 1.2 on 5,000 COCO images (expected values in ../shared)."""

from __future__ import annotations

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


@pytest.mark.parametrize("name", ["CIDEr", "Bleu_4", "Bleu_1", "ROUGE_L"])
def test_per_image_scores_match_pycocoevalcap(report, coco5k, name):
    expected = dict(zip((str(i) for i in coco5k["per_image"]["image_ids"]), coco5k["per_image"][name]))
    worst = max(abs(report.per_image[i][name] - expected[i]) for i in expected)
    assert worst < 1e-9


@pytest.mark.java
@pytest.mark.skipif(shutil.which("java") is None, reason="java not on PATH")
def test_meteor_matches_pycocoevalcap(coco5k):
    report = score_captions(coco5k["refs"], coco5k["preds"], ["METEOR"])
    assert report.corpus["METEOR"] == pytest.approx(coco5k["expected"]["METEOR"], abs=1e-4)
