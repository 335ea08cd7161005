"""SPICE's scene graphs and F-scores, hand-computed, and the SpiceScorer reward API."""

from __future__ import annotations

import math

import pytest

from rlcap.errors import DataError
from rlcap.metrics.spice.graph import SUBSETS, build_graph, evaluate
from rlcap.metrics.spice.scorer import _ReferenceSet
from rlcap.metrics.spice.wordnet import meteor_wordnet


@pytest.fixture(scope="module")
def wordnet():
    return meteor_wordnet()


def _labels(tuples):
    return sorted(tuple(c.label() for c in t) for t in tuples)


def test_wordnet_tables_from_the_meteor_jar(wordnet):
    assert len(wordnet.synsets) == 147_306
    assert wordnet.concept_synsets("car") & wordnet.concept_synsets("automobile")
    assert wordnet.concept_synsets("cars") == wordnet.concept_synsets("car") | wordnet.synsets.get("cars", frozenset())
    assert wordnet.lemma("riding", "VBG") == "ride"  # not spaCy's "rid"
    assert wordnet.lemma("rode", "VBD") == "ride"
    assert wordnet.lemma("men", "NNS") == "man"
    assert wordnet.lemma("glasses", "NNS") == "glass"
    assert wordnet.lemma("pants", "NNS") == "pants"
    assert wordnet.lemma("is", "VBZ") == "be"


def test_references_merge_into_one_graph(wordnet):
    """"sofa" joins the "couch" node (a shared synset), and its attribute follows it."""
    refs = build_graph([[("dog",), ("couch",), ("dog", "brown"), ("dog", "couch", "on")],
                        [("dog",), ("sofa",), ("sofa", "red")]], wordnet)  # fmt: skip
    assert _labels(refs.tuples()) == [("couch/sofa",), ("couch/sofa", "red"), ("dog",), ("dog", "brown"),
                                      ("dog", "on", "couch/sofa")]  # fmt: skip


def test_hand_computed_f_with_a_merged_reference_node(wordnet):
    refs = build_graph([[("dog",), ("couch",), ("dog", "brown"), ("dog", "couch", "on")],
                        [("dog",), ("sofa",), ("sofa", "red")]], wordnet).tuples()  # fmt: skip
    cand = build_graph([[("dog", "brown"), ("dog", "sofa", "on"), ("dog",), ("sofa",)]], wordnet).tuples()
    # 4 candidate tuples, all matched; 5 reference tuples: P = 1, R = 4/5, F = 8/9.
    result = evaluate(cand, refs, allow_nan=False)
    assert (result.tp, result.fp, result.fn) == (4, 0, 1)
    assert result.f == pytest.approx(8 / 9)
    assert _ReferenceSet(refs).f_score(cand) == pytest.approx(8 / 9)


def test_hand_computed_f_with_synonym_matches(wordnet):
    refs = build_graph([[("car",), ("car", "red"), ("street",), ("car", "street", "on")]], wordnet).tuples()
    cand = build_graph([[("automobile",), ("automobile", "crimson"), ("automobile", "blue")]], wordnet).tuples()
    # automobile ~ car and crimson ~ red share synsets; blue matches nothing: P = 2/3, R = 2/4, F = 4/7.
    result = evaluate(cand, refs, allow_nan=False)
    assert (result.tp, result.fp, result.fn) == (2, 1, 2)
    assert (result.precision, result.recall, result.f) == pytest.approx((2 / 3, 1 / 2, 4 / 7))
    assert _ReferenceSet(refs).f_score(cand) == pytest.approx(4 / 7)
    subsets = {name: evaluate([t for t in cand if keep(t)], [t for t in refs if keep(t)], allow_nan=True)
               for name, keep in SUBSETS.items()}  # fmt: skip
    assert subsets["Object"].f == pytest.approx(2 / 3)  # P = 1/1, R = 1/2
    assert subsets["Attribute"].f == pytest.approx(2 / 3)  # P = 1/2, R = 1/1
    assert subsets["Color"].f == 0.0  # "crimson" is not among TupleFilter's colours, "blue" matches nothing
    assert subsets["Relation"].f == 0.0  # P = 0/0 read as 0, R = 0/1
    assert math.isnan(subsets["Cardinality"].f)  # no reference tuple of the subset


def test_no_candidate_tuple_scores_zero(wordnet):
    refs = build_graph([[("dog",)]], wordnet).tuples()
    assert evaluate([], refs, allow_nan=False).f == 0.0
    assert _ReferenceSet(refs).f_score([]) == 0.0


@pytest.fixture(scope="module")
def scorer():
    pytest.importorskip("spacy")
    from rlcap.metrics.spice import SpiceScorer

    return SpiceScorer({"1": ["A brown dog is lying on a couch.", "A dog on a sofa."],
                        "2": ["Two men riding horses on a beach.", "People ride horses near the ocean."]})


class TestSpiceScorer:

    def test_scores_per_caption_with_repeated_ids(self, scorer):
        scores = scorer.score(["a brown dog on a sofa", "a dog", "two men on a beach", "a brown dog on a sofa"],
                              ["1", "1", "2", "1"])  # fmt: skip
        assert scores[0] == scores[3] > scores[1] > 0
        assert scores[2] > 0
        assert scorer.score(["a cat"], ["2"]) == [0.0]

    def test_candidates_are_prepared_as_pycocoevalcap_does(self, scorer):
        """Lower case, PTB tokens, punctuation removed before parsing: these are one caption."""
        assert scorer.score(["A brown dog, on a SOFA."], ["1"]) == scorer.score(["a brown dog on a sofa"], ["1"])

    def test_cached_parse_is_reused(self, scorer):
        scorer.score(["a black cat on a couch"], ["1"])
        parsed = scorer._graphs["a black cat on a couch"]
        scorer.score(["a black cat on a couch"], ["2"])
        assert scorer._graphs["a black cat on a couch"] is parsed

    def test_detailed_report_has_spice_subsets(self, scorer):
        report = scorer.detailed("a brown dog on a sofa", "1")
        assert set(report) == {"All", "Object", "Attribute", "Relation", "Cardinality", "Color", "Size"}
        assert report["All"].f == pytest.approx(scorer.score(["a brown dog on a sofa"], ["1"])[0])

    def test_unknown_image_and_length_mismatch_raise(self, scorer):
        with pytest.raises(DataError, match="'9'"):
            scorer.score(["a dog"], ["9"])
        with pytest.raises(DataError, match="2 candidates but 1 image ids"):
            scorer.score(["a dog", "a cat"], ["1"])

    def test_compute_score_is_the_mean_per_image(self, scorer):
        from rlcap.metrics.spice import compute_score

        gts = {1: ["A brown dog is lying on a couch.", "A dog on a sofa."], 2: ["A cat on a bed."]}
        res = {1: ["a brown dog on a sofa"], 2: ["a cat"]}
        mean, per = compute_score(gts, res, scorer.parser)
        assert mean == pytest.approx(sum(per) / 2)
        assert per[0] == pytest.approx(scorer.score(["a brown dog on a sofa"], ["1"])[0])
