from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rlcap.errors import DataError
from rlcap.metrics import CiderD, tokenize
from rlcap.metrics.cider import cider_d, document_frequencies


@pytest.fixture(scope="module")
def small(coco5k):
    ids = list(coco5k["refs"])[:300]
    refs = {i: [tokenize(c) for c in coco5k["refs"][i]] for i in ids}
    cands = [tokenize(coco5k["preds"][i][0]) for i in ids]
    return ids, refs, cands


def test_matches_the_evaluation_cider_d(small):
    ids, refs, cands = small
    expected = cider_d(cands, [refs[i] for i in ids])
    got = CiderD.from_references(refs).score(cands, ids)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_repeated_images_strings_and_unknown_words(small):
    ids, refs, cands = small
    scorer = CiderD.from_references(refs)
    batch = [cands[0], " ".join(cands[0]), ["zebra", "qqq", "qqq", "a"], [], refs[ids[1]][0]]
    image_ids = [ids[0], ids[0], ids[0], ids[1], ids[1]]
    expected = cider_d(
        [c.split() if isinstance(c, str) else c for c in batch],
        [refs[i] for i in image_ids],
        df=document_frequencies([refs[i] for i in ids]),
        log_num_docs=float(np.log(len(ids))),
    )
    np.testing.assert_allclose(scorer.score(batch, image_ids), expected, rtol=0, atol=1e-12)
    assert scorer.score([[]], [ids[0]])[0] == 0.0


def test_cache_round_trip_and_rebuild(small, tmp_path):
    ids, refs, cands = small
    cache = tmp_path / "cider.npz"
    first = CiderD.from_references(refs, cache=cache)
    assert cache.exists()
    again = CiderD.from_references(refs, cache=cache)  # loaded, same fingerprint
    np.testing.assert_array_equal(first.score(cands, ids), again.score(cands, ids))
    other = {i: refs[i] for i in ids[:10]}
    rebuilt = CiderD.from_references(other, cache=cache)  # stale cache is rebuilt
    assert rebuilt.image_ids == ids[:10]
    assert CiderD.load(cache).fingerprint == rebuilt.fingerprint


def test_document_frequency(small):
    ids, refs, _ = small
    scorer = CiderD.from_references(refs)
    df = document_frequencies([refs[i] for i in ids])
    assert scorer.document_frequency(["a"]) == df[("a",)]
    assert scorer.document_frequency(["a", "man"]) == df[("a", "man")]
    assert scorer.document_frequency(["no-such-word"]) == 0


def test_errors_name_the_item():
    scorer = CiderD.from_references({"1": [["a", "dog"]]})
    with pytest.raises(DataError, match="'7'"):
        scorer.score([["a"]], ["7"])
    with pytest.raises(DataError, match="'2'"):
        CiderD.from_references({"1": [["a"]], "2": []})


def test_metrics_package_does_not_import_torch():
    code = "import sys, rlcap.metrics, rlcap.metrics.meteor, rlcap.cli.score; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
