"""The objects of a shapes picture as CHAIR reads them ([Rohrbach18], :mod:`rlcap.metrics.hallucination`).

An *object* here is a kind of shape (circle, star, ...): a caption that names a kind the scene lacks hallucinates
it. Kinds, not kinds with their colours, because CHAIR asks whether a named thing is there at all, and a kind is
what "object" means in [Rohrbach18]'s COCO categories; the colour, the attribute rlcap's captioners get wrong most
(docs/SHAPES.md), is judged apart by Colour-err: a colour word right before a kind the scene holds must name the
colour of one of the scene's objects of that kind ("a red star" where the only star is blue is a colour error,
not a hallucinated star). Both are exact: the scene is the ground truth, and the words are the annotators' own
(:data:`~rlcap.data.synthetic.captions.SHAPE_WORDS`, singular and plural, two-word names like "plus sign" and
"crescent moon" as one object; :data:`~rlcap.data.synthetic.captions.COLOUR_WORDS`, "violet" for purple).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlcap.data.synthetic.captions import COLOUR_WORDS, SHAPE_WORDS
from rlcap.errors import DataError
from rlcap.metrics.hallucination import ObjectTruth, ObjectVocabulary


def shapes_vocabulary() -> ObjectVocabulary:
    """Every word of every kind (singular and plural) -> the kind; every colour word -> its colour."""
    phrases = {tuple(name.split(" ")): kind for kind, pairs in SHAPE_WORDS.items() for pair in pairs
               for name in pair}
    return ObjectVocabulary(phrases, {w: colour for colour, words in COLOUR_WORDS.items() for w in words})


def scene_objects(scene: dict) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """A scene's kinds and its (kind, colour) pairs (``scene``: a record's ``"scene"`` entry)."""
    objs = scene["objects"]
    return frozenset(o["shape"] for o in objs), frozenset((o["shape"], o["colour"]) for o in objs)


_ID_KEYS = ("cocoid", "id", "imgid")  # the first present is the id, as rlcap score and rlcap.data.readers read it


def shapes_truth(images: Sequence[dict], where: str = "dataset") -> ObjectTruth:
    """The truth of a shapes dataset's image entries (``dataset_shapes.json``'s ``images``, each with its
    ``scene``), keyed by image id as a string."""
    objects, pairs = {}, {}
    for k, image in enumerate(images):
        key = next((key for key in _ID_KEYS if key in image), None)
        if key is None or not isinstance(image.get("scene"), dict):
            raise DataError(f"{where}: images[{k}] needs an id ({', '.join(_ID_KEYS)}) and a 'scene' (a shapes "
                            "dataset written by rlcap data shapes)")
        objects[str(image[key])], pairs[str(image[key])] = scene_objects(image["scene"])
    return ObjectTruth(shapes_vocabulary(), objects, pairs, from_references=False)
