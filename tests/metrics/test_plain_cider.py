"""Plain CIDEr (Vedantam et al. 2015: no clipping, no length penalty, x10 as CIDEr-D): by hand on two
references, the fast scorer against the readable one, and the registered reward ``cider``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlcap.metrics import CiderD, tokenize
from rlcap.metrics.cider import cider, cider_d, document_frequencies
from rlcap.rewards import CiderDReward, RewardBatch, RewardContext, resolve_reward

# Image 1 has two references, "a b" and "a c"; image 2 has "c d". Two documents: log N = ln 2.
# df: a, b, d, "a b", "a c", "c d" in one image (idf ln 2); c in both (idf 0).
REFS = {"1": [["a", "b"], ["a", "c"]], "2": [["c", "d"]]}
L2 = math.log(2)


def test_plain_cider_by_hand_on_two_references():
    # candidate "a a b" (image 1), tf-idf in units of ln 2:
    #   unigrams a 2, b 1 (norm sqrt 5); bigrams "a a" 1 (unseen: idf ln 2 - ln 1), "a b" 1 (norm sqrt 2);
    #   trigram "a a b" 1, but no reference has a trigram (norm 0): 0 for n = 3, 4.
    # ref "a b": unigrams a 1, b 1 (norm sqrt 2), bigram "a b" 1 (norm 1)
    #   cosine n=1: (2*1 + 1*1) / (sqrt 5 sqrt 2) = 3 / sqrt 10; n=2: 1 / sqrt 2
    # ref "a c": unigrams a 1, c 0 (norm 1), bigram "a c" 1
    #   cosine n=1: 2 / sqrt 5; n=2: 0
    # CIDEr = 10 * mean over the 2 refs of (sum over n of the cosine) / 4
    want = 10 / 4 * (3 / math.sqrt(10) + 1 / math.sqrt(2) + 2 / math.sqrt(5)) / 2
    assert want == pytest.approx(3.18777, abs=1e-5)
    # CIDEr-D clips a's 2 to the reference's 1 (n=1: 2 / sqrt 10 and 1 / sqrt 5) and the bigram counts
    # differ by 1 (2 against 1): the penalty exp(-1 / 72)
    want_d = 10 / 4 * (2 / math.sqrt(10) + 1 / math.sqrt(2) + 1 / math.sqrt(5)) / 2 * math.exp(-1 / 72)
    refs = [REFS["1"], REFS["2"]]
    cand = ["a", "a", "b"]
    assert cider([cand, ["c", "d"]], refs)[0] == pytest.approx(want, rel=1e-12)
    assert cider_d([cand, ["c", "d"]], refs)[0] == pytest.approx(want_d, rel=1e-12)
    assert want > want_d  # repeating a reference word more often than it is not clipped in plain CIDEr
    scorer = CiderD.from_references(REFS)
    np.testing.assert_allclose(scorer.score([cand, cand], ["1", "1"], plain=True), [want, want], rtol=1e-12)
    np.testing.assert_allclose(scorer.score([cand], ["1"]), [want_d], rtol=1e-12)


def test_plain_cider_has_no_length_penalty():
    # "a" against image 1: n=1 cosine with "a b" 1 / sqrt 2, with "a c" 1 (c has idf 0); no bigrams.
    # CIDEr-D multiplies each by exp(-(0 - 1)^2 / 72).
    want = 10 / 4 * (1 / math.sqrt(2) + 1) / 2
    scorer = CiderD.from_references(REFS)
    assert scorer.score([["a"]], ["1"], plain=True)[0] == pytest.approx(want, rel=1e-12)
    assert scorer.score([["a"]], ["1"])[0] == pytest.approx(want * math.exp(-1 / 72), rel=1e-12)
    assert scorer.score([[]], ["1"], plain=True)[0] == 0.0


def test_fast_plain_cider_matches_the_readable_one(coco5k):
    ids = list(coco5k["refs"])[:300]
    refs = {i: [tokenize(c) for c in coco5k["refs"][i]] for i in ids}
    cands = [tokenize(coco5k["preds"][i][0]) for i in ids] + [["a", "a", "a", "man"], ["zebra", "qqq"], []]
    image_ids = ids + ids[:3]
    expected = cider(cands, [refs[i] for i in image_ids], df=document_frequencies([refs[i] for i in ids]),
                     log_num_docs=math.log(len(ids)))
    got = CiderD.from_references(refs).score(cands, image_ids, plain=True)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert not np.allclose(got, CiderD.from_references(refs).score(cands, image_ids))  # it is another metric


def test_the_cider_reward_is_plain_cider_with_cider_d_tables():
    train_refs = {"1": ["a b", "a c"], "2": ["c d"]}
    reward = resolve_reward("cider", RewardContext(train_refs, eos_counts=False))
    assert isinstance(reward, CiderDReward) and reward.plain
    batch = RewardBatch(["1", "1"], [train_refs["1"]] * 2)
    want = 10 / 4 * (3 / math.sqrt(10) + 1 / math.sqrt(2) + 2 / math.sqrt(5)) / 2
    # "a b" is reference 1 (cosine 1 for n = 1, 2) and shares "a" with reference 2 (n = 1: 1 / sqrt 2)
    exact = 10 / 4 * (2 + 1 / math.sqrt(2)) / 2
    torch.testing.assert_close(reward(["A a b.", "a b"], batch), torch.tensor([want, exact]))
