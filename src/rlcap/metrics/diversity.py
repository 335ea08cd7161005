"""Diversity of generated captions.

- Div-1 / Div-2 (Chen & Jin, [Chen20], section 3.2, after
  Wang et al.): over the set of captions of one image, the number of distinct unigrams
  (bigrams) divided by the number of *words* in the set (for both), then averaged over images.
- mBLEU-4 (same section): each caption of an image scored with BLEU-4 against the image's
  other captions; mean over captions, then over images (images with one caption are skipped).
- Self-BLEU (Zhu et al. / Texygen, cited as [37] in [Chaffin24]):
  each caption of the corpus scored with BLEU-4 against all the other captions; the mean.
- vocabulary size and novelty (share of captions never seen among the training captions).
- the template share: the share of the corpus's captions that hold its most frequent 4-gram (counted once a caption),
  the phrase a policy folds into when a reward likes it best ("to the right of" in 76-100% of the RL rows of
  ``make bench-grpo``, 8.2% of the training references).

BLEU-4 here is pycocoevalcap's per-caption BLEU-4 (:func:`rlcap.metrics.bleu.sentence_bleu`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from rlcap.metrics.bleu import BleuStats, bleu_stats, closest_length, sentence_bleu
from rlcap.metrics.ngrams import Ngram, ngram_counts

Tokens = Sequence[str]


def distinct_n(captions: Sequence[Tokens], n: int) -> float:
    """Distinct n-grams of one image's captions over their number of words (0 if no words)."""
    words = sum(len(c) for c in captions)
    grams = {tuple(c[i : i + n]) for c in captions for i in range(len(c) - n + 1)}
    return len(grams) / words if words else 0.0


def mbleu4(captions: Sequence[Tokens]) -> float:
    """Mean BLEU-4 of each caption against the other captions of the same image (>= 2)."""
    if len(captions) < 2:
        raise ValueError("mBLEU-4 needs at least two captions")
    scores = [sentence_bleu(bleu_stats(c, [*captions[:i], *captions[i + 1 :]]))[3] for i, c in enumerate(captions)]
    return sum(scores) / len(scores)


def self_bleu(captions: Sequence[Tokens]) -> float:
    """Mean BLEU-4 of each caption against all the other captions (needs >= 2 captions).

    Linear time: the clipping count "max over the others" of an n-gram is its largest count
    unless this caption alone holds it, then the second largest.
    """
    if len(captions) < 2:
        raise ValueError("Self-BLEU needs at least two captions")
    counts = [ngram_counts(c) for c in captions]
    top: dict[Ngram, list[int]] = {}  # ngram -> [largest count, how many hold it, second largest]
    for caption_counts in counts:
        for g, k in caption_counts.items():
            best = top.setdefault(g, [0, 0, 0])
            if k > best[0]:
                best[:] = [k, 1, best[0]]
            elif k == best[0]:
                best[1] += 1
            elif k > best[2]:
                best[2] = k
    length_counts = Counter(len(c) for c in captions)
    total = 0.0
    for caption, caption_counts in zip(captions, counts):
        others = {g: (b[0] if k < b[0] or b[1] > 1 else b[2]) for g, k in caption_counts.items() for b in (top[g],)}
        own = len(caption)
        lengths = [l for l, m in length_counts.items() if l != own or m > 1]
        stats = _stats(caption, caption_counts, others, closest_length(own, lengths))
        total += sentence_bleu(stats)[3]
    return total / len(captions)


def _stats(caption: Tokens, counts: Counter[Ngram], others: dict[Ngram, int], reflen: int) -> BleuStats:
    correct = [0, 0, 0, 0]
    for g, k in counts.items():
        correct[len(g) - 1] += min(k, others[g])
    guess = tuple(max(0, len(caption) - k + 1) for k in range(1, 5))
    return BleuStats(len(caption), reflen, guess, tuple(correct))


def template(captions: Sequence[Tokens], n: int = 4) -> tuple[Ngram | None, float]:
    """The n-gram the most captions hold (each caption counted once; ties: the first in sorted order) and the share
    of ``captions`` that hold it; (None, 0.0) when no caption has n words."""
    held: Counter[Ngram] = Counter()
    for caption in captions:
        held.update({tuple(caption[i : i + n]) for i in range(len(caption) - n + 1)})
    if not held:
        return None, 0.0
    top = max(sorted(held), key=lambda gram: held[gram])  # (max keeps the first of the most held)
    return top, held[top] / len(captions)


def vocabulary_size(captions: Iterable[Tokens]) -> int:
    return len({w for c in captions for w in c})


def novelty(captions: Sequence[Tokens], training_captions: Iterable[Tokens]) -> float:
    """Share of captions whose token sequence never occurs among the training captions."""
    seen = {tuple(c) for c in training_captions}
    return sum(tuple(c) not in seen for c in captions) / len(captions) if captions else 0.0
