"""The shapes scenes' multiple-choice questions: by hand for a drawn scene, and every answer stated by the
references rlcap writes."""

from __future__ import annotations

import random

import pytest

from rlcap.data.synthetic.annotators import caption_scene
from rlcap.data.synthetic.captions import COLOUR_WORDS, NUMBER_WORDS, RELATION_WORDS, SHAPE_WORDS
from rlcap.data.synthetic.questions import (
    RELATIONS, complete_description, main_pair, question_rng, scene_questions, unanswered_scene, unanswering_caption)
from rlcap.data.synthetic.scenes import Scene, SceneObject, sample_scene


def _obj(shape, colour, x, y, size="medium"):
    return SceneObject(shape, colour, size, None, x, y, 0.1)


def test_questions_of_a_scene_by_hand():
    scene = Scene("white", (_obj("circle", "red", 0.2, 0.5, "large"), _obj("square", "blue", 0.8, 0.52),
                            _obj("square", "blue", 0.5, 0.9, "small")))
    qs = scene_questions(scene, random.Random(0))
    asked = {(q.kind, q.question, q.options[q.answer]) for q in qs}
    assert asked == {("colour", "What colour is the circle?", "red"), ("kind", "What shape is the red object?", "circle"),
                     ("colour", "What colour is the square?", "blue"),
                     ("kind", "What shape is the blue object?", "square"),
                     ("count", "How many shapes are there?", "three")}  # no relation: the squares are twins
    assert all(len(q.options) == 4 and len(set(q.options)) == 4 for q in qs)
    alone = scene_questions(Scene("grey", (_obj("star", "green", 0.2, 0.2),)), random.Random(0))
    assert {(q.kind, q.options[q.answer]) for q in alone} == {("colour", "green"), ("kind", "star"),
                                                                ("count", "one"), ("position", "top left")}
    every = scene_questions(Scene("white", (*scene.objects, _obj("star", "green", 0.1, 0.1))), random.Random(0), "every")
    assert {(q.kind, q.question, q.options[q.answer]) for q in every} == asked - {
        ("count", "How many shapes are there?", "three")} | {
        ("colour", "What colour is the star?", "green"), ("kind", "What shape is the green object?", "star"),
        ("count", "How many shapes are there?", "four")}  # and the third and fourth objects' (the squares: one)
    with pytest.raises(ValueError, match="question set 'all'"):
        scene_questions(scene, random.Random(0), "all")  # a set that does not exist is not taken for "every"
    main = scene_questions(Scene("white", (*scene.objects, _obj("star", "green", 0.1, 0.1))), random.Random(0))
    assert not any("star" in q.question or "green" in q.question for q in main)
    pair = scene_questions(Scene("grey", (_obj("star", "green", 0.2, 0.5), _obj("heart", "pink", 0.8, 0.5))),
                           random.Random(0))
    assert [q.options[q.answer] for q in pair if q.kind == "relation"] == ["left of"]


def test_main_every_asks_both_sets_questions_as_their_files_do():
    scene = Scene("white", (_obj("circle", "red", 0.2, 0.5, "large"), _obj("square", "blue", 0.8, 0.52),
                            _obj("star", "green", 0.5, 0.9, "small")))
    main, every, both = (scene_questions(scene, question_rng(0, "7"), cover)
                         for cover in ("main", "every", "main_every"))
    assert both == main + every  # the same distractors in the same order as each set's own file
    assert len(every) > len(main) and sum(q.question == "How many shapes are there?" for q in both) == 2
    twice = {q.question for q in both if sum(r.question == q.question for r in both) == 2}
    assert twice == {q.question for q in main}  # the main objects' questions and the count weigh twice, the star once
    once = scene_questions(scene, question_rng(0, "7"), "pair_every")  # the same with the count asked once
    assert once == [q for q in main if q.kind != "count"] + every
    assert [q.question for q in once].count("How many shapes are there?") == 1 and len(once) == len(both) - 1


def _stated(answer: str, kind: str, refs: list[str]) -> bool:
    text = " ".join(refs).lower()
    if kind == "colour":
        return any(w in text for w in COLOUR_WORDS[answer])
    if kind == "kind":
        return any(w in text for pair in SHAPE_WORDS[answer] for w in pair)
    if kind == "relation":  # (the spatial annotator names either object first)
        opposite = {"left of": "right", "right of": "left", "above": "below", "below": "above"}[answer]
        direction = {v: k for k, v in RELATIONS.items()}[answer]
        return any(w in text for w in RELATION_WORDS[direction] + RELATION_WORDS[opposite])
    if kind == "position":
        return all(part in text for part in answer.split())
    return True  # count: the counting annotator names every object (checked below)


def test_every_answer_is_stated_by_the_references():
    for imgid in range(150):
        scene = sample_scene(random.Random(f"s{imgid}"), 4, True)
        refs = [c.raw for c in caption_scene(scene, random.Random(f"c{imgid}"))]
        for q in scene_questions(scene, question_rng(0, str(imgid)), "every"):  # (main's are a subset)
            assert _stated(q.options[q.answer], q.kind, refs), (q, refs)
        counting = [c.raw.lower() for c in caption_scene(scene, random.Random(f"c{imgid}")) if c.annotator == "B"][0]
        named = sum(1 if part.strip().startswith(("a ", "an ")) else
                    next(n for n, w in NUMBER_WORDS.items() if part.strip().startswith(w + " "))
                    for part in counting.removeprefix("there is ").removeprefix("there are ")
                    .split(" of ", 1)[-1].replace(" and ", ", ").split(", "))
        assert named == len(scene.objects), counting


def test_the_complete_description_states_every_answer():
    scene = Scene("white", (_obj("circle", "red", 0.2, 0.5, "large"), _obj("square", "blue", 0.8, 0.52),
                            _obj("star", "green", 0.5, 0.9, "small")))
    assert complete_description(scene) == "three shapes: a red circle to the left of a blue square, and a green star"
    assert complete_description(Scene("grey", (_obj("heart", "orange", 0.2, 0.2),))) == \
        "one shape: an orange heart in the top left"
    assert main_pair(scene) == "a red circle to the left of a blue square"  # without the count and the star
    assert main_pair(Scene("grey", (_obj("heart", "orange", 0.2, 0.2),))) == "an orange heart in the top left"
    for imgid in range(300):
        scene = sample_scene(random.Random(f"s{imgid}"), 4, True)
        text = complete_description(scene)
        for q in scene_questions(scene, question_rng(0, str(imgid)), "every"):
            assert q.options[q.answer] in text, (q, text)
            if q.kind in ("count", "relation"):  # and no other option of these (a position's "top" is in "top left")
                assert not any(o in text for i, o in enumerate(q.options) if i != q.answer), (q, text)


def test_an_unanswering_caption_describes_the_scene_without_the_asked_objects():
    scene = Scene("white", (_obj("circle", "red", 0.2, 0.5, "large"), _obj("square", "blue", 0.8, 0.52),
                            _obj("circle", "red", 0.5, 0.9, "small")))
    qs = {q.question: q for q in scene_questions(scene, random.Random(0))}
    left = {name: [(o.colour, o.shape) for o in unanswered_scene(scene, q, random.Random(0)).objects]
            for name, q in qs.items()}
    assert left == {"What colour is the circle?": [("blue", "square")],  # both circles go
                    "What shape is the red object?": [("blue", "square")],
                    "What colour is the square?": [("red", "circle"), ("red", "circle")],
                    "What shape is the blue object?": [("red", "circle"), ("red", "circle")],
                    "How many shapes are there?": []}  # any fewer objects would state another count
    pair = Scene("grey", (_obj("star", "green", 0.2, 0.5), _obj("heart", "pink", 0.8, 0.5),
                          _obj("cross", "red", 0.5, 0.1)))
    relation = next(q for q in scene_questions(pair, random.Random(0)) if q.kind == "relation")
    kept = {tuple(o.shape for o in unanswered_scene(pair, relation, random.Random(k)).objects) for k in range(20)}
    assert kept == {("heart", "cross"), ("star", "cross")}  # one of the pair goes, drawn; the others stay
    with pytest.raises(ValueError, match="asks about none of the scene's objects"):
        unanswered_scene(pair, qs["What colour is the circle?"], random.Random(0))
    for imgid in range(150):  # the captions name none of what was asked about
        scene = sample_scene(random.Random(f"s{imgid}"), 4, True)
        for q in scene_questions(scene, question_rng(0, str(imgid)), "every"):
            caption = unanswering_caption(scene, q, random.Random(imgid)).lower()
            if q.kind in ("count", "position") or len(scene.objects) == 1:
                assert caption == "", (q, caption)
            elif q.kind == "colour":  # no word of the asked kind
                assert not _stated(q.question.split()[-1].rstrip("?"), "kind", [caption]), (q, caption)
            elif q.kind == "kind":  # no object of the asked colour (a "pale blue" background may stay)
                colour = q.question.split()[4]
                assert not any(f"{w} {n}" in caption for w in COLOUR_WORDS[colour] for pairs in SHAPE_WORDS.values()
                               for pair in pairs for n in pair), (q, caption)
