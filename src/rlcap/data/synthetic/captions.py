"""The words and phrases of the "shapes" captions, shared by the simulated annotators.

Each concept has its usual word and some synonyms (``SHAPE_WORDS["square"]``: square, box,
block); an annotator's :class:`Style` says how often it mentions sizes and textures and how often
it reaches for a synonym. The annotators themselves are in
:mod:`rlcap.data.synthetic.annotators`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rlcap.data.synthetic.scenes import Scene, SceneObject, region, relation

NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four"}
# Words a concept may be written with; the first is the usual one, the rest are synonyms.
COLOUR_WORDS: dict[str, tuple[str, ...]] = {
    "red": ("red",), "orange": ("orange",), "yellow": ("yellow",), "green": ("green",),
    "blue": ("blue",), "purple": ("purple", "violet"), "pink": ("pink",), "brown": ("brown",),
}
SHAPE_WORDS: dict[str, tuple[tuple[str, str], ...]] = {  # (singular, plural)
    "circle": (("circle", "circles"), ("disc", "discs"), ("round shape", "round shapes")),
    "square": (("square", "squares"), ("box", "boxes"), ("block", "blocks")),
    "triangle": (("triangle", "triangles"),),
    "star": (("star", "stars"),),
    "diamond": (("diamond", "diamonds"), ("rhombus", "rhombuses")),
    "cross": (("cross", "crosses"), ("plus sign", "plus signs")),
    "heart": (("heart", "hearts"),),
    "crescent": (("crescent", "crescents"), ("moon", "moons"), ("crescent moon", "crescent moons")),
}
SIZE_WORDS: dict[str, tuple[str, ...]] = {
    "small": ("small", "little", "tiny"), "medium": (), "large": ("large", "big"),
}
TEXTURE_WORDS: dict[str, tuple[str, ...]] = {
    "striped": ("striped",), "dotted": ("dotted", "spotted", "polka dot"),
    "checkered": ("checkered", "checked"),
}
BACKGROUND_WORDS: dict[str, tuple[str, ...]] = {
    "white": ("white",), "grey": ("grey", "gray"), "black": ("black", "dark"),
    "beige": ("beige", "cream"), "light blue": ("light blue", "pale blue"),
    "light green": ("light green", "pale green"),
}
RELATION_WORDS: dict[str, tuple[str, ...]] = {
    "left": ("to the left of", "left of", "on the left of"),
    "right": ("to the right of", "right of", "on the right of"),
    "above": ("above", "over"),
    "below": ("below", "under", "beneath"),
    "diagonal": ("next to", "beside", "near"),
}


@dataclass(frozen=True)
class Style:
    """How often an annotator mentions each detail and reaches for a less usual word."""

    size_prob: float = 0.5
    texture_prob: float = 0.3
    synonym_prob: float = 0.1
    capital_prob: float = 0.5
    period_prob: float = 0.3
    large_word: str = "large"


@dataclass(frozen=True)
class Caption:
    """One reference caption: which annotator wrote it, the raw text and its tokens."""

    annotator: str
    raw: str
    tokens: list[str]


STYLES = {
    "A": Style(size_prob=0.6, texture_prob=0.2, capital_prob=0.7, period_prob=0.5,
               large_word="big"),
    "B": Style(size_prob=0.5, texture_prob=0.2, synonym_prob=0.2, capital_prob=0.3,
               period_prob=0.1),
    "C": Style(size_prob=0.25, texture_prob=0.1, synonym_prob=0.2, capital_prob=0.8,
               period_prob=0.8),
    "D": Style(size_prob=0.4, texture_prob=0.2, synonym_prob=0.6, capital_prob=0.2,
               period_prob=0.0, large_word="big"),
    "E": Style(size_prob=0.3, texture_prob=0.9, capital_prob=0.6, period_prob=0.6),
}


def tokenize_caption(raw: str) -> list[str]:
    """Lower-case words without punctuation (the captions contain no digits or hyphens)."""
    return re.findall(r"[a-z]+", raw.lower())


def _pick(rng: random.Random, words: Sequence, synonym_prob: float):
    """The usual word, or with ``synonym_prob`` one of its synonyms."""
    if len(words) > 1 and rng.random() < synonym_prob:
        return rng.choice(words[1:])
    return words[0]


def with_article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def join_list(parts: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def plural(n: int, word: str, words: str) -> str:
    return word if n == 1 else words


def group_objects(scene: Scene) -> list[list[SceneObject]]:
    """Objects grouped by (shape, colour), groups in order of their most salient member."""
    groups: dict[tuple[str, str], list[SceneObject]] = {}
    for obj in scene.objects:
        groups.setdefault((obj.shape, obj.colour), []).append(obj)
    return list(groups.values())


def noun_phrase(objs: Sequence[SceneObject], style: Style, rng: random.Random,
                colour: bool = True) -> str:
    """'a big striped red circle' or 'two red circles' for objects of one shape and colour."""
    first = objs[0]
    words = []
    sizes = {o.size for o in objs}
    if len(sizes) == 1 and first.size != "medium" and rng.random() < style.size_prob:
        usual = style.large_word if first.size == "large" else "small"
        words.append(_pick(rng, (usual,) + SIZE_WORDS[first.size], style.synonym_prob / 2))
    textures = {o.texture for o in objs}
    if len(textures) == 1 and first.texture and rng.random() < style.texture_prob:
        words.append(_pick(rng, TEXTURE_WORDS[first.texture], style.synonym_prob))
    if colour:
        words.append(_pick(rng, COLOUR_WORDS[first.colour], style.synonym_prob))
    singular, many = _pick(rng, SHAPE_WORDS[first.shape], style.synonym_prob)
    words.append(plural(len(objs), singular, many))
    text = " ".join(words)
    return with_article(text) if len(objs) == 1 else f"{NUMBER_WORDS[len(objs)]} {text}"


def others_phrase(k: int, rng: random.Random) -> str:
    """'another shape' / 'two other shapes' / 'some other shapes' (k >= 1)."""
    noun = rng.choice(("shape", "object")) if rng.random() < 0.3 else "shape"
    if rng.random() < 0.25:
        return f"some other {noun}s"
    return f"another {noun}" if k == 1 else f"{NUMBER_WORDS[k]} other {noun}s"


def position_phrase(obj: SceneObject, rng: random.Random) -> str:
    """Absolute position: 'in the top left corner', 'on the right', 'in the middle'."""
    vertical, horizontal = region(obj)
    if vertical != "middle" and horizontal != "middle":
        if rng.random() < 0.7:
            return f"in the {vertical} {horizontal} corner"
        return f"in the {'upper' if vertical == 'top' else 'lower'} {horizontal}"
    if vertical != "middle":
        return f"{rng.choice(('at', 'toward'))} the {vertical}"
    if horizontal != "middle":
        return f"on the {horizontal}" + (" side" if rng.random() < 0.3 else "")
    return rng.choice(("in the middle", "in the center"))


def relation_phrase(a: SceneObject, b: SceneObject, rng: random.Random, usual: float) -> str:
    """How ``a`` stands to ``b``; the usual wording with probability ``usual``."""
    return _pick(rng, RELATION_WORDS[relation(a, b)], 1.0 - usual)


def background_phrase(scene: Scene, style: Style, rng: random.Random) -> str:
    name = _pick(rng, BACKGROUND_WORDS[scene.background], 0.5)
    return rng.choices((f"on a {name} background", f"against a {name} background",
                        f"on {name}"), weights=(6, 2, 1))[0]


def humanize(text: str, style: Style, rng: random.Random) -> str:
    """Capitalise and end with a period as often as this annotator does."""
    if rng.random() < style.capital_prob:
        text = text[0].upper() + text[1:]
    if rng.random() < style.period_prob:
        text += "."
    return text
