"""Simulated annotators for "moving shapes" clips: the events in order, with connectives.

Each annotator tells every event of the clip (:mod:`rlcap.data.synthetic.clips`) in its order,
joined by connectives ("then", "after that", "finally"; "while" for events that run together), in
words of its own: verbs and directions have synonyms, an object is introduced with its colour and
shape and then referred back to ("the circle", "it"), and some annotators open with the scene
("on a grey background there are two shapes") or write one sentence per event. The detail that
earns CIDEr-D is what the annotators share: which object, which action, which direction or colour,
in which order. :func:`caption_clip` returns one caption per annotator and, for each, the words at
which a new event starts (the segment boundaries the internal critic of [Wang18] learns).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from rlcap.data.synthetic.captions import COLOUR_WORDS, NUMBER_WORDS, SHAPE_WORDS, with_article
from rlcap.data.synthetic.clips import Clip, Event

VERBS = {
    "move": ("moves {d}", "slides {d}", "goes {d}", "travels {d}"),
    "bounce": ("bounces {d} and back", "moves {d} and comes back", "jumps {d} and returns"),
    "grow": ("grows", "gets bigger", "becomes larger", "grows larger"),
    "shrink": ("shrinks", "gets smaller", "becomes smaller", "shrinks down"),
    "recolour": ("turns {c}", "changes colour to {c}", "becomes {c}", "changes to {c}"),
    "appear": ("appears", "shows up", "comes into view"),
    "disappear": ("disappears", "vanishes", "fades away"),
}
DIRECTION_WORDS = {"left": ("left", "to the left"), "right": ("right", "to the right"),
                   "up": ("up", "upward", "to the top"), "down": ("down", "downward", "to the bottom")}
THEN = ("then", "and then", "after that", "next")
FINALLY = ("finally", "and finally", "at the end")
WHILE = ("while", "as")


@dataclass(frozen=True)
class Annotator:
    name: str
    synonym_prob: float  # reach for a less usual verb or direction word
    first_word: bool  # open with "first"
    sentences: bool  # one sentence per event
    intro_prob: float  # open with the scene
    pronoun_prob: float  # "it" for the object of the previous event


ANNOTATORS = (
    Annotator("A", 0.2, True, False, 0.2, 0.3),
    Annotator("B", 0.3, False, True, 0.3, 0.5),
    Annotator("C", 0.2, False, False, 0.5, 0.2),
    Annotator("D", 0.6, True, False, 0.3, 0.4),
    Annotator("E", 0.3, False, True, 0.7, 0.2),
)


def _pick(rng: random.Random, words: tuple[str, ...], synonym_prob: float) -> str:
    return rng.choice(words[1:]) if len(words) > 1 and rng.random() < synonym_prob else words[0]


def _noun(shape: str, rng: random.Random, synonym_prob: float) -> str:
    return _pick(rng, tuple(w for w, _ in SHAPE_WORDS[shape]), synonym_prob / 2)


def _intro(clip: Clip, rng: random.Random) -> str:
    n = len(clip.objects)
    what = "one shape" if n == 1 else f"{NUMBER_WORDS[n]} shapes"
    return rng.choice((f"on a {clip.background} background there {'is' if n == 1 else 'are'} {what}",
                       f"there {'is' if n == 1 else 'are'} {what} on a {clip.background} background",
                       f"this clip shows {what}"))


def _clause(e: Event, clip: Clip, colours: list[str], mentioned: set[int], previous: int | None,
            a: Annotator, rng: random.Random) -> str:
    obj = clip.objects[e.obj]
    if e.obj == previous and rng.random() < a.pronoun_prob:
        subject = "it"
    elif e.obj in mentioned:
        unique = sum(o.shape == obj.shape for o in clip.objects) == 1  # "the square" only when it names one
        subject = f"the {COLOUR_WORDS[colours[e.obj]][0]} {_noun(obj.shape, rng, a.synonym_prob)}" \
            if rng.random() < 0.7 or not unique else f"the {_noun(obj.shape, rng, a.synonym_prob)}"
    else:
        colour = _pick(rng, COLOUR_WORDS[colours[e.obj]], a.synonym_prob)
        size = f"{obj.size} " if obj.size == "small" and rng.random() < 0.4 else ""
        subject = with_article(f"{size}{colour} {_noun(obj.shape, rng, a.synonym_prob)}")
    verb = _pick(rng, VERBS[e.action], a.synonym_prob)
    arg = (_pick(rng, DIRECTION_WORDS[e.arg], a.synonym_prob) if e.action in ("move", "bounce")
           else _pick(rng, COLOUR_WORDS[e.arg], a.synonym_prob) if e.action == "recolour" else "")
    return f"{subject} {verb.format(d=arg, c=arg)}"


def describe(clip: Clip, a: Annotator, rng: random.Random) -> tuple[str, list[int]]:
    """One caption of ``clip`` in ``a``'s style, and the index (in :func:`rlcap.metrics.tokenize`'s words)
    of the word at which each event's part starts."""
    from rlcap.metrics import tokenize

    colours = [o.colour for o in clip.objects]
    mentioned: set[int] = set()
    previous = None
    parts: list[str] = []
    if rng.random() < a.intro_prob:
        parts.append(_intro(clip, rng) + ("." if a.sentences else " ,"))
    starts: list[int] = []
    last = len(clip.events) - 1
    for k, e in enumerate(clip.events):
        clause = _clause(e, clip, colours, mentioned, previous, a, rng)
        if e.together:
            link = rng.choice(WHILE)
            joined = f"{link} {clause}"
        elif k == 0:
            joined = f"first {clause}" if a.first_word else clause
        else:
            link = rng.choice(FINALLY) if k == last and rng.random() < 0.6 else rng.choice(THEN)
            joined = f"{link} {clause}"
        if a.sentences and parts and not e.together:
            parts[-1] += "" if parts[-1].endswith(".") else "."
            joined = joined[0].upper() + joined[1:]
        elif k > 0 and not e.together:
            parts[-1] += " ,"
        starts.append(sum(len(tokenize(p)) for p in parts))  # in the words training reads
        parts.append(joined)
        mentioned.add(e.obj)
        previous = e.obj
        if e.action == "recolour":
            colours[e.obj] = e.arg
    text = " ".join(parts)
    return text[0].upper() + text[1:] + ".", starts


def caption_clip(clip: Clip, rng: random.Random, annotators: int = 5) -> list[tuple[str, str, list[int]]]:
    """(annotator, caption, event start words) for ``annotators`` of the five, in a random order."""
    chosen = rng.sample(ANNOTATORS, annotators)
    return [(a.name, *describe(clip, a, rng)) for a in chosen]
