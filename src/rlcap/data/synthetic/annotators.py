"""Five simulated annotators who caption a scene, each in a style of their own.

=====  ==========  ===================================================================
name   style       example
=====  ==========  ===================================================================
A      terse       "A big red circle."  (the salient object only)
B      counting    "two red circles, a blue square and a small green star"
C      spatial     "A red circle to the left of a blue square."
D      paraphrase  "there is a violet box with two other shapes" (synonyms, word order)
E      scene       "A striped red triangle on a grey background." (background, texture)
=====  ==========  ===================================================================

Every statement is true of the scene (counts, relations, colours); the annotators differ in
what they mention, in the words they choose and in word order, as people do. D and E sometimes
fall back on a generic description ("some colorful shapes on a white background"), so many
images share a caption while the details that tell images apart must still be seen.

Those are the captions of version 1 (``rlcap data shapes --captions 1``). Their consensus is the
salient object alone: A names nothing else, and the best caption under CIDEr-D was three words
("a red star"), which SCST found. In version 2 (the default) A, D and E name the second object too
(A and D with where it is), so the words the five annotators share describe two objects and their
relation, and a caption with more true detail earns more CIDEr-D:

=====  ==========  ===================================================================
A      terse       "A big red circle above a blue square." ("... in the top left corner" alone)
D      paraphrase  "there is a violet box next to a green disc" (synonyms, word order)
E      scene       "A striped red triangle left of a blue circle on a grey background."
=====  ==========  ===================================================================
"""

from __future__ import annotations

import random
from collections.abc import Callable

from rlcap.data.synthetic.captions import (
    COLOUR_WORDS, NUMBER_WORDS, STYLES, Caption, Style, background_phrase, group_objects,
    humanize, join_list, noun_phrase, others_phrase, plural, position_phrase, relation_phrase,
    tokenize_caption,
)
from rlcap.data.synthetic.scenes import Scene, SceneObject

Annotator = Callable[[Scene, Style, random.Random], str]


def terse(scene: Scene, style: Style, rng: random.Random) -> str:
    """A: the salient object only, e.g. 'a big red circle'."""
    text = noun_phrase(scene.objects[:1], style, rng)
    if len(scene.objects) > 1 and rng.random() < 0.1:
        text += " and other shapes"
    return text


def counting(scene: Scene, style: Style, rng: random.Random) -> str:
    """B: every object, identical ones counted: 'two red circles and a blue square'."""
    groups = group_objects(scene)
    text = join_list([noun_phrase(g, style, rng) for g in groups])
    u = rng.random()
    if u < 0.2:
        return ("there is " if len(groups[0]) == 1 else "there are ") + text
    if u < 0.3:
        return f"{rng.choice(('a picture', 'an image'))} of {text}"
    return text


def spatial(scene: Scene, style: Style, rng: random.Random) -> str:
    """C: the salient object relative to the next one ('a red circle above a blue square')."""
    objs = scene.objects
    if len(objs) == 1:
        return f"{noun_phrase(objs, style, rng)} {position_phrase(objs[0], rng)}"
    a, b = (objs[1], objs[0]) if rng.random() < 0.3 else (objs[0], objs[1])
    second = _second_object(a, b, style, rng)
    verb = rng.choices(("", "is ", "sits "), weights=(6, 3, 1))[0]
    text = f"{noun_phrase([a], style, rng)} {verb}{relation_phrase(a, b, rng, 0.75)} {second}"
    if rng.random() < 0.2:
        text = rng.choice(("in this picture ", "in this image ", "here ")) + text
    if len(objs) >= 3:
        u = rng.random()
        if u < 0.45:
            c = objs[2]
            text += f" and {relation_phrase(a, c, rng, 0.75)} {noun_phrase([c], style, rng)}"
        elif u < 0.75:
            text += f" with {others_phrase(len(objs) - 2, rng)}"
    return text


def _second_object(a: SceneObject, b: SceneObject, style: Style, rng: random.Random) -> str:
    """``b`` named after ``a``: "another circle", not "a red circle left of a red circle"."""
    second = noun_phrase([b], style, rng)
    if (a.shape, a.colour) == (b.shape, b.colour):
        second = "another " + second.split(" ", 1)[1]
    return second


def _generic(scene: Scene, rng: random.Random) -> str:
    n = len(scene.objects)
    if n == 1:
        colour = rng.choice(COLOUR_WORDS[scene.objects[0].colour])
        return rng.choice((f"a single {colour} shape", f"one {colour} shape", "a single shape"))
    return rng.choice(("some colorful shapes", "a few shapes", f"{NUMBER_WORDS[n]} shapes",
                       f"{NUMBER_WORDS[n]} colorful shapes", "some geometric shapes"))


def paraphrase(scene: Scene, style: Style, rng: random.Random) -> str:
    """D: synonyms and other word orders ('there is a violet box', 'a circle that is red')."""
    if rng.random() < 0.15:
        return _generic(scene, rng)
    text = _paraphrase_body(scene, style, rng)
    if rng.random() < 0.25:
        return rng.choice(("i see ", "this shows ", "looks like ")) + text.removeprefix("there is ")
    return text


def _paraphrase_body(scene: Scene, style: Style, rng: random.Random) -> str:
    objs, n = scene.objects, len(scene.objects)
    u = rng.random()
    if u < 0.3:
        text = "there is " + noun_phrase(objs[:1], style, rng)
    elif u < 0.55:
        colour = rng.choice(COLOUR_WORDS[objs[0].colour])
        text = f"{noun_phrase(objs[:1], style, rng, colour=False)} that is {colour}"
    elif u < 0.78 and n >= 2:
        near = rng.choice(("next to", "beside", "near"))
        return f"{noun_phrase(objs[:1], style, rng)} {near} {noun_phrase(objs[1:2], style, rng)}"
    elif n >= 2:
        return f"{NUMBER_WORDS[n]} shapes including {noun_phrase(objs[:1], style, rng)}"
    else:
        return "just " + noun_phrase(objs, style, rng)
    if n >= 2 and rng.random() < 0.6:
        text += rng.choice((" with ", " and ")) + others_phrase(n - 1, rng)
    return text


def scene_detail(scene: Scene, style: Style, rng: random.Random) -> str:
    """E: background and textures ('a striped red triangle on a grey background')."""
    objs, n = scene.objects, len(scene.objects)
    background = background_phrase(scene, style, rng)
    if rng.random() < 0.12:
        what = f"{NUMBER_WORDS[n]} {plural(n, 'shape', 'shapes')}" if rng.random() < 0.5 \
            else "colorful shapes"
        return f"{what} {background}"
    text = noun_phrase(objs[:1], style, rng)
    textured = [o for o in objs[1:] if o.texture]
    if textured and not objs[0].texture and rng.random() < 0.8:
        text += " and " + noun_phrase(textured[:1], style, rng)
        rest = n - 2
    else:
        rest = n - 1
    if rest and rng.random() < 0.6:
        text += rng.choice((" and ", " with ")) + others_phrase(rest, rng)
    return f"{text} {background}"


def _two_objects(scene: Scene, style: Style, rng: random.Random, near: bool = False) -> str:
    """The salient object and where the next one is ('a red circle above a blue square'); ``near``:
    in D's looser words ('next to', 'beside', 'near'). One object: where it is in the picture."""
    objs = scene.objects
    first = noun_phrase(objs[:1], style, rng)
    if len(objs) == 1:
        return f"{first} {position_phrase(objs[0], rng)}"
    a, b = objs[0], objs[1]
    second = _second_object(a, b, style, rng)
    where = rng.choice(("next to", "beside", "near")) if near else relation_phrase(a, b, rng, 0.8)
    return f"{first} {where} {second}"


def terse_v2(scene: Scene, style: Style, rng: random.Random) -> str:
    """A (version 2): the salient object and the next one, placed: 'a big red circle above a blue square'."""
    return _two_objects(scene, style, rng)


def paraphrase_v2(scene: Scene, style: Style, rng: random.Random) -> str:
    """D (version 2): synonyms and other word orders, naming the two main objects."""
    objs, n = scene.objects, len(scene.objects)
    if rng.random() < 0.05:
        return _generic(scene, rng)
    u = rng.random()
    if n >= 2 and u < 0.2:
        first_two = [objs[:2]] if (objs[0].shape, objs[0].colour) == (objs[1].shape, objs[1].colour) else [[o] for o in objs[:2]]
        text = f"{NUMBER_WORDS[n]} shapes including {join_list([noun_phrase(g, style, rng) for g in first_two])}"
    elif u < 0.5:
        text = "there is " + _two_objects(scene, style, rng, near=True)
    else:
        text = _two_objects(scene, style, rng, near=True)
    if rng.random() < 0.2:
        return rng.choice(("i see ", "this shows ")) + text.removeprefix("there is ")
    return text


def scene_detail_v2(scene: Scene, style: Style, rng: random.Random) -> str:
    """E (version 2): the two main objects placed, their textures and the background."""
    n = len(scene.objects)
    text = _two_objects(scene, style, rng)
    if n > 2 and rng.random() < 0.5:
        text += " with " + others_phrase(n - 2, rng)
    return f"{text} {background_phrase(scene, style, rng)}"


# name -> annotator, per captions version. Each image gets one caption from each, in a shuffled order.
ANNOTATOR_VERSIONS: dict[int, dict[str, Annotator]] = {
    1: {"A": terse, "B": counting, "C": spatial, "D": paraphrase, "E": scene_detail},
    2: {"A": terse_v2, "B": counting, "C": spatial, "D": paraphrase_v2, "E": scene_detail_v2},
}
CAPTIONS_VERSION = 2  # the default
ANNOTATORS = ANNOTATOR_VERSIONS[CAPTIONS_VERSION]


def caption_scene(scene: Scene, rng: random.Random, version: int = CAPTIONS_VERSION) -> list[Caption]:
    """One caption per annotator of ``version``, in a random order drawn from ``rng``."""
    captions = []
    for name, annotate in ANNOTATOR_VERSIONS[version].items():
        raw = humanize(annotate(scene, STYLES[name], rng), STYLES[name], rng)
        captions.append(Caption(name, raw, tokenize_caption(raw)))
    rng.shuffle(captions)
    return captions
