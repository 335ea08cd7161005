"""Bad input gives a DataError naming the item, or a documented score (empty caption -> 0)."""

from __future__ import annotations

import pytest

from rlcap.errors import DataError
from rlcap.metrics import score_captions
from rlcap.metrics.io import read_preds, read_refs

REFS = {"1": ["A dog on a mat.", "A brown dog lies on a mat."], "2": ["A cat on a sofa."]}
NO_JAVA = ["Bleu_1", "Bleu_4", "ROUGE_L", "CIDEr"]


@pytest.mark.parametrize("caption", ["", "   ", "... , !", "-- ;"])
def test_empty_or_punctuation_only_candidate_scores_zero(caption):
    report = score_captions(REFS, {"1": [caption], "2": ["A cat on a sofa."]}, NO_JAVA)
    for name in NO_JAVA:
        assert report.per_image["1"][name] == pytest.approx(0.0, abs=1e-6), name
    assert report.per_image["2"]["CIDEr"] > 0


def test_image_missing_from_references():
    with pytest.raises(DataError, match="'3'"):
        score_captions(REFS, {"3": ["a dog"]}, NO_JAVA)


def test_references_with_no_captions():
    with pytest.raises(DataError, match="'2'"):
        score_captions({**REFS, "2": []}, {"2": ["a cat"]}, NO_JAVA)


def test_unknown_metric_lists_the_allowed_ones():
    with pytest.raises(DataError, match="Bleu_4.*CIDEr"):
        score_captions(REFS, {"1": ["a dog"]}, ["BLEU"])


def test_invalid_json_and_not_utf8(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"1": ["a dog"', encoding="utf-8")
    with pytest.raises(DataError, match="broken.json: not valid JSON"):
        read_refs(broken)
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"1": ["caf\xe9"]}'.encode("latin-1"))
    with pytest.raises(DataError, match="latin.json: not UTF-8"):
        read_preds(latin)


def test_malformed_records_name_the_entry(tmp_path):
    path = tmp_path / "preds.json"
    path.write_text('[{"image_id": 1, "caption": "a dog"}, {"image_id": 2}]', encoding="utf-8")
    with pytest.raises(DataError, match=r"results\[1\]"):
        read_preds(path)


def test_both_file_formats(tmp_path):
    coco = tmp_path / "coco.json"
    coco.write_text('{"annotations": [{"image_id": 1, "caption": "a"}, {"image_id": 1, "caption": "b"}]}')
    assert read_refs(coco) == {"1": ["a", "b"]}
    mapping = tmp_path / "map.json"
    mapping.write_text('{"1": ["a", "b"], "2": "c"}')
    assert read_preds(mapping) == {"1": ["a", "b"], "2": ["c"]}
