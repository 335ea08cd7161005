"""A spaCy parse turned into the dependency graph SPICE's rules read.

SPICE 1.0 applies its rules to Stanford CoreNLP 3.6.0's "collapsed CC-processed" Universal
Dependencies (``CollapsedCCProcessedDependenciesAnnotation``), after scenegraph-1.0's
``SemanticGraphEnhancer`` steps. spaCy's English models emit ClearNLP-style labels instead, so this
module rebuilds the parts of the Stanford graph the rules look at:

- prepositions collapsed into the relation name: ``prep(G, on) pobj(on, N)`` -> ``nmod:on(G, N)``
  with ``case(N, on)``; the agent of a passive -> ``nmod:agent``; two-word prepositions ("next to",
  "out of") -> ``nmod:next_to``, their later words ``mwe`` of the first (for copular predicates);
- copulas as UD has them: "the dog is brown" -> ``nsubj(brown, dog) cop(brown, is)``, "the cat is on
  the bed" -> ``nsubj(bed, cat) cop(bed, is) case(bed, on)``;
- relative clauses: the relative pronoun's relation moves to the noun it refers to;
- conjunctions shared (CC processing): the conjunct gets its first conjunct's governing relation and,
  for predicates, its subject;
- the enhancer's quantificational modifiers ("a lot of people" -> ``qmod(people, a)``, ``mwe(a, lot)``,
  ``mwe(a, of)``) and its pronoun resolution (a pronoun is replaced by the first noun of a
  breadth-first search from the root, if that noun comes earlier).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Node:
    index: int  # 1-based position in the sentence, as CoreNLP's IndexedWord
    word: str
    lemma: str
    tag: str


@dataclass
class DepGraph:
    nodes: list[Node]
    edges: list[tuple[int, str, int]] = field(default_factory=list)  # (governor, relation, dependent)
    roots: list[int] = field(default_factory=list)

    def children(self, gov: int, rel: str | None = None) -> list[tuple[str, int]]:
        """(relation, dependent) of ``gov`` in word order, optionally only relation ``rel``."""
        out = [(r, d) for g, r, d in self.edges if g == gov and (rel is None or r == rel)]
        return sorted(out, key=lambda x: x[1])

    def child(self, gov: int, rel: str) -> int | None:
        found = self.children(gov, rel)
        return found[0][1] if found else None

    def parents(self, dep: int) -> list[tuple[int, str]]:
        return [(g, r) for g, r, d in self.edges if d == dep]

    def add(self, gov: int, rel: str, dep: int) -> None:
        if (gov, rel, dep) not in self.edges and gov != dep:
            self.edges.append((gov, rel, dep))

    def remove(self, gov: int, rel: str, dep: int) -> None:
        self.edges.remove((gov, rel, dep))

    def node(self, index: int) -> Node:
        return self.nodes[index - 1]


_DEP_MAP = {  # spaCy (ClearNLP) label -> Stanford UD label; prep, pobj, agent, pcomp handled apart
    "dative": "iobj", "relcl": "acl:relcl", "prt": "compound:prt", "poss": "nmod:poss", "nmod": "compound",
    "oprd": "xcomp", "quantmod": "advmod", "intj": "discourse", "meta": "dep",
    "predet": "det:predet", "preconj": "cc:preconj",
}  # fmt: skip
# CoreNLP's two-word prepositions, collapsed into one relation ("next to" -> nmod:next_to).
_TWO_WORD_PREPOSITIONS = frozenset(
    ["next to", "close to", "ahead of", "out of", "because of", "instead of", "away from", "along with",
     "prior to", "due to", "according to", "apart from", "such as", "inside of", "outside of", "on to"]
)  # fmt: skip
_RELATIVE_PRONOUN_TAGS = ("WDT", "WP")
# SemanticGraphEnhancer's quantifier words (QUANT_MOD_PATTERN, 2 and 3).
_QUANT_1 = re.compile(
    r"(?i:lot|assortment|number|couple|bunch|handful|litany|sheaf|slew|dozen|series|variety|multitude|wad|"
    r"clutch|wave|mountain|array|spate|string|ton|range|plethora|heap|sort|form|kind|type|version|bit|pair|"
    r"triple|total)"
)
_QUANT_2 = re.compile(
    r"(?i:lots|many|several|plenty|tons|dozens|multitudes|mountains|loads|pairs|tens|hundreds|thousands|"
    r"millions|billions|trillions|[0-9]+s)"
)
_QUANT_3 = re.compile(
    r"(?i:some|all|both|neither|everyone|nobody|one|two|three|four|five|six|seven|eight|nine|ten|hundred|"
    r"thousand|million|billion|trillion|[0-9]+)"
)
# dcoref's singular pronouns (SimplePronounResolution looks for a singular antecedent for these).
_SINGULAR_PRONOUNS = frozenset("i me myself mine my yourself he him himself his she her herself hers it its itself one oneself".split())


@dataclass(frozen=True)
class Token:
    """One parsed word: lower-case form, Penn tag, spaCy (ClearNLP) label, head (0-based, itself for
    the root), its lemma."""

    word: str
    tag: str
    dep: str
    head: int
    lemma: str


def tokens_of(sentence, lemmas: list[str], tags: list[str] | None = None,
              deps: list[str] | None = None) -> list[Token]:  # sentence: spacy.tokens.Span
    """The sentence's tokens, with ``tags`` and ``deps`` in place of spaCy's where given."""
    start = sentence.start
    tags = tags if tags is not None else [t.tag_ for t in sentence]
    deps = deps if deps is not None else [t.dep_ for t in sentence]
    return [Token(t.lower_, tag, dep, t.head.i - start, lemma)
            for t, lemma, tag, dep in zip(sentence, lemmas, tags, deps, strict=True)]


def from_tokens(tokens: list[Token]) -> DepGraph:
    """The Stanford-style graph of one parsed sentence."""
    graph = DepGraph([Node(i + 1, t.word, t.lemma, t.tag) for i, t in enumerate(tokens)])
    for i, t in enumerate(tokens):
        if t.dep == "ROOT" or t.head == i:
            graph.roots.append(i + 1)
        elif t.dep not in ("prep", "pobj", "agent", "pcomp"):
            graph.add(t.head + 1, _DEP_MAP.get(t.dep, t.dep), i + 1)
    _flatten_compounds(graph)
    _collapse_prepositions(graph, tokens)
    _restructure_copulas(graph)
    _resolve_relative_pronouns(graph)
    _share_conjuncts(graph)
    _quantificational_modifiers(graph)
    _resolve_pronouns(graph)
    return graph


def _flatten_compounds(graph: DepGraph) -> None:
    """UD compounds are flat: in "kitchen counter top" both nouns modify "top", and the adjectives
    of a compound's modifier ("green street signs") modify its head."""
    changed = True
    while changed:
        changed = False
        for head, rel, dep in list(graph.edges):
            if rel != "compound" or dep > head:
                continue
            for inner_rel, inner in graph.children(dep):
                if inner_rel in ("compound", "amod", "nummod", "det") and inner < dep:
                    graph.remove(dep, inner_rel, inner)
                    graph.add(head, inner_rel, inner)
                    changed = True


def _collapse_prepositions(graph: DepGraph, tokens: list[Token]) -> None:
    children: list[list[int]] = [[] for _ in tokens]
    for i, t in enumerate(tokens):
        if t.head != i:
            children[t.head].append(i)

    def objects(prep: int) -> list[int]:
        return [c for c in children[prep] if tokens[c].dep == "pobj"]

    handled: set[int] = set()
    for i, t in enumerate(tokens):
        head = tokens[t.head]
        if i in handled or t.dep not in ("prep", "agent") or head.dep == "prep" and not objects(t.head):
            continue  # the second word of "out of" is handled with the first
        words, found = [i], objects(i)
        three = _three_word_preposition(tokens, children, i, found)
        if three is not None and not tokens[t.head].tag.startswith("NN"):
            words, found = [i, found[0], three], objects(three)  # "standing on top of": nmod:on_top_of
            handled.add(three)
        elif three is not None:  # a noun "on top of" X: CoreNLP gives (G, on, top) and (G, of, X)
            for obj in objects(three):
                graph.add(t.head + 1, "nmod:of", obj + 1)
                graph.add(obj + 1, "case", three + 1)
            handled.add(three)
        if i in handled:
            continue
        if not found:  # "out of trees": prep(out) -> prep(of) -> pobj(trees)
            inner = [c for c in children[i] if tokens[c].dep in ("prep", "pcomp") and objects(c)]
            if not inner:
                continue
            words, found = [i, inner[0]], objects(inner[0])
        gov = t.head
        if t.dep == "agent":
            name = "agent"
        else:
            two_words = f"{head.word} {t.word}" in _TWO_WORD_PREPOSITIONS
            if head.dep == "advmod" and two_words and head.head != t.head:
                # "hillside next to the water": nmod:next_to; after a verb CoreNLP keeps "next" an
                # adverb ("parked next to a plane": nmod:to)
                words = [t.head, i] if tokens[head.head].tag.startswith("NN") else [i]
                gov = head.head
            name = "_".join(tokens[w].word for w in words)
        for obj in found:
            graph.add(gov + 1, f"nmod:{name}", obj + 1)
            graph.add(obj + 1, "case", words[0] + 1)
            for extra in words[1:]:
                graph.add(words[0] + 1, "mwe", extra + 1)


def _three_word_preposition(tokens: list[Token], children: list[list[int]], prep: int, found: list[int]) -> int | None:
    """The "of" of "on top of" / "in front of" (CoreNLP's three-word prepositions), if ``prep`` starts one."""
    if len(found) != 1 or (tokens[prep].word, tokens[found[0]].word) not in (("on", "top"), ("in", "front")):
        return None
    return next((c for c in children[found[0]] if tokens[c].word == "of" and tokens[c].dep == "prep"), None)


def _restructure_copulas(graph: DepGraph) -> None:
    """UD heads a copular clause by its predicate: "is" becomes ``cop`` of the adjective, noun or PP."""
    for verb in [n.index for n in graph.nodes if n.lemma == "be" and n.tag.startswith("V")]:
        subject = graph.child(verb, "nsubj")
        expletive = graph.child(verb, "expl")
        attr = graph.child(verb, "attr") or graph.child(verb, "acomp")
        if expletive is not None and attr is not None:  # "there is a dog": the dog is the subject
            graph.remove(verb, _rel(graph, verb, attr), attr)
            graph.add(verb, "nsubj", attr)
            continue
        if subject is None:
            continue
        case_pred = None
        if attr is None:
            nmods = [(r, d) for r, d in graph.children(verb) if r.startswith("nmod:") and r not in ("nmod:npmod", "nmod:poss")]
            if not nmods:
                continue
            rel, case_pred = nmods[0]
            attr = case_pred
        _promote(graph, verb, attr)
        if case_pred is not None:
            _case_with_mwe(graph, case_pred, rel)


def _rel(graph: DepGraph, gov: int, dep: int) -> str:
    return next(r for g, r, d in graph.edges if g == gov and d == dep)


def _promote(graph: DepGraph, verb: int, pred: int) -> None:
    """Make ``pred`` the head of the clause of copula ``verb``."""
    graph.remove(verb, _rel(graph, verb, pred), pred)
    for gov, rel in graph.parents(verb):
        graph.remove(gov, rel, verb)
        graph.add(gov, rel, pred)
    if verb in graph.roots:
        graph.roots[graph.roots.index(verb)] = pred
    for rel, dep in graph.children(verb):
        graph.remove(verb, rel, dep)
        graph.add(pred, rel, dep)
    graph.add(pred, "cop", verb)


def _case_with_mwe(graph: DepGraph, pred: int, rel: str) -> None:
    """"is on top of the hill": the predicate is "hill" with case "on" and mwe "top", "of"."""
    noun = graph.node(pred)
    inner = [(r, d) for r, d in graph.children(pred) if r == "nmod:of"]
    if (rel, noun.lemma) in (("nmod:on", "top"), ("nmod:in", "front")) and inner:
        target = inner[0][1]
        case = graph.child(pred, "case")
        of_word = graph.child(target, "case")
        graph.remove(pred, "nmod:of", target)
        _promote_case(graph, pred, target)
        if case is not None:
            graph.add(target, "case", case)
            graph.add(case, "mwe", pred)
            if of_word is not None:
                graph.remove(target, "case", of_word)
                graph.add(case, "mwe", of_word)


def _promote_case(graph: DepGraph, old: int, new: int) -> None:
    for rel, dep in graph.children(old):
        if rel in ("nsubj", "cop"):
            graph.remove(old, rel, dep)
            graph.add(new, rel, dep)
    for gov, rel in graph.parents(old):
        graph.remove(gov, rel, old)
        graph.add(gov, rel, new)
    if old in graph.roots:
        graph.roots[graph.roots.index(old)] = new
    graph.edges = [(g, r, d) for g, r, d in graph.edges if not (g == old and r == "case")]


def _resolve_relative_pronouns(graph: DepGraph) -> None:
    for noun, rel, verb in [e for e in graph.edges if e[1] == "acl:relcl"]:
        for r, dep in graph.children(verb):
            if r in ("nsubj", "nsubjpass", "dobj") and graph.node(dep).tag in _RELATIVE_PRONOUN_TAGS:
                graph.remove(verb, r, dep)
                graph.add(verb, r, noun)


def _share_conjuncts(graph: DepGraph) -> None:
    for first, _, second in sorted([e for e in graph.edges if e[1] == "conj"], key=lambda e: (e[0], e[2])):
        cc = graph.child(first, "cc") or graph.child(second, "cc")
        word = graph.node(cc).word if cc is not None else "and"
        graph.remove(first, "conj", second)
        graph.add(first, f"conj:{word}", second)
        for gov, rel in graph.parents(first):
            if not rel.startswith("conj"):
                graph.add(gov, rel, second)
        subject = graph.child(first, "nsubj")
        if subject is not None and graph.child(second, "nsubj") is None and graph.node(second).tag[:1] in "VJN":
            graph.add(second, "nsubj", subject)
        if first in graph.roots and not graph.parents(second):
            graph.roots.append(second)


def _quantificational_modifiers(graph: DepGraph) -> None:
    """SemanticGraphEnhancer.processQuanftificationModifiers: "a lot of X" -> qmod(X, a) + mwe."""
    for quant, rel, gov in list(graph.edges):
        if not rel.startswith("nmod") or (quant, rel, gov) not in graph.edges:
            continue
        of_word = next((d for r, d in graph.children(gov, "case") if graph.node(d).word == "of"), None)
        if of_word is None or of_word != quant + 1 or not graph.node(gov).tag.startswith(("NN", "PRP")):
            continue
        word = graph.node(quant).word
        det = graph.child(quant, "det")
        if _QUANT_1.fullmatch(word) and det is not None and graph.node(det).word in ("a", "an"):
            extra = [d for r, d in graph.children(quant, "amod") if d < quant]
            _make_qmod(graph, quant, gov, sorted([det, quant, of_word, *extra]))
        elif _QUANT_2.fullmatch(word) or (_QUANT_3.fullmatch(word) and graph.node(gov).tag.startswith("NN")):
            extra = [d for r, d in graph.children(quant) if d < quant]
            _make_qmod(graph, quant, gov, sorted([quant, of_word, *extra]))


def _make_qmod(graph: DepGraph, quant: int, gov: int, words: list[int]) -> None:
    for parent, rel in graph.parents(quant):
        graph.remove(parent, rel, quant)
        graph.add(parent, rel, gov)
    if quant in graph.roots:
        graph.roots[graph.roots.index(quant)] = gov
    graph.edges = [(g, r, d) for g, r, d in graph.edges if not (g == quant and d == gov) and d not in words]
    graph.add(gov, "qmod", words[0])
    for other in words[1:]:
        graph.add(words[0], "mwe", other)


def _resolve_pronouns(graph: DepGraph) -> None:
    """SimplePronounResolution: a pronoun (not the first word) takes the first noun found breadth-first
    from the root (singular nouns only for singular pronouns), when that noun comes before it."""
    if not graph.roots:
        return
    resolved: dict[int, int] = {}
    for node in graph.nodes:
        if node.index > 1 and node.tag.startswith("PRP") and graph.parents(node.index):
            antecedent = _first_noun(graph, graph.roots[0], node.word in _SINGULAR_PRONOUNS)
            if antecedent is not None and antecedent < node.index:
                resolved[node.index] = antecedent
    for pronoun, mention in resolved.items():
        for gov, rel in graph.parents(pronoun):
            graph.remove(gov, rel, pronoun)
            graph.add(gov, rel, mention)
        for rel, dep in graph.children(pronoun):
            graph.remove(pronoun, rel, dep)
            graph.add(mention, rel, dep)


def _first_noun(graph: DepGraph, start: int, singular: bool, seen: frozenset[int] = frozenset()) -> int | None:
    queue, visited = [start], set(seen)
    while queue:
        current = queue.pop(0)
        if current in visited:
            continue
        visited.add(current)
        tag = graph.node(current).tag
        if tag in ("NN", "NNP") or (not singular and tag in ("NNS", "NNPS")):
            return current
        queue.extend(d for _, d in graph.children(current))
    parents = graph.parents(start)
    return _first_noun(graph, parents[0][0], singular, frozenset(visited)) if parents else None
