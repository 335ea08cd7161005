"""The template share (rlcap.metrics.diversity.template, the `Template` metric): the share of captions that hold the
corpus's most frequent 4-gram, counted by hand."""

from __future__ import annotations

import pytest

from rlcap.metrics import score_captions
from rlcap.metrics.diversity import template

CAPTIONS = {
    "1": ["a red ball to the right of a box"],
    "2": ["a dog to the right of a cat"],
    "3": ["a man riding a horse on the beach"],
    "4": ["two cats"],
}


def test_the_most_held_4_gram_and_its_share_by_hand():
    words = [c.split() for p in CAPTIONS.values() for c in p]
    # "to the right of" and "the right of a" are each in 2 of the 4 captions: the tie goes to the first sorted
    assert template(words) == (("the", "right", "of", "a"), 0.5)
    assert template([["a", "b"], ["c"]]) == (None, 0.0)  # no caption of 4 words
    # a 4-gram repeated inside one caption counts once for it
    assert template([["x", "y", "z", "w", "x", "y", "z", "w"], ["p", "q", "r", "s"]])[1] == 0.5


def test_the_template_metric_corpus_and_per_image():
    refs = {i: ["a thing"] for i in CAPTIONS}
    result = score_captions(refs, CAPTIONS, ["Template"])
    assert result.corpus["Template"] == pytest.approx(0.5)
    assert [result.per_image[i]["Template"] for i in CAPTIONS] == [1.0, 1.0, 0.0, 0.0]
    # several captions an image: the per-image value is the share of its captions that hold the template
    several = {"1": ["on the left of it", "on the left of the box", "a box"], "2": ["on the left of a cat"]}
    result = score_captions({i: ["x"] for i in several}, several, ["Template"])
    assert result.corpus["Template"] == pytest.approx(3 / 4)
    assert result.per_image["1"]["Template"] == pytest.approx(2 / 3) and result.per_image["2"]["Template"] == 1.0
