"""Perception noise: what a concept detector would get wrong about a scene.

A scene's true concepts come from its held-out caption. A detector misses some objects and sees
some that are not there, and its mistakes are plausible ones: it hallucinates a "fork" in a
kitchen, not in a ski slope. So each true concept is dropped with probability ``drop`` (one always
survives, so every scene stays informative), and ``lo..hi`` distractors are added, each drawn by
picking one surviving concept and then a concept seen with it in the training scenes, in
proportion to how often the two co-occur. A distractor is never one of the scene's true concepts
(dropped ones included). The random stream of a scene depends on ``(seed, image id)`` only, so a
scene's noise does not depend on the order of the file or on the other scenes drawn.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import NamedTuple

from rlcap.data.concepts.extract import Concept
from rlcap.errors import ConfigError

_TRIES = 20  # draws per distractor before giving up on a scene whose partners are all true concepts


@dataclass(frozen=True)
class Noise:
    drop: float = 0.2  # probability that a true concept is missed
    min_distractors: int = 1
    max_distractors: int = 2

    def __post_init__(self) -> None:
        if not 0.0 <= self.drop < 1.0:
            raise ConfigError(f"concepts: drop must be in [0, 1), got {self.drop}")
        if not 0 <= self.min_distractors <= self.max_distractors:
            raise ConfigError(f"concepts: distractors must be LO-HI with 0 <= LO <= HI, "
                              f"got {self.min_distractors}-{self.max_distractors}")


def parse_distractors(text: str) -> tuple[int, int]:
    """``"1-2"`` -> (1, 2); ``"3"`` -> (3, 3)."""
    lo, _, hi = text.partition("-")
    try:
        bounds = (int(lo), int(hi or lo))
    except ValueError:
        raise ConfigError(f"concepts: distractors must be N or LO-HI (e.g. 1-2), got {text!r}") from None
    if not 0 <= bounds[0] <= bounds[1]:
        raise ConfigError(f"concepts: distractors must be N or LO-HI with 0 <= LO <= HI, got {text!r}")
    return bounds


class _Weighted:
    """Items drawn in proportion to their counts."""

    def __init__(self, counts: Counter):
        self.items = sorted(counts, key=lambda c: (-counts[c], c))
        self.cumulative = list(accumulate(counts[c] for c in self.items))

    def draw(self, rng: random.Random) -> Concept:
        return self.items[bisect_right(self.cumulative, rng.random() * self.cumulative[-1])]


class Cooccurrence:
    """How often two concepts describe the same scene, and each concept's overall frequency."""

    def __init__(self, scenes: Iterable[Sequence[Concept]]):
        pairs: dict[Concept, Counter] = {}
        frequency: Counter = Counter()
        for concepts in scenes:
            frequency.update(concepts)
            for a in concepts:
                pairs.setdefault(a, Counter()).update(b for b in concepts if b != a)
        if not frequency:
            raise ConfigError("concepts: the training scenes have no concepts to draw distractors from")
        self._partners = {a: _Weighted(c) for a, c in pairs.items() if c}
        self._any = _Weighted(frequency)

    def draw(self, anchor: Concept | None, rng: random.Random) -> Concept:
        """A concept seen with ``anchor`` (any concept by frequency when it has no partners)."""
        table = self._partners.get(anchor, self._any) if anchor is not None else self._any
        return table.draw(rng)


class Perceived(NamedTuple):
    kept: list[Concept]  # true concepts that survive, in caption order
    dropped: list[Concept]
    distractors: list[Concept]
    regions: list[Concept]  # kept + distractors, shuffled: the order of the scene's region features


def scene_rng(seed: int, image_id: str) -> random.Random:
    """The scene's own stream (a string seed is hashed with SHA-512, the same on every platform)."""
    return random.Random(f"concepts/{seed}/{image_id}")


def perceive(concepts: Sequence[Concept], cooc: Cooccurrence, noise: Noise, rng: random.Random) -> Perceived:
    """Drop and add concepts as a detector would (see the module docstring)."""
    keep = [rng.random() >= noise.drop for _ in concepts]
    if concepts and not any(keep):
        keep[rng.randrange(len(concepts))] = True
    kept = [c for c, k in zip(concepts, keep) if k]
    dropped = [c for c, k in zip(concepts, keep) if not k]
    true_words = {c.word for c in concepts}
    distractors: list[Concept] = []
    wanted = rng.randint(noise.min_distractors, noise.max_distractors)
    if not kept:  # a caption without content words: the scene still needs one region
        wanted = max(wanted, 1)
    for _ in range(wanted * _TRIES):
        if len(distractors) == wanted:
            break
        candidate = cooc.draw(rng.choice(kept) if kept else None, rng)
        if candidate.word not in true_words and candidate not in distractors:
            distractors.append(candidate)
    regions = kept + distractors
    rng.shuffle(regions)
    return Perceived(kept, dropped, distractors, regions)
