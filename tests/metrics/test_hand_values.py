"""Each metric on tiny examples, with the expected numbers worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlcap.metrics.bleu import bleu, bleu_stats, sentence_bleu
from rlcap.metrics.cider import cider_d
from rlcap.metrics.diversity import distinct_n, mbleu4, novelty, self_bleu, vocabulary_size
from rlcap.metrics.retrieval import retrieval_metrics
from rlcap.metrics.rouge import lcs_length, rouge_l
from rlcap.metrics.spider import spider


def test_bleu_brevity_penalty():
    # "a b c d" vs "a b c d e": every n-gram matches (4/4, 3/3, 2/2, 1/1); testlen 4 < reflen 5,
    # so BP = exp(1 - 5/4) = exp(-0.25) = 0.7788007830714049 for every order.
    corpus, per = bleu([["a", "b", "c", "d"]], [[["a", "b", "c", "d", "e"]]])
    assert corpus == pytest.approx([0.7788007830714049] * 4, rel=1e-8)
    assert per[0] == pytest.approx(corpus, rel=1e-12)


def test_bleu_clipping():
    # "a a b" vs "a b b": unigrams clipped a:min(2,1)=1, b:min(1,2)=1 -> 2/3;
    # bigrams "a a","a b" vs "a b","b b" -> 1/2. Equal lengths, no BP.
    # Bleu_1 = 2/3, Bleu_2 = sqrt(2/3 * 1/2) = 0.5773502691896258.
    scores = sentence_bleu(bleu_stats(["a", "a", "b"], [["a", "b", "b"]]))
    assert scores[0] == pytest.approx(2 / 3, rel=1e-8)
    assert scores[1] == pytest.approx(0.5773502691896258, rel=1e-8)


def test_bleu_closest_reference_length():
    # candidate of 3 words, references of 2 and 4 words: both 1 away, the shorter (2) is used
    assert bleu_stats(["a", "b", "c"], [["a", "b"], ["a", "b", "c", "d"]]).reflen == 2


def test_rouge_l():
    # "a b c" vs "a c d e": LCS "a c" = 2; P = 2/3, R = 2/4.
    # F = (1 + 1.44) P R / (R + 1.44 P) = 2.44 * (1/3) / (0.5 + 0.96) = 0.5570776255707762
    assert lcs_length(["a", "c", "d", "e"], ["a", "b", "c"]) == 2
    assert rouge_l(["a", "b", "c"], [["a", "c", "d", "e"]]) == pytest.approx(0.5570776255707762, rel=1e-12)
    assert rouge_l([], [["a"]]) == 0.0


def test_lcs_matches_dynamic_programming():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = list(rng.choice(list("abcd"), rng.integers(0, 12)))
        b = list(rng.choice(list("abcd"), rng.integers(0, 12)))
        table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
        for i in range(1, len(a) + 1):
            for j in range(1, len(b) + 1):
                same = a[i - 1] == b[j - 1]
                table[i][j] = table[i - 1][j - 1] + 1 if same else max(table[i - 1][j], table[i][j - 1])
        assert lcs_length(a, b) == table[-1][-1]


REFS = [[["a", "b"]], [["c", "d"]]]  # two images, one reference each: log N = ln 2, every df = 1


def test_cider_d_exact_match():
    # idf of every reference n-gram = ln2 - ln1 = ln2. "a b" vs "a b": cosine 1 for n=1 and
    # n=2, nothing for n=3,4; same bigram count (1), penalty 1. 10 * (1 + 1 + 0 + 0) / 4 = 5.
    assert cider_d([["a", "b"], ["c", "d"]], REFS)[0] == pytest.approx(5.0, rel=1e-12)


def test_cider_d_length_penalty():
    # "a": unigram vector (ln2), norm ln2; reference (ln2, ln2), norm sqrt(2) ln2: cosine 1/sqrt(2).
    # Bigram counts 0 vs 1: penalty exp(-1/72). 10 * (1/sqrt(2)) / 4 * exp(-1/72) = 1.7433816...
    expected = 10 * 2**-0.5 / 4 * math.exp(-1 / 72)
    assert cider_d([["a"], ["c", "d"]], REFS)[0] == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(1.74338, abs=1e-5)


def test_cider_d_clipping():
    # "a a": tf-idf a = 2 ln2 (norm 2 ln2); reference a = ln2, b = ln2 (norm sqrt(2) ln2).
    # clipped dot = min(2 ln2, ln2) * ln2 = ln2^2 -> cosine 1 / (2 sqrt 2) = 0.35355339.
    # Bigram "a a" is not in the reference -> 0. Same bigram count. 10 * 0.35355339 / 4.
    assert cider_d([["a", "a"], ["c", "d"]], REFS)[0] == pytest.approx(0.8838834764831844, rel=1e-12)


def test_cider_d_empty_candidate_scores_zero():
    assert cider_d([[], ["c", "d"]], REFS)[0] == 0.0


def test_div_n():
    # words: 3 + 2 = 5; unigrams {a, b, c} = 3 -> 0.6; bigrams {a b, b a, a c} = 3 -> 3/5 = 0.6
    captions = [["a", "b", "a"], ["a", "c"]]
    assert distinct_n(captions, 1) == pytest.approx(0.6)
    assert distinct_n(captions, 2) == pytest.approx(0.6)
    assert distinct_n([[]], 1) == 0.0


def test_mbleu4_of_identical_captions_is_one():
    # each caption finds itself among the others: every precision 1, no brevity penalty
    caption = ["a", "dog", "on", "a", "mat"]
    assert mbleu4([caption, caption, caption]) == pytest.approx(1.0, rel=1e-8)


def test_self_bleu_matches_brute_force():
    rng = np.random.default_rng(1)
    captions = [list(rng.choice(list("abcde"), rng.integers(1, 9))) for _ in range(30)]
    brute = np.mean(
        [sentence_bleu(bleu_stats(c, captions[:i] + captions[i + 1 :]))[3] for i, c in enumerate(captions)]
    )
    assert self_bleu(captions) == pytest.approx(brute, rel=1e-12)


def test_vocabulary_and_novelty():
    captions = [["a", "dog"], ["a", "cat"]]
    assert vocabulary_size(captions) == 3
    # "a dog" was seen in training, "a cat" was not -> 1/2
    assert novelty(captions, [["a", "dog"], ["the", "cat"]]) == 0.5


def test_retrieval_metrics():
    # images x captions; captions 0, 1 belong to image 0 and caption 2 to image 1
    sim = np.array([[0.9, 0.1, 0.8], [0.2, 0.5, 0.3]])
    out = retrieval_metrics(sim, np.array([0, 0, 1]))
    # t2i ranks: c0 -> 1 (0.9 > 0.2); c1 -> 2 (0.5 > 0.1); c2 -> 2 (0.8 > 0.3)
    assert out["t2i_R@1"] == pytest.approx(100 / 3)
    assert out["t2i_R@5"] == 100.0
    assert out["t2i_MedR"] == 2.0
    assert out["t2i_MRR"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    # i2t: image 0's best caption c0 ranks 1; image 1's caption c2 (0.3) is beaten by c1 (0.5): 2
    assert out["i2t_R@1"] == 50.0
    assert out["i2t_MedR"] == 1.5
    assert out["i2t_MRR"] == pytest.approx(0.75)


def test_spider_is_the_mean():
    assert spider(1.0, 0.2) == pytest.approx(0.6)
