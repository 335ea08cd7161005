"""Scenes of the "shapes" benchmark: what is in an image, independent of how it is drawn.

A scene is a background and 1 to ``max_objects`` objects. Each object's shape, colour, size and
texture are drawn independently (attributes compose, so a nearest neighbour rarely matches all of
them), except that a later object copies an earlier one's shape and colour with probability
``DUPLICATE_PROB`` so that counting ("two red circles") occurs often. Positions are normalised to
the unit square (y grows downwards, as in images); objects never overlap, so that counts and
spatial relations are unambiguous.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

SHAPES = ("circle", "square", "triangle", "star", "diamond", "cross", "heart", "crescent")
COLOURS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown")
# Bounding radius of each size, as a fraction of the image side (large is ~2x small).
SIZES = {"small": 0.095, "medium": 0.135, "large": 0.18}
TEXTURES = ("striped", "dotted", "checkered")
BACKGROUNDS = ("white", "grey", "black", "beige", "light blue", "light green")

DUPLICATE_PROB = 0.3  # a later object repeats an earlier one's shape and colour
TEXTURE_PROB = 0.15  # an object is striped, dotted or checkered (when textures are on)
# The first ("focus") object's size; the others are smaller, or as big with SAME_SIZE_PROB.
FOCUS_SIZE_WEIGHTS = (0.1, 0.4, 0.5)
SAME_SIZE_PROB = 0.15
MARGIN = 0.02  # between an object's bounding circle and the image border
GAP = 0.035  # between the bounding circles of two objects
PLACEMENT_TRIES = 200

# Relations: one axis must dominate the other by this ratio, else the objects are "diagonal".
DOMINANCE = 1.3


@dataclass(frozen=True)
class SceneObject:
    """One object: ``x``, ``y`` its centre, ``radius`` its bounding radius (image fractions)."""

    shape: str
    colour: str
    size: str
    texture: str | None
    x: float
    y: float
    radius: float

    @property
    def size_rank(self) -> int:
        return list(SIZES).index(self.size)


@dataclass(frozen=True)
class Scene:
    """A background name and the objects, most salient first (see :func:`salience_key`)."""

    background: str
    objects: tuple[SceneObject, ...]

    def to_dict(self) -> dict:
        return {"background": self.background, "objects": [asdict(o) for o in self.objects]}

    @classmethod
    def from_dict(cls, data: dict) -> "Scene":
        return cls(data["background"], tuple(SceneObject(**o) for o in data["objects"]))


def salience_key(obj: SceneObject) -> tuple[int, float]:
    """Sort key: the biggest object first, then the one nearest the centre."""
    return (-obj.size_rank, math.hypot(obj.x - 0.5, obj.y - 0.5))


def object_count_weights(max_objects: int) -> list[float]:
    """Probability weights of 1..max_objects objects: single objects a bit rarer than the rest."""
    return [1.0] + [1.3] * (max_objects - 1)


def sample_scene(rng: random.Random, max_objects: int, textures: bool) -> Scene:
    """Draw one scene; the result depends only on the state of ``rng``."""
    n = rng.choices(range(1, max_objects + 1), weights=object_count_weights(max_objects))[0]
    background = rng.choice(BACKGROUNDS)
    sizes = list(SIZES)
    focus_size = rng.choices(sizes, weights=FOCUS_SIZE_WEIGHTS)[0]
    specs: list[tuple[str, str, str, str | None]] = []
    for i in range(n):
        if i > 0 and rng.random() < DUPLICATE_PROB:
            shape, colour = rng.choice(specs)[:2]
        else:
            shape, colour = rng.choice(SHAPES), rng.choice(COLOURS)
        size = focus_size if i == 0 else _other_size(rng, focus_size)
        texture = rng.choice(TEXTURES) if textures and rng.random() < TEXTURE_PROB else None
        specs.append((shape, colour, size, texture))
    # Place the biggest first: packing succeeds more often.
    specs.sort(key=lambda s: -list(SIZES).index(s[2]))
    placed: list[SceneObject] = []
    for shape, colour, size, texture in specs:
        obj = _place(rng, placed, shape, colour, size, texture)
        if obj is not None:
            placed.append(obj)
    return Scene(background, tuple(sorted(placed, key=salience_key)))


def _other_size(rng: random.Random, focus_size: str) -> str:
    """A size no bigger than the focus object's, rarely equal: the salient object stands out."""
    sizes = list(SIZES)
    smaller = sizes[: sizes.index(focus_size)]
    if not smaller or rng.random() < SAME_SIZE_PROB:
        return focus_size
    return rng.choice(smaller)


def _place(rng: random.Random, placed: list[SceneObject], shape: str, colour: str, size: str,
           texture: str | None) -> SceneObject | None:
    """Rejection-sample a free position; shrink the object if it does not fit, else drop it."""
    sizes = list(SIZES)
    for size_name in sizes[: sizes.index(size) + 1][::-1]:
        r = SIZES[size_name]
        lo, hi = r + MARGIN, 1.0 - r - MARGIN
        for _ in range(PLACEMENT_TRIES):
            x, y = round(rng.uniform(lo, hi), 4), round(rng.uniform(lo, hi), 4)
            if all(math.hypot(x - o.x, y - o.y) >= r + o.radius + GAP for o in placed):
                return SceneObject(shape, colour, size_name, texture, x, y, r)
    return None


def relation(a: SceneObject, b: SceneObject) -> str:
    """Where ``a`` is relative to ``b``: "left", "right", "above", "below" or "diagonal"."""
    dx, dy = a.x - b.x, a.y - b.y
    if abs(dx) >= DOMINANCE * abs(dy):
        return "left" if dx < 0 else "right"
    if abs(dy) >= DOMINANCE * abs(dx):
        return "above" if dy < 0 else "below"
    return "diagonal"


def region(obj: SceneObject) -> tuple[str, str]:
    """Coarse position: (top/middle/bottom, left/middle/right)."""
    def third(v: float, low: str, high: str) -> str:
        return low if v < 0.4 else high if v > 0.6 else "middle"
    return third(obj.y, "top", "bottom"), third(obj.x, "left", "right")
