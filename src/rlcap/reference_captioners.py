"""Reference captioners that need no training: the nearest-neighbour and the concepts-template captioners.

The nearest-neighbour captioner (Devlin et al. 2015, "Exploring nearest neighbor approaches for
image captioning") copies a caption of the training image closest to the test image in encoder
feature space (cosine similarity of the pooled vectors). Among that image's captions it takes
the one with the highest consensus: the CIDEr-D of each caption against the image's other
captions, with document frequencies taken from all the caption sets so compared.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from rlcap.data.concepts.features import FEATURE_DIM, nearest_concepts
from rlcap.data.concepts.glove import load_glove
from rlcap.data.loader import SplitData
from rlcap.errors import DataError
from rlcap.metrics import score_captions


def nearest_images(train: SplitData, query: SplitData, chunk: int = 1024) -> torch.Tensor:
    """For each query image, the row of the most similar training image: (Nq,) long."""
    keys = torch.nn.functional.normalize(train.fc.float(), dim=1)          # (Nt, D)
    out = []
    for start in range(0, len(query), chunk):
        q = torch.nn.functional.normalize(query.fc[start:start + chunk].float(), dim=1)  # (c, D)
        out.append((q @ keys.T).argmax(dim=1))                            # (c,)
    return torch.cat(out)


def consensus_captions(split: SplitData, rows: list[int]) -> dict[int, str]:
    """For each image row, its caption with the highest CIDEr-D against its other captions."""
    refs, preds, owner = {}, {}, {}
    for row in rows:
        caps = split.refs[row]
        if len(caps) == 1:
            continue
        for i, cap in enumerate(caps):
            key = f"{row}#{i}"
            refs[key] = caps[:i] + caps[i + 1:]
            preds[key] = [cap]
            owner[key] = (row, i)
    best: dict[int, tuple[float, int]] = {}
    if preds:
        report = score_captions(refs, preds, ["CIDEr"])
        for key, (row, i) in owner.items():
            score = report.per_image[key]["CIDEr"]
            if row not in best or score > best[row][0]:
                best[row] = (score, i)
    return {row: split.refs[row][best[row][1]] if row in best else split.refs[row][0] for row in rows}


def nearest_neighbour_predictions(train: SplitData, query: SplitData) -> dict[str, str]:
    """Image id -> the consensus caption of its nearest training image."""
    nearest = nearest_images(train, query).tolist()
    chosen = consensus_captions(train, sorted(set(nearest)))
    return {image_id: chosen[row] for image_id, row in zip(query.ids, nearest)}


# The concepts-template captioner (docs/CONCEPTS.md) reads the scene from the feature store alone:
# each region of a dataset built by `rlcap data concepts` is a GloVe vector and a part-of-speech
# one-hot, so its concept is the word whose GloVe vector is nearest (cosine) among the training
# captions' words and GloVe's 100,000 most frequent (a lemma such as "lay" may be absent from the
# training captions of a small split), and the part of speech of its one-hot. It sees the same noisy regions as a model does (distractors
# included, dropped concepts missing); reading concepts.json instead would need the dataset path,
# which a reference captioner is not given, and would only repeat the same regions.
PREPOSITIONS = ("on", "in", "at", "with", "of", "near", "by", "under", "behind", "over", "down", "across")
ARTICLES = ("a", "an", "the")
MAX_NOUNS = 3
GLOVE_CANDIDATES = 100_000


class WordStats(NamedTuple):
    """What the template takes from the training captions."""

    count: Counter  # word -> occurrences
    position: dict[str, float]  # word -> mean relative position in its captions (0 first, 1 last)
    before: dict[str, Counter]  # noun -> what comes before "a/the NOUN": a preposition, or "" after an -ing verb


def word_stats(captions: Sequence[Sequence[str]]) -> WordStats:
    count: Counter = Counter()
    place: defaultdict[str, float] = defaultdict(float)
    before: defaultdict[str, Counter] = defaultdict(Counter)
    for words in captions:
        for i, w in enumerate(words):
            count[w] += 1
            place[w] += i / max(len(words) - 1, 1)
            if i >= 2 and words[i - 1] in ARTICLES:
                prev = words[i - 2]
                if prev in PREPOSITIONS:
                    before[w][prev] += 1
                elif prev.endswith("ing"):
                    before[w][""] += 1
    return WordStats(count, {w: place[w] / count[w] for w in count}, dict(before))


def ing_form(verb: str, stats: WordStats) -> str:
    """The -ing form of a verb lemma, the most frequent candidate in the training captions."""
    forms = [verb + "ing", verb[:-1] + "ing" if verb.endswith("e") and not verb.endswith("ee") else "",
             verb + verb[-1] + "ing"]
    return max((f for f in forms if f), key=lambda f: stats.count[f])


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def template_caption(concepts: Sequence, stats: WordStats) -> str:
    """"a <adj> <noun> <verb>ing [<prep>] a <noun> <prep> a <noun>": nouns and verbs in the order
    they usually take in captions (mean relative position), prepositions the most frequent before
    each noun. ``concepts`` are (word, pos) pairs."""
    by_pos: dict[str, list[str]] = {"noun": [], "verb": [], "adj": []}
    for word, pos in concepts:
        if word not in by_pos[pos]:
            by_pos[pos].append(word)
    nouns, verbs, adjs = (sorted(by_pos[p], key=lambda w: stats.position.get(w, 0.5))  # unseen: mid-caption
                          for p in ("noun", "verb", "adj"))
    if not nouns:
        return " ".join(["a", *adjs[:1], *(ing_form(v, stats) for v in verbs[:1])] or ["a", "picture"])
    head = [*adjs[:1], nouns[0]]
    words = [_article(head[0]), *head]
    if verbs:
        words.append(ing_form(verbs[0], stats))
    for k, noun in enumerate(nouns[1:MAX_NOUNS]):
        ways = stats.before.get(noun, Counter())
        if not (verbs and k == 0):  # only the verb's first noun can be its direct object
            ways = Counter({p: n for p, n in ways.items() if p}) or Counter({"with": 1})
        prep = ways.most_common(1)[0][0] if ways else ""
        words += [*([prep] if prep else []), _article(noun), noun]
    return " ".join(words)


def scene_concepts(split: SplitData, words: list[str], vectors: np.ndarray) -> list[list[tuple[str, str]]]:
    """The (word, pos) of every region of every image: each distinct region vector decoded once."""
    if split.att_dim != FEATURE_DIM:
        raise DataError(f"the template captioner reads concept features ({FEATURE_DIM}-d, from `rlcap data "
                        f"concepts`); this feature store has {split.att_dim}-d features")
    mask = split.att_mask.numpy()                                     # (N, R)
    rows = split.att.float().numpy()[mask]                            # (M, 53) every real region
    distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
    decoded = nearest_concepts(distinct, words, vectors)
    flat = [decoded[i] for i in np.asarray(inverse).reshape(-1).tolist()]
    counts = mask.sum(axis=1).tolist()
    starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
    return [[tuple(c) for c in flat[starts[i]:starts[i + 1]]] for i in range(len(counts))]


def template_predictions(train: SplitData, query: SplitData) -> dict[str, str]:
    """Image id -> the template caption of its concept regions."""
    captions = [t for image in train.tokens for t in image]
    stats = word_stats(captions)
    glove = load_glove()
    words, vectors = glove.table([*glove.words[:GLOVE_CANDIDATES], *sorted(stats.count)])
    scenes = scene_concepts(query, words, vectors)
    return {image_id: template_caption(concepts, stats) for image_id, concepts in zip(query.ids, scenes)}
