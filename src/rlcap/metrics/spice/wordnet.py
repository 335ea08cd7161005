"""WordNet as SPICE sees it: Meteor 1.5's synonym tables, read from the jar in pycocoevalcap's wheel.

SPICE gives every concept (object, attribute, relation) the WordNet synsets of the word and of its
base form (``SceneGraph.getSynSets``: Meteor's ``SynonymDictionary.getSynSets`` plus
``getStemSynSets``). The tables are plain text inside ``meteor-1.5.jar`` (a zip): ``english.synsets``
(a word line, then a line of synset ids) and ``english.exceptions`` (a base form line, then a line of
irregular forms). No Java is involved. The same tables give the verb-lemma check of the parser.
"""

from __future__ import annotations

import functools
import zipfile
from pathlib import Path

from rlcap.metrics.java import packaged_jar

# WordNet 3's morphology (Meteor's SynonymDictionary.morph): suffix -> ending, nouns then verbs then
# adjectives, tried in this order; the first base form that has synsets wins.
_SUFFIXES = (
    ("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"), ("ies", "y"),
    ("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", ""),
    ("er", ""), ("est", ""), ("er", "e"), ("est", "e"),
)  # fmt: skip
_NOUN_SUFFIXES = _SUFFIXES[:8]
_VERB_SUFFIXES = _SUFFIXES[8:16]
_ADJECTIVE_SUFFIXES = _SUFFIXES[16:]
_AUXILIARIES = {
    "is": "be", "are": "be", "was": "be", "were": "be", "been": "be", "being": "be", "am": "be", "'s": "be",
    "'re": "be", "'m": "be", "has": "have", "had": "have", "having": "have", "does": "do", "did": "do",
    "doing": "do", "done": "do", "n't": "not", "ca": "can", "wo": "will", "'ll": "will", "'d": "would",
}  # fmt: skip
# Plural-only nouns that CoreNLP's morphology keeps whole.
_PLURALIA_TANTUM = frozenset(
    "pants shorts trousers jeans goggles scissors clothes tongs pliers binoculars overalls tights leggings "
    "pajamas pyjamas earphones headphones".split()
)


class WordNet:
    """Synset ids per word and irregular forms, as Meteor 1.5 loads them."""

    def __init__(self, synsets: dict[str, frozenset[int]], bases: dict[str, tuple[str, ...]]) -> None:
        self.synsets = synsets
        self.bases = bases  # irregular form -> its base forms ("rode" -> ("ride",))
        self._concepts: dict[str, frozenset[int]] = {}

    @classmethod
    def from_meteor_jar(cls, jar: Path | None = None) -> WordNet:
        jar = jar if jar is not None else packaged_jar("meteor/meteor-1.5.jar")
        with zipfile.ZipFile(jar) as archive:
            synset_lines = archive.read("synonym/english.synsets").decode("utf-8").split("\n")
            exception_lines = archive.read("synonym/english.exceptions").decode("utf-8").split("\n")
        synsets = {
            word: frozenset(map(int, ids.split()))
            for word, ids in zip(synset_lines[0::2], synset_lines[1::2], strict=False)
            if word
        }
        bases: dict[str, tuple[str, ...]] = {}
        for base, forms in zip(exception_lines[0::2], exception_lines[1::2], strict=False):
            for form in forms.split():
                bases[form] = (*bases.get(form, ()), base)
        return cls(synsets, bases)

    def concept_synsets(self, concept: str) -> frozenset[int]:
        """The synsets SPICE attaches to a concept: of the word and of its base form(s)."""
        found = self._concepts.get(concept)
        if found is None:
            word = concept.strip().lower().replace(" ", "_")
            found = self._concepts[concept] = self.synsets.get(word, frozenset()) | self.stem_synsets(word)
        return found

    def stem_synsets(self, word: str) -> frozenset[int]:
        if word in self.bases:
            return frozenset().union(*(self.synsets.get(b, frozenset()) for b in self.bases[word]))
        return self.synsets.get(self.morph(word), frozenset())

    def lemma(self, word: str, tag: str) -> str:
        """The lemma of a lower-case word with its Penn tag, from WordNet's tables (CoreNLP's stand-in).

        Irregular forms come from the exception list ("men" -> "man", "rode" -> "ride"); regular ones
        from WordNet's suffix rules for the word's part of speech. Where several bases exist, the one
        with the most senses wins ("riding" -> "ride", 16 senses, not "rid", 1).
        """
        if word in _AUXILIARIES and tag.startswith(("VB", "MD", "RB", "POS")):
            return _AUXILIARIES[word]
        if tag in ("NNS", "NNPS"):
            return word if word in _PLURALIA_TANTUM else self._base(word, _NOUN_SUFFIXES)
        if tag.startswith("VB") and tag != "VB":
            return self._base(word, _VERB_SUFFIXES)
        if tag in ("JJR", "JJS", "RBR", "RBS"):
            return self._base(word, _ADJECTIVE_SUFFIXES)
        return word

    def _base(self, word: str, suffixes: tuple[tuple[str, str], ...]) -> str:
        if word in self.bases:
            return self.bases[word][0]
        best, senses = word, 0
        for suffix, ending in suffixes:
            if word.endswith(suffix) and len(word) > len(suffix):
                base = word[: len(word) - len(suffix)] + ending
                count = len(self.synsets.get(base, ()))
                if count > senses:
                    best, senses = base, count
        return best

    def morph(self, word: str) -> str:
        """Meteor's WordNet base form of ``word`` ("" when no suffix rule gives a known word)."""
        if word.endswith("ss") or len(word) <= 2:
            return word
        for suffix, ending in _SUFFIXES:
            if word.endswith(suffix):
                base = word[: len(word) - len(suffix)] + ending
                if base in self.synsets:
                    return base
        return ""


@functools.lru_cache(maxsize=1)
def meteor_wordnet() -> WordNet:
    """The tables of pycocoevalcap's meteor-1.5.jar, loaded once per process (about 1 s)."""
    return WordNet.from_meteor_jar()
