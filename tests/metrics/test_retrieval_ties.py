"""Retrieval metrics with tied scores: R@k is the chance the right item lands in the top k when
tied items are shuffled uniformly (rlcap.metrics.retrieval), checked by hand and by enumerating
every tie order of small cases."""

from __future__ import annotations

import itertools
from fractions import Fraction
from statistics import median

import numpy as np
import pytest

from rlcap.errors import DataError
from rlcap.metrics.retrieval import RECALL_AT, Ties, image_to_text_ties, recall_probability, retrieval_metrics

# A 3 x 4 case with partial ties. Captions 0 and 1 belong to image 0, caption 2 to image 1,
# caption 3 to image 2.
SIM = np.array([[5.0, 5.0, 5.0, 2.0],
                [5.0, 3.0, 3.0, 3.0],
                [1.0, 4.0, 4.0, 4.0]])
OWNER = np.array([0, 0, 1, 2])


def test_image_to_text_by_hand():
    # image 0: own c0, c1 at 5 (m_r = 2), wrong c2 tied at 5 (m_w = 1), h = 0:
    #   P(rank 1) = 1 - C(1,1)/C(3,1) = 2/3; E[rank] = 1 + 1/3 = 4/3
    # image 1: own c2 at 3; c0 above (h = 1); c1, c3 tied (m_w = 2): rank uniform on 2..4, E = 3
    # image 2: own c3 at 4; c1, c2 tied (m_w = 2), h = 0: rank uniform on 1..3, E = 2
    out = retrieval_metrics(SIM, OWNER)
    assert out["i2t_R@1"] == pytest.approx(100 * (2 / 3 + 0 + 1 / 3) / 3)  # 33.3; the old rule gave 66.7
    assert out["i2t_R@5"] == pytest.approx(100.0)
    assert out["i2t_R@10"] == pytest.approx(100.0)
    assert out["i2t_MedR"] == pytest.approx(2.0)  # median(4/3, 3, 2)
    assert out["i2t_MRR"] == pytest.approx((3 / 4 + 1 / 3 + 1 / 2) / 3)  # 19/36


def test_image_to_text_top_2_and_3_by_hand():
    ties = image_to_text_ties(SIM, OWNER)
    assert ties.higher.tolist() == [0, 1, 0]
    assert ties.wrong_tied.tolist() == [1, 2, 2]
    assert ties.right_tied.tolist() == [2, 1, 1]
    # image 0: 2 free places > m_w = 1 -> 1; image 1: rank uniform on 2..4; image 2: on 1..3
    assert recall_probability(ties, 2) == pytest.approx([1.0, 1 / 3, 2 / 3])
    assert recall_probability(ties, 3) == pytest.approx([1.0, 2 / 3, 1.0])


def test_text_to_image_by_hand():
    # c0 (image 0): column (5, 5, 1), image 1 tied: rank 1 or 2, P(1) = 1/2, E = 1.5
    # c1 (image 0): column (5, 3, 4): rank 1.   c2 (image 1): column (5, 3, 4): rank 3.
    # c3 (image 2): column (2, 3, 4): rank 1.
    out = retrieval_metrics(SIM, OWNER)
    assert out["t2i_R@1"] == pytest.approx(100 * (1 / 2 + 1 + 0 + 1) / 4)  # 62.5; the old rule gave 75
    assert out["t2i_R@5"] == pytest.approx(100.0)
    assert out["t2i_MedR"] == pytest.approx(1.25)  # median(1.5, 1, 3, 1)
    assert out["t2i_MRR"] == pytest.approx((2 / 3 + 1 + 1 / 3 + 1) / 4)


def test_several_right_items_in_a_tied_block():
    # h = 1, m_w = 3, m_r = 2. The block's first right item J: P(J > 1) = 3/5,
    # P(J > 2) = 3/5 * 2/4 = 3/10, P(J > 3) = 3/10 * 1/3 = 1/10, P(J > 4) = 0; rank = 1 + J.
    ties = Ties(np.array([1]), np.array([3]), np.array([2]))
    got = [recall_probability(ties, k)[0] for k in (1, 2, 3, 4, 5, 6)]
    assert got == pytest.approx([0.0, 2 / 5, 7 / 10, 9 / 10, 1.0, 1.0])
    # E[J] = 1 + 3/5 + 3/10 + 1/10 = 2 = 1 + m_w / (m_r + 1), so E[rank] = 3


def test_several_right_items_from_a_matrix():
    # image 0 owns c0, c2, c6: best own score 5 (c0, c2: m_r = 2), c1 above (h = 1), c3..c5 tied
    # (m_w = 3): the case above, P(rank 1) = 0, P(rank <= 5) = 1, E[rank] = 3.
    # image 1 owns c1, c3, c4, c5 and scores every caption 0: m_r = 4, m_w = 3 (c0, c2, c6), h = 0:
    # P(rank 1) = 1 - C(3,1)/C(7,1) = 4/7, E[rank] = 1 + 3/5 = 8/5.
    sim = np.array([[5.0, 9.0, 5.0, 5.0, 5.0, 5.0, 1.0], [0.0] * 7])
    owner = np.array([0, 1, 0, 1, 1, 1, 0])
    ties = image_to_text_ties(sim, owner)
    assert ties.higher.tolist() == [1, 0] and ties.wrong_tied.tolist() == [3, 3]
    assert ties.right_tied.tolist() == [2, 4]
    out = retrieval_metrics(sim, owner)
    assert out["i2t_R@1"] == pytest.approx(100 * (0 + 4 / 7) / 2)
    assert out["i2t_R@5"] == pytest.approx(100.0)
    assert out["i2t_MedR"] == pytest.approx((3 + 8 / 5) / 2)
    assert out["i2t_MRR"] == pytest.approx((1 / 3 + 5 / 8) / 2)


def test_one_caption_for_every_image():
    # The captioner writes the same caption for each of N images: every column of the similarity
    # matrix is the same vector s (image i's score against that caption), all distinct.
    n = 8
    s = np.random.default_rng(0).permutation(n).astype(float) / n
    sim = np.repeat(s[:, None], n, axis=1)  # (N, N): caption c is image c's
    out = retrieval_metrics(sim, np.arange(n))
    # I2T: all N captions tie for every image, its own is one of them: P(rank <= k) = min(k, N) / N
    assert out["i2t_R@1"] == pytest.approx(100 / n)  # the old rule gave 100
    assert out["i2t_R@5"] == pytest.approx(100 * 5 / n)
    assert out["i2t_R@10"] == pytest.approx(100.0)
    assert out["i2t_MedR"] == pytest.approx((n + 1) / 2)
    assert out["i2t_MRR"] == pytest.approx(2 / (n + 1))
    # T2I: caption c ranks the images by s, so its own image is at the rank of s[c] among s:
    # the captions' ranks are 1..N, once each
    assert out["t2i_R@1"] == pytest.approx(100 / n)
    assert out["t2i_R@5"] == pytest.approx(100 * 5 / n)
    assert out["t2i_MedR"] == pytest.approx((n + 1) / 2)
    assert out["t2i_MRR"] == pytest.approx(sum(1 / r for r in range(1, n + 1)) / n)


def test_best_of_50_generic_captions():
    # Each image is captioned by the one of 50 generic captions its retriever scores highest.
    # Images sharing a caption g (n_g of them) form one tie group: for each, its n_g copies of g
    # tie at the top (every other caption scores lower, g being the argmax), so P(rank <= k) =
    # min(k, n_g) / n_g and I2T R@1 = 100 * (distinct captions used) / N.
    rng = np.random.default_rng(1)
    n, dim = 300, 8
    images = rng.standard_normal((n, dim))
    generic = rng.standard_normal((50, dim))
    scores = images @ generic.T  # (N, 50)
    choice = scores.argmax(axis=1)  # (N,) each image's caption
    sim = scores[:, choice]  # (N, N): a caption's column is its generic caption's scores
    out = retrieval_metrics(sim, np.arange(n))
    used, sizes = np.unique(choice, return_counts=True)
    assert 1 < len(used) < 50 and sizes.max() > 5  # real tie groups, of several sizes
    assert out["i2t_R@1"] == pytest.approx(100 * len(used) / n)
    assert out["i2t_R@5"] == pytest.approx(100 * np.minimum(5, sizes).sum() / n)
    # T2I has no ties here (the images differ): the strict rule
    assert {k: out[k] for k in out if k.startswith("t2i")} == pytest.approx(
        {k: v for k, v in strict_metrics(sim, np.arange(n)).items() if k.startswith("t2i")})


def strict_metrics(sim: np.ndarray, owner: np.ndarray) -> dict[str, float]:
    """The strict rule, query by query: 1 + the items scored strictly higher than the best right one."""
    t2i = [1 + sum(sim[i, c] > sim[owner[c], c] for i in range(sim.shape[0])) for c in range(sim.shape[1])]
    i2t = []
    for i in sorted(set(owner.tolist())):
        best = max(sim[i, c] for c in range(sim.shape[1]) if owner[c] == i)
        i2t.append(1 + sum(sim[i, c] > best for c in range(sim.shape[1])))
    return summarise({"t2i": [(r, {k: float(r <= k) for k in RECALL_AT}) for r in t2i],
                      "i2t": [(r, {k: float(r <= k) for k in RECALL_AT}) for r in i2t]})


def summarise(queries: dict[str, list[tuple[float, dict[int, float]]]]) -> dict[str, float]:
    """(expected rank, {k: P(rank <= k)}) per query -> the metrics' dict."""
    out = {}
    for name, rows in queries.items():
        for k in RECALL_AT:
            out[f"{name}_R@{k}"] = 100 * float(np.mean([p[k] for _, p in rows]))
        out[f"{name}_MedR"] = float(median(r for r, _ in rows))
        out[f"{name}_MRR"] = float(np.mean([1 / r for r, _ in rows]))
    return out


def enumerated_metrics(sim: np.ndarray, owner: np.ndarray) -> dict[str, float]:
    """Exact reference: every tie order of every query's items, each equally likely. An order is a
    permutation of the items that breaks ties (higher score first, then earlier in the permutation);
    the rank is that of the first right item."""
    def query(scores: np.ndarray, right: set[int]) -> tuple[float, dict[int, float]]:
        n_items = len(scores)
        ranks = []
        for perm in itertools.permutations(range(n_items)):
            order = sorted(range(n_items), key=lambda c: (-scores[c], perm[c]))
            ranks.append(1 + min(order.index(c) for c in right))
        count = len(ranks)
        recall = {k: float(Fraction(sum(r <= k for r in ranks), count)) for k in RECALL_AT}
        return float(Fraction(sum(ranks), count)), recall

    t2i = [query(sim[:, c], {int(owner[c])}) for c in range(sim.shape[1])]
    i2t = [query(sim[i], {c for c in range(sim.shape[1]) if owner[c] == i}) for i in sorted(set(owner.tolist()))]
    return summarise({"t2i": t2i, "i2t": i2t})


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_matches_every_tie_order_enumerated(seed):
    # 4 images x 6 captions, scores in {0, 1, 2}: many ties, several right captions per image,
    # image 3 owns no caption (skipped in I2T) and is still a candidate in T2I
    sim = np.random.default_rng(seed).integers(0, 3, size=(4, 6)).astype(float)
    owner = np.array([0, 0, 1, 2, 2, 2])
    assert retrieval_metrics(sim, owner) == pytest.approx(enumerated_metrics(sim, owner), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_without_ties_is_the_strict_rule(seed):
    rng = np.random.default_rng(seed)
    sim = rng.standard_normal((7, 12))  # continuous: no two scores equal
    owner = rng.choice([0, 1, 2, 4, 5, 6], size=12)  # image 3 owns no caption
    owner[:6] = [0, 1, 2, 4, 5, 6]
    assert retrieval_metrics(sim, owner) == pytest.approx(strict_metrics(sim, owner), abs=1e-12)


def test_float32_ties_are_exact():
    # a float32 matrix is compared as it is: its equal scores tie (each image: its own caption and
    # the other one tie, P(rank 1) = 1/2)
    sim = np.array([[0.1, 0.1], [0.0, 0.0]], dtype=np.float32)
    assert retrieval_metrics(sim, np.array([0, 1]))["i2t_R@1"] == pytest.approx(100 * (1 / 2 + 1 / 2) / 2)


@pytest.mark.parametrize(
    ("sim", "owner", "message"),
    [
        (np.array([[0.5, np.nan]]), np.array([0, 0]), "NaN or infinite"),
        (np.zeros((2, 0)), np.zeros(0, dtype=int), "no caption columns"),
        (np.zeros((2, 2)), np.array([0, 2]), "outside 0..1"),
    ],
)
def test_bad_input_names_the_problem(sim, owner, message):
    with pytest.raises(DataError, match=message):
        retrieval_metrics(sim, owner)
