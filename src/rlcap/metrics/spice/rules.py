"""SPICE 1.0's scene-graph rules (``SpiceParser.parseAnnotation``) on a Stanford-style graph.

Each rule below is one Semgrex pattern of SpiceParser, applied in SpiceParser's order; a rule proposes
tuples of lemmas: ``(object,)``, ``(object, attribute)`` or ``(subject, object, relation)`` (SPICE's
own order; the scene graph turns the last into the edge subject -relation-> object). Conjunction
sharing comes from the CC-processed graph (SpiceParser's own NOUN_CONJ step compares a string with a
word and never fires, so it is left out).
"""

from __future__ import annotations

from rlcap.metrics.spice.depgraph import DepGraph

Tuple = tuple[str, ...]
_OBJECT_RELATIONS = ("iobj", "dobj")


def _is_noun(graph: DepGraph, index: int) -> bool:
    return graph.node(index).tag in ("NN", "NNS", "NNP", "NNPS")


def _is_plural(graph: DepGraph, index: int) -> bool:
    return graph.node(index).tag in ("NNS", "NNPS")


def _is_object_relation(rel: str) -> bool:
    return rel in _OBJECT_RELATIONS or rel.startswith("nmod:")


def _lemma(graph: DepGraph, index: int) -> str:
    return graph.node(index).lemma.strip().lower()


def _predicate(graph: DepGraph, pred: int) -> str:
    """getPredicate: the verb's lemma with its particle ("pick up"); "be" + particle keeps the particle."""
    particle = graph.child(pred, "compound:prt")
    lemma = _lemma(graph, pred)
    if particle is None:
        return lemma
    return f"{'' if lemma == 'be' else lemma} {graph.node(particle).word}"


def _with_preposition(predicate: str, rel: str) -> str:
    if rel.startswith("nmod:") and rel not in ("nmod:poss", "nmod:agent"):
        return predicate + rel.replace("nmod:", " ").replace("_", " ")
    return predicate


def scene_tuples(graph: DepGraph) -> list[Tuple]:
    """The tuples SpiceParser proposes for one sentence, in its order."""
    out: list[Tuple] = []
    _subject_verb_object(graph, out)
    _verb_modifiers_of_nouns(graph, out)
    _subject_predicate(graph, out)
    for gov, rel, dep in graph.edges:  # ADJ_MOD: a smart woman
        if rel == "amod":
            out.append((_lemma(graph, gov), _lemma(graph, dep)))
    for gov, rel, dep in graph.edges:  # ADJ_PRED: the man is tall
        if rel == "nsubj" and graph.node(gov).tag.startswith("J"):
            out.append((_lemma(graph, dep), _lemma(graph, gov)))
    for gov, rel, dep in graph.edges:  # PP_MOD: a woman in the house
        if _is_noun(graph, gov) and rel.startswith("nmod:") and rel not in ("nmod:poss", "nmod:agent"):
            out.append((_lemma(graph, gov), _lemma(graph, dep), rel[len("nmod:") :].replace("_", " ")))
    for gov, rel, dep in graph.edges:  # POSS: his watch
        if rel == "nmod:poss" and _is_noun(graph, gov) and _is_noun(graph, dep):
            out.append((_lemma(graph, dep), _lemma(graph, gov), "have"))
    _passive_agent(graph, out)
    _numbers_on_plurals(graph, out)
    compounds = set()
    for gov, rel, dep in graph.edges:  # COMPOUND_NOUN: street sign -> sign is street
        if rel == "compound" and _is_noun(graph, gov) and _is_noun(graph, dep):
            compounds.update((gov, dep))
            out.append((_lemma(graph, gov), _lemma(graph, dep)))
    for node in graph.nodes:  # NOUN: every noun outside a compound is an object
        if _is_noun(graph, node.index) and node.index not in compounds and _in_graph(graph, node.index):
            out.append((_lemma(graph, node.index),))
    return out


def _in_graph(graph: DepGraph, index: int) -> bool:
    return index in graph.roots or bool(graph.parents(index)) or bool(graph.children(index))


def _subject_verb_object(graph: DepGraph, out: list[Tuple]) -> None:
    """SUBJ_PRED_OBJ_TRIPLET: a man is riding a horse -> (man, horse, ride)."""
    for pred in _governors(graph):
        if graph.child(pred, "cop") is not None:
            continue
        subjects = [d for r, d in graph.children(pred, "nsubj") if _is_noun(graph, d)]
        objects = [(r, d) for r, d in graph.children(pred) if _is_object_relation(r) and _is_noun(graph, d)]
        for subj in subjects:
            for rel, obj in objects:
                predicate = _with_preposition(_predicate(graph, pred), rel)
                out.append((_lemma(graph, subj), _lemma(graph, obj), predicate))


def _verb_modifiers_of_nouns(graph: DepGraph, out: list[Tuple]) -> None:
    """ACL: a cat sitting in a chair -> (cat, chair, sit in)."""
    for subj, rel, pred in list(graph.edges):
        if rel != "acl" or not graph.node(pred).tag.startswith("V"):
            continue
        fragment = subj in graph.roots and graph.node(pred).tag == "VBG"
        # CoreNLP 3.6.0 reads "man riding an elephant" and "a man sitting on a bench" (a singular
        # noun) as noun phrases, whose participle no SPICE rule turns into a relation; a plural
        # noun ("birds flying in the sky") it reads as a clause, and the preposition gives one
        singular = graph.node(subj).tag in ("NN", "NNP")
        for obj_rel, obj in graph.children(pred):
            if fragment and (obj_rel in _OBJECT_RELATIONS or singular):
                continue
            if _is_object_relation(obj_rel) and _is_noun(graph, obj):
                predicate = _with_preposition(_predicate(graph, pred), obj_rel)
                out.append((_lemma(graph, subj), _lemma(graph, obj), predicate))


def _subject_predicate(graph: DepGraph, out: list[Tuple]) -> None:
    """SUBJ_PRED_PAIR (a woman is smiling) then COPULAR (the man is a rider; the cat is on the bed)."""
    pairs, copulars = [], []
    for pred in _governors(graph):
        has_cop = graph.child(pred, "cop") is not None
        for subj in (d for r, d in graph.children(pred, "nsubj") if _is_noun(graph, d)):
            if has_cop:
                copulars.append((pred, subj))
            elif not any(_is_object_relation(r) and _is_noun(graph, d) for r, d in graph.children(pred)):
                pairs.append((pred, subj))
    for pred, subj in pairs + copulars:
        case = graph.child(pred, "case")
        if case is not None:
            words = [graph.node(case).word, *(graph.node(d).word for _, d in graph.children(case, "mwe"))]
            out.append((_lemma(graph, subj), _lemma(graph, pred), " ".join(words)))
        elif _lemma(graph, pred) != "be":
            out.append((_lemma(graph, subj), _lemma(graph, pred)))


def _passive_agent(graph: DepGraph, out: list[Tuple]) -> None:
    """AGENT: a man is hit by a car -> (car, man, hit)."""
    for pred in _governors(graph):
        if not graph.node(pred).tag.startswith("V"):
            continue
        agents = [d for r, d in graph.children(pred, "nmod:agent") if _is_noun(graph, d)]
        patients = [d for r, d in graph.children(pred, "nsubjpass") if _is_noun(graph, d)]
        for subj in agents:
            for obj in patients:
                out.append((_lemma(graph, subj), _lemma(graph, obj), _predicate(graph, pred)))


def _numbers_on_plurals(graph: DepGraph, out: list[Tuple]) -> None:
    """checkForNumericAttribute on plural nouns: "two dogs" -> (dog, two); "a lot of dogs" -> (dog, a)."""
    for node in graph.nodes:
        if not _is_plural(graph, node.index) or not _in_graph(graph, node.index):
            continue
        number = graph.child(node.index, "nummod")
        if number is not None:
            if number < node.index:  # not "number 5"
                out.append((_lemma(graph, node.index), _lemma(graph, number)))
        else:
            quantity = graph.child(node.index, "qmod")
            if quantity is not None:
                out.append((_lemma(graph, node.index), _lemma(graph, quantity)))


def _governors(graph: DepGraph) -> list[int]:
    return sorted({g for g, _, _ in graph.edges})
