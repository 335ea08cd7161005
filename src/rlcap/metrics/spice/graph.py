"""SPICE's scene graphs, tuple sets and F-score (SceneGraph, TupleSet, Evaluation of SPICE 1.0).

A concept is a set of words with the union of their WordNet synsets. Adding a tuple to a graph merges
its object into the most similar node (a shared word: similarity 1; else shared synsets over all
synsets), its attribute into a similar attribute of that node and its relation into a similar relation
between the same nodes; this is how the reference captions of an image merge into one graph
(Anderson et al. 2016, section 3). Tuples match when, element by element, the concepts share a word or
a synset; a candidate tuple counts once if it matches any reference tuple.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from rlcap.metrics.spice.wordnet import WordNet


@dataclass
class Concept:
    words: set[str]
    synsets: set[int]

    def similar(self, other: Concept) -> bool:
        return not self.synsets.isdisjoint(other.synsets) or not self.words.isdisjoint(other.words)

    def similarity(self, other: Concept) -> float:
        if not self.words.isdisjoint(other.words):
            return 1.0
        union = len(self.synsets | other.synsets)
        return len(self.synsets & other.synsets) / union if union else 0.0

    def merge(self, other: Concept) -> None:
        self.words |= other.words
        self.synsets |= other.synsets

    def same(self, other: Concept) -> bool:
        return self.words == other.words and self.synsets == other.synsets

    def label(self) -> str:
        return "/".join(sorted(self.words))


@dataclass
class SceneNode:
    object: Concept
    attributes: list[Concept] = field(default_factory=list)

    def merge_attribute(self, concept: Concept, merge: bool) -> None:
        if any(a.same(concept) for a in self.attributes):
            return
        if merge:
            for attribute in self.attributes:
                if concept.similar(attribute):
                    attribute.merge(concept)
                    return
        self.attributes.append(concept)


@dataclass
class SceneEdge:
    source: SceneNode
    target: SceneNode
    relation: Concept


class SceneGraph:
    """A graph built tuple by tuple, merging similar concepts as SPICE does (``mergeSimilarNodes``)."""

    def __init__(self, wordnet: WordNet, merge: bool = True) -> None:
        self.wordnet = wordnet
        self.merge = merge
        self.nodes: list[SceneNode] = []
        self.edges: list[SceneEdge] = []

    def concept(self, word: str) -> Concept:
        return Concept({word}, set(self.wordnet.concept_synsets(word)))

    def add_tuple(self, tup: tuple[str, ...]) -> None:
        if len(tup) == 1:
            self.node(tup[0])
        elif len(tup) == 2:
            self.node(tup[0]).merge_attribute(self.concept(tup[1]), self.merge)
        elif len(tup) == 3:
            self.add_relation(self.node(tup[0]), self.node(tup[1]), tup[2])

    def add_relation(self, source: SceneNode, target: SceneNode, relation: str) -> None:
        word = relation[3:] if relation.startswith("be ") else relation  # "be on" -> "on"
        concept = self.concept(word)
        same_ends = [e for e in self.edges if e.source is source and e.target is target]
        if any(e.relation.same(concept) for e in same_ends):
            return
        if self.merge:
            for edge in same_ends:
                if concept.similar(edge.relation):
                    edge.relation.merge(concept)
                    return
        self.edges.append(SceneEdge(source, target, concept))

    def node(self, word: str) -> SceneNode:
        concept = self.concept(word)
        best, best_similarity = None, 0.0
        for node in self.nodes:
            if node.object.same(concept):
                return node
            similarity = concept.similarity(node.object)
            if similarity > best_similarity:
                best, best_similarity = node, similarity
        if self.merge and best is not None:
            best.object.merge(concept)
            return best
        node = SceneNode(concept)
        self.nodes.append(node)
        return node

    def tuples(self) -> list[tuple[Concept, ...]]:
        """TupleSet: objects, object-attribute pairs, subject-relation-object triples."""
        out: list[tuple[Concept, ...]] = []
        for node in self.nodes:
            out.append((node.object,))
            out.extend((node.object, attribute) for attribute in node.attributes)
        out.extend((e.source.object, e.relation, e.target.object) for e in self.edges)
        return out


def build_graph(tuple_lists: Iterable[Iterable[tuple[str, ...]]], wordnet: WordNet) -> SceneGraph:
    """One scene graph from the tuples of one or several captions (the references of an image)."""
    graph = SceneGraph(wordnet)
    for tuples in tuple_lists:
        for tup in tuples:
            graph.add_tuple(tup)
    return graph


class Evaluation(NamedTuple):
    f: float
    precision: float
    recall: float
    tp: int
    fp: int
    fn: int


def evaluate(candidate: list[tuple[Concept, ...]], reference: list[tuple[Concept, ...]], allow_nan: bool) -> Evaluation:
    """SPICE's Evaluation: matched candidate tuples over candidate and reference tuple counts."""
    tp = sum(any(_tuples_similar(c, r) for r in reference) for c in candidate)
    fp, fn = len(candidate) - tp, len(reference) - tp
    if not reference:
        value = math.nan if allow_nan else 0.0
        return Evaluation(value, value, value, tp, fp, fn)
    recall = tp / len(reference)
    precision = tp / len(candidate) if candidate else 0.0
    f = 2 * precision * recall / (precision + recall) if precision > 0 and recall > 0 else 0.0
    return Evaluation(f, precision, recall, tp, fp, fn)


def _tuples_similar(a: tuple[Concept, ...], b: tuple[Concept, ...]) -> bool:
    return len(a) == len(b) and all(x.similar(y) for x, y in zip(a, b))


# TupleFilter's subsets.
_SMALL_NUMBERS = frozenset("one two three four five six seven eight nine ten".split())
_COLORS = frozenset(
    "black brown blue red yellow pink gray grey green dark light white cream orange purple maroon beige violet".split()
)
_SIZES = frozenset(
    "baby illimitable scrawny beefy immeasurable short big immense sizable bony infinitesimal skeletal boundless "
    "lanky skimpy brawny large skinny broad lean slender bulky life-size slim chunky limitless small colossal little "
    "squat compact mammoth stocky corpulent massive stout cosmic meager strapping cubby measly sturdy curvy "
    "microscopic tall elfin mini teensy emaciated miniature teeny endless minuscule teeny-tiny enormous minute "
    "teeny-weeny epic narrow thick expansive obese thickset extensive outsized thin fat oversize tiny fleshy "
    "overweight titanic full-size paltry towering gargantuan petite trifling gaunt pint-size trim giant plump tubby "
    "gigantic pocket-size undersized grand portly underweight great pudgy unlimited heavy puny vast hefty rotund wee "
    "huge scanty whopping hulking scraggy wide".split()
)


def _attribute_in(words: frozenset[str]) -> Callable[[tuple[Concept, ...]], bool]:
    # TupleFilter compares the concept's printed form: a merged attribute ("red/crimson") never matches.
    return lambda t: len(t) == 2 and len(t[1].words) == 1 and next(iter(t[1].words)) in words


SUBSETS: dict[str, Callable[[tuple[Concept, ...]], bool]] = {
    "Object": lambda t: len(t) == 1,
    "Attribute": lambda t: len(t) == 2,
    "Relation": lambda t: len(t) == 3,
    "Cardinality": _attribute_in(_SMALL_NUMBERS),
    "Color": _attribute_in(_COLORS),
    "Size": _attribute_in(_SIZES),
}
