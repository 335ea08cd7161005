"""Object hallucination and coverage: CHAIR_i and CHAIR_s ([Rohrbach18]), coverage and the colour error.

[Rohrbach18 sec. 2.1]: an object a caption names is *hallucinated* when the picture does not hold it.

- CHAIR_i = hallucinated object mentions / all object mentions, over the corpus (every mention counts: a caption
  that names a dog twice makes two mentions), as the authors' released evaluation counts them;
- CHAIR_s = captions with at least one hallucinated object / all captions (a caption that names no object is not
  hallucinated, and counts in the denominator).

Objects are found by a synonym table (:class:`ObjectVocabulary`): each word sequence a caption may name an object
by (its singular and plural forms are both entries: no stemmer runs at scoring time), matched on the caption's
tokens from left to right, the longest entry first, a matched phrase consuming its words. So the two-word names
the paper takes care of are one object each ("hot dog" is no dog, "teddy bear" no bear), and a phrase may map to
another object than its words ("baby elephant" is an elephant, not a person: [Rohrbach18]'s special cases).

Two measures beside CHAIR, rlcap's:

- Coverage: the share of the picture's ground-truth objects (distinct) that the caption names, per caption, and
  its mean over captions for the corpus (the "recall" later CHAIR tools add; [Rohrbach18] has none);
- Colour-err: where the ground truth knows each object's colour (shapes), the share of the mentions of an object
  the picture holds, with a colour word right before it, whose (object, colour) pair the picture does not hold
  ("a red star" where the only star is blue). It is counted apart from CHAIR, which judges kinds only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

Tokens = Sequence[str]


@dataclass(frozen=True)
class ObjectVocabulary:
    """The words that name objects.

    phrases: a word sequence (lower-case tokens) -> the object it names.
    attributes: a single word -> the attribute it states (a colour word -> its colour), for Colour-err.
    """

    phrases: Mapping[tuple[str, ...], str]
    attributes: Mapping[str, str]

    @property
    def longest(self) -> int:
        return max((len(p) for p in self.phrases), default=0)


class Mention(NamedTuple):
    object: str
    attribute: str | None  # the attribute word right before the phrase, as its attribute; None: none there
    start: int  # the index of the phrase's first token


def find_objects(tokens: Tokens, vocabulary: ObjectVocabulary) -> list[Mention]:
    """The object mentions of ``tokens``, in order: at each position the longest phrase of the vocabulary that
    starts there, its words consumed (``["a", "hot", "dog"]`` -> one mention of hot dog)."""
    found, i, longest = [], 0, vocabulary.longest
    while i < len(tokens):
        for n in range(min(longest, len(tokens) - i), 0, -1):
            obj = vocabulary.phrases.get(tuple(tokens[i:i + n]))
            if obj is not None:
                attribute = vocabulary.attributes.get(tokens[i - 1]) if i > 0 else None
                found.append(Mention(obj, attribute, i))
                i += n
                break
        else:
            i += 1
    return found


class CaptionObjects(NamedTuple):
    """What one caption names, judged against its picture's ground truth."""

    mentions: int  # object mentions
    hallucinated: int  # mentions of an object the picture does not hold
    truth: int  # distinct ground-truth objects of the picture
    covered: int  # of those, how many the caption names
    coloured: int  # mentions of a held object with an attribute word right before them
    wrong_colour: int  # of those, how many name an (object, attribute) pair the picture does not hold


def judge_caption(tokens: Tokens, objects: frozenset[str], pairs: frozenset[tuple[str, str]] | None,
                  vocabulary: ObjectVocabulary) -> CaptionObjects:
    """Count one caption's mentions against its picture's ``objects`` and, when known, its (object, attribute)
    ``pairs`` (None: no attribute truth; the colour counts are 0)."""
    found = find_objects(tokens, vocabulary)
    held = [m for m in found if m.object in objects]
    coloured = [m for m in held if m.attribute is not None] if pairs is not None else []
    return CaptionObjects(
        mentions=len(found),
        hallucinated=len(found) - len(held),
        truth=len(objects),
        covered=len({m.object for m in held}),
        coloured=len(coloured),
        wrong_colour=sum((m.object, m.attribute) not in pairs for m in coloured),  # type: ignore[operator]
    )


def caption_scores(c: CaptionObjects) -> dict[str, float | None]:
    """One caption's CHAIR_i (None when it names no object), CHAIR_s (0 or 1), Coverage (None when the picture
    holds no object) and Colour-err (None when no held object has a colour word)."""
    return {
        "CHAIR_i": c.hallucinated / c.mentions if c.mentions else None,
        "CHAIR_s": float(c.hallucinated > 0),
        "Coverage": c.covered / c.truth if c.truth else None,
        "Colour-err": c.wrong_colour / c.coloured if c.coloured else None,
    }


def corpus_scores(counts: Sequence[CaptionObjects]) -> dict[str, float]:
    """CHAIR_i over all mentions (0 when no caption names an object), CHAIR_s over all captions, the mean
    Coverage of the pictures that hold an object, and Colour-err over all coloured mentions (0 when none)."""
    if not counts:
        raise ValueError("CHAIR needs at least one caption")
    mentions = sum(c.mentions for c in counts)
    coloured = sum(c.coloured for c in counts)
    with_truth = [c.covered / c.truth for c in counts if c.truth]
    return {
        "CHAIR_i": sum(c.hallucinated for c in counts) / mentions if mentions else 0.0,
        "CHAIR_s": sum(c.hallucinated > 0 for c in counts) / len(counts),
        "Coverage": sum(with_truth) / len(with_truth) if with_truth else 0.0,
        "Colour-err": sum(c.wrong_colour for c in counts) / coloured if coloured else 0.0,
    }


@dataclass(frozen=True)
class ObjectTruth:
    """The ground truth CHAIR reads: the vocabulary, and per image id its objects and (when known) its
    (object, attribute) pairs.

    from_references: also count as present every object an image's reference captions name, as [Rohrbach18]
    does on COCO (its instance annotations miss objects the annotators wrote); False where the truth is exact
    (shapes: the scene).
    """

    vocabulary: ObjectVocabulary
    objects: Mapping[str, frozenset[str]]
    pairs: Mapping[str, frozenset[tuple[str, str]]] | None
    from_references: bool

    def objects_of(self, image_id: str, refs: Sequence[Tokens]) -> frozenset[str]:
        """The objects of ``image_id``: its annotated ones and, with ``from_references``, those ``refs`` name."""
        objects = self.objects[image_id]
        if self.from_references:
            objects = objects | {m.object for r in refs for m in find_objects(r, self.vocabulary)}
        return objects
