"""Agreement of the Python parser with the official SPICE parser on phrases with known tuples.

The file format is that of ``../shared/data/spice/official_parser_outputs.txt``: a phrase, a tab,
then tuples ``( a )``, ``( a , is , b )``, ``( a , rel , b )`` joined by " , ". Where a line has
attribute or relation tuples, its object-only tuples are left out; so objects are compared as the
nodes that the attribute and relation tuples mention when there are any (on both sides alike), else
as the object tuples. ``objects_listed`` compares complete object sets, on the lines that list only
objects (all our graph's objects against theirs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from rlcap.metrics.spice.graph import build_graph
from rlcap.metrics.spice.parser import SpiceParser

Element = str
_TUPLE = re.compile(r"\(\s*(.*?)\s*\)(?:\s*,\s*|\s*$)")


class TypeScores(NamedTuple):
    precision: float
    recall: float
    f: float
    tp: int
    predicted: int
    official: int


class Typed(NamedTuple):
    objects: set[Element]
    attributes: set[tuple[Element, Element]]
    relations: set[tuple[Element, Element, Element]]


def read_official(path: Path) -> list[tuple[str, list[tuple[str, ...]]]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        phrase, _, tuples = line.partition("\t")
        parsed = [tuple(p.strip() for p in m.group(1).split(" , ")) for m in _TUPLE.finditer(tuples.strip())]
        rows.append((phrase, parsed))
    return rows


def _canonical(label: str) -> str:
    return "/".join(sorted(label.split("/")))


def typed(tuples: Sequence[tuple[str, ...]]) -> Typed:
    """Tuples in the official printed form ((o), (o, is, a), (s, r, o)) split by type."""
    attributes = {(_canonical(t[0]), _canonical(t[2])) for t in tuples if len(t) == 3 and t[1] == "is"}
    relations = {tuple(_canonical(x) for x in t) for t in tuples if len(t) == 3 and t[1] != "is"}
    mentioned = {a for a, _ in attributes} | {r[0] for r in relations} | {r[2] for r in relations}
    objects = mentioned if mentioned else {_canonical(t[0]) for t in tuples if len(t) == 1}
    return Typed(objects, attributes, relations)  # type: ignore[arg-type]


def printed_tuples(parser: SpiceParser, phrases: Sequence[str]) -> list[list[tuple[str, ...]]]:
    """Our scene graph of each phrase in the official printed form."""
    out = []
    for tuples in parser.parse(phrases):
        graph = build_graph([tuples], parser.wordnet)
        printed: list[tuple[str, ...]] = []
        for t in graph.tuples():
            labels = [c.label() for c in t]
            printed.append((labels[0], "is", labels[1]) if len(t) == 2 else tuple(labels))
        out.append(printed)
    return out


def agreement(official: list[tuple[str, list[tuple[str, ...]]]], ours: list[list[tuple[str, ...]]]) -> dict[str, TypeScores]:
    """Micro-averaged precision, recall and F of our tuples against the official ones, per type."""
    counts = {name: [0, 0, 0] for name in (*Typed._fields, "objects_listed")}
    for (_, theirs), mine in zip(official, ours, strict=True):
        a, b = typed(mine), typed(theirs)
        pairs = [(name, getattr(a, name), getattr(b, name)) for name in Typed._fields]
        if all(len(t) == 1 for t in theirs):
            pairs.append(("objects_listed", {_canonical(t[0]) for t in mine if len(t) == 1}, b.objects))
        for name, x, y in pairs:
            counts[name][0] += len(x & y)
            counts[name][1] += len(x)
            counts[name][2] += len(y)
    scores = {}
    for name, (tp, predicted, gold) in counts.items():
        p = tp / predicted if predicted else 0.0
        r = tp / gold if gold else 0.0
        scores[name] = TypeScores(p, r, 2 * p * r / (p + r) if p + r else 0.0, tp, predicted, gold)
    return scores
