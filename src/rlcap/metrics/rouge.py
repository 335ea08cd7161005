"""ROUGE-L as pycocoevalcap computes it: LCS-based F-measure with beta = 1.2, taking the best
precision and the best recall over the references separately."""

from __future__ import annotations

from collections.abc import Sequence

BETA = 1.2


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence, bit-parallel (Hyyro 2004) on Python ints.

    Each bit of ``v`` stands for a position of ``a``; a zero bit marks an LCS step.
    """
    if not a or not b:
        return 0
    masks: dict[str, int] = {}
    for i, token in enumerate(a):
        masks[token] = masks.get(token, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for token in b:
        u = v & masks.get(token, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - bin(v).count("1")


def rouge_l(cand: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """ROUGE-L of one tokenized caption; an empty caption scores 0."""
    if not cand:
        return 0.0
    lcs = [lcs_length(ref, cand) for ref in refs]
    prec = max(l / len(cand) for l in lcs)
    rec = max(l / len(ref) if ref else 0.0 for l, ref in zip(lcs, refs))
    if prec == 0 or rec == 0:
        return 0.0
    return ((1 + BETA**2) * prec * rec) / (rec + BETA**2 * prec)
