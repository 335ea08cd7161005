"""SPICE in Python (``spice_impl: python``): a reward scorer and pycocoevalcap's ``compute_score``.

Captions are prepared as pycocoevalcap prepares them (its PTB tokenization, lower case, punctuation
removed: :func:`rlcap.metrics.tokenize.tokenize`), parsed into tuples once per unique string, and each
image's references merged into one scene graph once. The per-image score is SPICE's "All" F-score;
the corpus score is the mean over images (pycocoevalcap's ``Spice.compute_score``).
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from rlcap.errors import DataError
from rlcap.metrics.spice.graph import SUBSETS, Concept, Evaluation, SceneGraph, build_graph, evaluate
from rlcap.metrics.spice.parser import SpiceParser, default_parser
from rlcap.metrics.tokenize import tokenize

log = logging.getLogger(__name__)
ConceptTuple = tuple[Concept, ...]


def prepare(caption: str) -> str:
    """pycocoevalcap's input to SPICE: PTB tokens, lower case, punctuation removed, joined by spaces."""
    return " ".join(tokenize(caption))


class _ReferenceSet:
    """One image's merged reference tuples, indexed for fast matching."""

    def __init__(self, tuples: list[ConceptTuple]) -> None:
        self.tuples = tuples
        objects = [t[0] for t in tuples if len(t) == 1]
        self.object_words = set().union(*(c.words for c in objects))
        self.object_synsets = set().union(*(c.synsets for c in objects))
        self.by_size = {n: [t for t in tuples if len(t) == n] for n in (2, 3)}

    def matches(self, tup: ConceptTuple) -> bool:
        if len(tup) == 1:  # similar to some object <=> shares a word or synset with their union
            return not tup[0].words.isdisjoint(self.object_words) or not tup[0].synsets.isdisjoint(self.object_synsets)
        return any(all(a.similar(b) for a, b in zip(tup, ref)) for ref in self.by_size[len(tup)])

    def f_score(self, candidate: list[ConceptTuple]) -> float:
        """SPICE "All": F1 of the candidate's matched tuples (0 when either side has none)."""
        if not candidate or not self.tuples:
            return 0.0
        tp = sum(self.matches(t) for t in candidate)
        if tp == 0:
            return 0.0
        precision, recall = tp / len(candidate), tp / len(self.tuples)
        return 2 * precision * recall / (precision + recall)


class SpiceScorer:
    """SPICE F-scores of candidate captions against fixed references.

    ``refs``: image id -> raw reference captions, parsed once here. ``score`` parses each new
    candidate string once (an LRU cache of ``cache_size`` scene-graph tuple sets) and remembers
    each (candidate, image) score, so repeated samples cost a dictionary look-up.
    """

    def __init__(self, refs: Mapping[str, Sequence[str]], parser: SpiceParser | None = None,
                 cache_size: int = 200_000) -> None:  # fmt: skip
        self.parser = parser if parser is not None else default_parser()
        self.cache_size = cache_size
        self._graphs: OrderedDict[str, list[ConceptTuple]] = OrderedDict()
        self._scores: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.ref_graphs: dict[str, SceneGraph] = {}
        self._refs: dict[str, _ReferenceSet] = {}
        prepared = {str(i): [prepare(c) for c in caps] for i, caps in refs.items()}
        unique = sorted({c for caps in prepared.values() for c in caps})
        log.info("SPICE: parsing %d unique reference captions of %d images", len(unique), len(prepared))
        parsed = dict(zip(unique, self.parser.parse(unique)))
        for image_id, captions in prepared.items():
            if not captions:
                raise DataError(f"image {image_id!r} has no reference captions")
            graph = build_graph([parsed[c] for c in captions], self.parser.wordnet)
            self.ref_graphs[image_id] = graph
            self._refs[image_id] = _ReferenceSet(graph.tuples())

    def score(self, candidates: Sequence[str], image_ids: Sequence[str]) -> list[float]:
        """SPICE F of each candidate against its image's references (image ids may repeat)."""
        if len(candidates) != len(image_ids):
            raise DataError(f"{len(candidates)} candidates but {len(image_ids)} image ids")
        keys = [(prepare(c), str(i)) for c, i in zip(candidates, image_ids)]
        for _, image_id in keys:
            if image_id not in self._refs:
                raise DataError(f"image {image_id!r} has no references in this SPICE scorer")
        self._parse_new(sorted({k[0] for k in keys if k not in self._scores and k[0] not in self._graphs}))
        out = []
        for key in keys:
            value = self._scores.get(key)
            if value is None:
                value = self._refs[key[1]].f_score(self.candidate_tuples(key[0]))
                self._remember(self._scores, key, value, 4 * self.cache_size)
            out.append(value)
        return out

    def candidate_tuples(self, prepared: str) -> list[ConceptTuple]:
        """The scene-graph tuples of one prepared caption (parsed and cached if new)."""
        if prepared not in self._graphs:
            self._parse_new([prepared])
        self._graphs.move_to_end(prepared)
        return self._graphs[prepared]

    def _parse_new(self, captions: list[str]) -> None:
        for caption, tuples in zip(captions, self.parser.parse_uncached(captions)):
            graph = build_graph([tuples], self.parser.wordnet)
            self._remember(self._graphs, caption, graph.tuples(), self.cache_size)

    @staticmethod
    def _remember(cache: OrderedDict, key, value, size: int) -> None:  # noqa: ANN001
        cache[key] = value
        if len(cache) > size:
            cache.popitem(last=False)

    def detailed(self, candidate: str, image_id: str) -> dict[str, Evaluation]:
        """SPICE's per-image report: "All" and the subsets (Object, Attribute, Relation, Cardinality,
        Color, Size; NaN where the references have no tuple of the subset)."""
        cand = self.candidate_tuples(prepare(candidate))
        ref = self._refs[str(image_id)].tuples
        out = {"All": evaluate(cand, ref, allow_nan=False)}
        for name, keep in SUBSETS.items():
            out[name] = evaluate([t for t in cand if keep(t)], [t for t in ref if keep(t)], allow_nan=True)
        return out


def compute_score(gts: Mapping[str, Sequence[str]], res: Mapping[str, Sequence[str]],
                  parser: SpiceParser | None = None) -> tuple[float, list[float]]:  # fmt: skip
    """pycocoevalcap's ``Spice().compute_score(gts, res)``: the mean SPICE F and one per image (in
    the order of ``res``; each image has exactly one candidate)."""
    for image_id, captions in res.items():
        if len(captions) != 1:
            raise DataError(f"image {image_id!r}: SPICE scores exactly one candidate, got {len(captions)}")
    ids = [str(i) for i in res]
    scorer = SpiceScorer({str(i): gts[i] for i in res}, parser)
    scores = scorer.score([res[i][0] for i in res], ids)
    return (math.fsum(scores) / len(scores) if scores else math.nan), scores
