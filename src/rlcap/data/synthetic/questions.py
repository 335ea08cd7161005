"""Multiple-choice questions about a shapes scene, from its ground truth: what the ``qa_utility`` reward and the
QA-acc metric ask a text-only reader about a caption ([Xing26]'s utility, on pictures whose answers are known).

Five kinds, each asked only where a complete description of the scene answers it and where the references
rlcap writes state the answer (tests/data/test_shapes_questions.py checks them against the references). Two sets,
each its own file: ``main`` (``questions.json``) asks the colour and kind of the two main objects, as the table
says; ``every`` (``questions_every.json``) asks them of every object (the counting annotator names every one), so
that a caption earns by naming the third and fourth shape too, as [Xing26]'s questions cover the whole picture;
``main_every`` (``questions_main_every.json``) asks the main set's questions and then the every set's, the same
questions as in those two files, so that the two main objects' colour and kind, the count and the relation weigh
twice and every other object's once: a caption earns by naming every shape, and most by the two that the
references and the main questions name first. ``pair_every`` (``questions_pair_every.json``) is ``main_every``
with the count asked once: asked twice, the count phrase ("with two other shapes") earns as much as naming a third
shape and is the surer bet (docs/RL.md, "Where the goals stand").

==========  ==========================================================  ======================================
kind        question (options: the right one and distractors)          asked about
==========  ==========================================================  ======================================
colour      "What colour is the circle?" (red / blue / ...)             the two main objects, when no other
                                                                        object of that shape has another colour
kind        "What shape is the red object?" (circle / star / ...)       the two main objects, when no other
                                                                        object of that colour has another shape
count       "How many shapes are there?" (one .. four)                  every scene
position    "Where is the red circle?" (top left / middle / ...)        a scene of one object (the references
                                                                        place only a lone object)
relation    "Where is the red circle relative to the blue square?"      the two main objects, when each is the
            (left of / right of / above / below)                        only one of its shape and colour and one
                                                                        axis dominates
==========  ==========================================================  ======================================

Distractors come from the same attribute's values, drawn with a generator seeded by (seed, image id), so a
scene's questions are the same in every process. Options are in a drawn order; the reward shuffles them again.

A caption that does not answer a question (:func:`unanswering_caption`) is what a reader learns to abstain on
([Xing26]'s "Can not answer based on the caption", ``rlcap data reader --abstain``): a reference written for the
scene with the asked objects taken out. "What colour is the circle?" loses every circle, "What shape is the red
object?" every red object, a relation question one of its pair (drawn), a position question its lone object; a
count question every object, since a scene with fewer objects states another count. A scene left empty has the
empty caption.
"""

from __future__ import annotations

import random
from pathlib import Path

from rlcap.data.qa import Question, write_qa
from rlcap.data.synthetic.annotators import caption_scene
from rlcap.data.synthetic.captions import NUMBER_WORDS, RELATION_WORDS, with_article
from rlcap.data.synthetic.scenes import COLOURS, SHAPES, Scene, SceneObject, region, relation

QA_FILE = "questions.json"
# which objects' colour and kind are asked (main_every: the main set's questions, then the every set's; pair_every:
# the main set's without the count, then the every set's)
QUESTION_SETS = {"main": QA_FILE, "every": "questions_every.json", "main_every": "questions_main_every.json",
                 "pair_every": "questions_pair_every.json"}
N_OPTIONS = 4  # the right option and three distractors (the count and relation questions have four values)
REGIONS = {("top", "left"): "top left", ("top", "right"): "top right", ("bottom", "left"): "bottom left",
           ("bottom", "right"): "bottom right", ("top", "middle"): "top", ("bottom", "middle"): "bottom",
           ("middle", "left"): "left", ("middle", "right"): "right", ("middle", "middle"): "middle"}
RELATIONS = {"left": "left of", "right": "right of", "above": "above", "below": "below"}


def _name(obj: SceneObject) -> str:
    return f"{obj.colour} {obj.shape}"


def _choice(right: str, values: list[str], rng: random.Random, kind: str, question: str) -> Question:
    """``right`` among ``N_OPTIONS - 1`` other ``values``, in a drawn order."""
    options = [right, *rng.sample([v for v in values if v != right], N_OPTIONS - 1)]
    rng.shuffle(options)
    return Question(question, tuple(options), options.index(right), kind)


def scene_questions(scene: Scene, rng: random.Random, cover: str = "main") -> list[Question]:
    """The questions a complete description of ``scene`` answers (see the module's table); ``cover``: the colour
    and kind of the two main objects ("main"), of every object ("every"), both sets' questions ("main_every":
    each set's drawn from ``rng`` as it stands, as each set's own file draws them), or both with the count asked
    once ("pair_every": the main set's count question left out)."""
    if cover not in QUESTION_SETS:
        raise ValueError(f"question set {cover!r}: expected one of {', '.join(QUESTION_SETS)}")
    if cover in ("main_every", "pair_every"):
        state = rng.getstate()
        main = scene_questions(scene, rng, "main")
        rng.setstate(state)
        main = [q for q in main if cover == "main_every" or q.kind != "count"]
        return main + scene_questions(scene, rng, "every")
    objs = scene.objects
    out: list[Question] = []
    for obj in objs[:2] if cover == "main" else objs:
        if all(o.colour == obj.colour for o in objs if o.shape == obj.shape):
            out.append(_choice(obj.colour, list(COLOURS), rng, "colour", f"What colour is the {obj.shape}?"))
        if all(o.shape == obj.shape for o in objs if o.colour == obj.colour):
            out.append(_choice(obj.shape, list(SHAPES), rng, "kind", f"What shape is the {obj.colour} object?"))
    counts = [NUMBER_WORDS[n] for n in sorted(NUMBER_WORDS)]
    out.append(_choice(NUMBER_WORDS[len(objs)], counts, rng, "count", "How many shapes are there?"))
    if len(objs) == 1:
        out.append(_choice(REGIONS[region(objs[0])], list(REGIONS.values()), rng, "position",
                           f"Where is the {_name(objs[0])}?"))
    elif _relation_asked(objs):
        a, b = objs[0], objs[1]
        out.append(_choice(RELATIONS[relation(a, b)], list(RELATIONS.values()), rng, "relation",
                           f"Where is the {_name(a)} relative to the {_name(b)}?"))
    seen: set[str] = set()
    return [q for q in out if not (q.question in seen or seen.add(q.question))]  # (two circles: one question)


def _relation_asked(objs: tuple[SceneObject, ...]) -> bool:
    """Whether the two main objects are each the only one of its shape and colour and stand on one axis."""
    names = [_name(o) for o in objs]
    a, b = objs[0], objs[1]
    return names.count(_name(a)) == 1 and names.count(_name(b)) == 1 and relation(a, b) in RELATIONS


def complete_description(scene: Scene) -> str:
    """A caption that states every answer :func:`scene_questions` asks about, in the references' usual words: the
    count, the two main objects' colours and kinds and how the first stands to the second (a lone object: where it
    is), then the other objects. What a reader can reach from a caption of ``scene``: the ceiling of ``qa_utility``
    and of QA-acc (``make bench-rewards`` reads both readers on these).

    Example: "three shapes: a red circle to the left of a blue square, and a green star"."""
    objs = scene.objects
    count = f"{NUMBER_WORDS[len(objs)]} shape{'s' if len(objs) > 1 else ''}"
    return f"{count}: {main_pair(scene)}" + "".join(f", and {with_article(_name(o))}" for o in objs[2:])


def main_pair(scene: Scene) -> str:
    """The two main objects and how the first stands to the second, in the references' usual words ("a red circle
    to the left of a blue square"); a lone object: where it is ("a red star in the left"). What the questions
    about colour, kind, relation and position ask, without the count and the other objects."""
    objs = scene.objects
    first = with_article(_name(objs[0]))
    if len(objs) == 1:
        return f"{first} in the {REGIONS[region(objs[0])]}"
    return f"{first} {RELATION_WORDS[relation(objs[0], objs[1])][0]} {with_article(_name(objs[1]))}"


def unanswered_scene(scene: Scene, q: Question, rng: random.Random) -> Scene:
    """``scene`` without the objects ``q`` asks about (the module's last paragraph); ValueError when ``q`` is not
    one of :func:`scene_questions`'s about ``scene``."""
    objs = scene.objects
    if q.kind == "colour":
        keep = [o for o in objs if f"What colour is the {o.shape}?" != q.question]
    elif q.kind == "kind":
        keep = [o for o in objs if f"What shape is the {o.colour} object?" != q.question]
    elif q.kind == "relation" and len(objs) > 1:
        gone = rng.randrange(2)
        keep = [o for k, o in enumerate(objs) if k != gone]
    elif q.kind in ("count", "position"):
        keep = []
    else:
        keep = list(objs)
    if len(keep) == len(objs):
        raise ValueError(f"question {q.question!r} ({q.kind or 'no kind'}) asks about none of the scene's objects")
    return Scene(scene.background, tuple(keep))


def unanswering_caption(scene: Scene, q: Question, rng: random.Random) -> str:
    """A reference of ``scene`` without the objects ``q`` asks about, by a drawn annotator (the empty caption when
    none is left): a caption that does not state ``q``'s answer."""
    rest = unanswered_scene(scene, q, rng)
    return rng.choice(caption_scene(rest, rng)).raw if rest.objects else ""


def scene_negatives(records: list[dict]):
    """For the records of a shapes dataset JSON (each with its ``scene``): a ``negative`` for
    :func:`rlcap.models.hf.build_reader.train_reader`, (rng, image id, question) -> :func:`unanswering_caption`."""
    scenes = {str(r["imgid"]): Scene.from_dict(r["scene"]) for r in records}
    return lambda rng, image_id, q: unanswering_caption(scenes[image_id], q, rng)


def question_rng(seed: int, image_id: str) -> random.Random:
    """The distractors' generator of one image: a string seed, hashed the same on every platform."""
    return random.Random(f"shapes-qa/{seed}/{image_id}")


def dataset_questions(records: list[dict], seed: int, cover: str = "main") -> dict[str, list[Question]]:
    """Image id -> its questions of the set ``cover``, for the records of a shapes dataset JSON (each with its
    ``scene``)."""
    return {str(r["imgid"]): scene_questions(Scene.from_dict(r["scene"]), question_rng(seed, str(r["imgid"])), cover)
            for r in records}


def write_questions(out_dir: str | Path, records: list[dict], seed: int) -> list[Path]:
    """Write each set's file of QUESTION_SETS (rlcap's QA format) for ``records`` into ``out_dir``; their paths."""
    return [write_qa(Path(out_dir) / name, dataset_questions(records, seed, cover))
            for cover, name in QUESTION_SETS.items()]
