"""The caption chunker of [Wang18]'s internal critic on hand-segmented captions ("|" between chunks)."""

import pytest

from rlcap.data.chunker import chunk_starts
from rlcap.metrics import tokenize

HAND = [
    "the person | then tidies his area | after he is done eating",  # [Wang18 sec. 4.1]'s example
    "a man | is cooking in a kitchen | while a woman watches",
    "a red circle | moves left | then a blue square grows bigger | and finally the circle turns green",
    "first a small pink square | travels to the left | while an orange square shrinks",
    "a person | opens the door | and walks into the room",
    "a woman | sits on a bed | and then puts a laptop into a bag",
    "the dog | runs across the yard | before it jumps over the fence",
    "a boy | picks up a ball | and throws it | then he runs away",
    "a green star | grows | as a purple heart moves down",
    "two men | are talking | while they walk down the street",
    "a yellow triangle | appears | and then slides to the right",
    "a girl | is drinking from a cup",
    "a person | takes a picture of the light | while sitting in a chair",
    "the red and blue squares | move up",
    "a man | puts a bag on his shoulder | and walks out of the room",
    "someone | washes the dishes | then dries them with a towel",
    "a small blue circle | shrinks | after that the orange diamond changes colour to red",
    "the cat | watches the bird | until it flies away",
    "a person | stands up | and leaves the room",
    "a brown heart | bounces down and back | and finally disappears",
]


def hand_starts(text: str) -> tuple[list[str], list[int]]:
    words, starts = [], []
    for part in text.split("|"):
        starts.append(len(words))
        words.extend(tokenize(part))
    return words, starts


# The one caption the rules miss: spaCy's small tagger reads "a small pink square travels" as
# DT JJ JJ JJ NNS ("square" an adjective, "travels" a noun), so no verb is seen and nothing is cut.
KNOWN_MISS = {"first a small pink square travels to the left while an orange square shrinks"}


def test_chunker_on_hand_segmented_captions():
    parsed = [hand_starts(t) for t in HAND]
    got = chunk_starts([w for w, _ in parsed])
    wrong = {" ".join(w) for (w, want), have in zip(parsed, got) if want != have}
    assert wrong == KNOWN_MISS
    # boundary precision and recall over all 20 (the cut before each chunk but the first)
    cuts = lambda s: set(s[1:])  # noqa: E731
    tp = sum(len(cuts(want) & cuts(have)) for (_, want), have in zip(parsed, got))
    assert tp / sum(len(cuts(have)) for have in got) == 1.0  # no cut where the hand has none
    assert tp / sum(len(cuts(want)) for _, want in parsed) == pytest.approx(38 / 40)  # the two cuts of the miss


def test_empty_and_single_word():
    assert chunk_starts([[], ["dog"]]) == [[0], [0]]
