"""Where [Wang18]'s delta rewards put the credit of a wrong prefix: the bookkeeping by hand, then CIDEr-D
against plain CIDEr on moving-shapes captions."""

import pytest
import torch

from rlcap.errors import DataError
from rlcap.rewards import CiderDReward, RewardBatch
from rlcap.diagnose.credit_shift import prefix_credit, swapped_pairs


def words_of_my_clip(captions, batch):
    """An additive toy reward: the number of the caption's words that name its clip (clip "x": x1, x2, ...)."""
    return torch.tensor([float(sum(w.startswith(i) for w in c.split())) for c, i in zip(captions, batch.image_ids)])


def test_prefix_credit_by_hand():
    captions = ["x1 x2 x3 y1", "y1 y2 x1 y3", "z1 w w z2"]
    batch = RewardBatch(["x", "y", "z"], [[], [], []])
    # swap 2: "y1 y2 x3 y1" for x, "z1 w x1 y3" for y, "x1 x2 w z2" for z (the next caption's first words)
    assert [w for _, w in swapped_pairs([c.split() for c in captions], 2)] == [
        ["y1", "y2", "x3", "y1"], ["z1", "w", "x1", "y3"], ["x1", "x2", "w", "z2"]]
    # an additive reward credits each word where it stands: the first two words' rewards change
    # by -2 (x), -2 (y), -1 (z); the later words' by 0
    shift = prefix_credit(words_of_my_clip, captions, batch, swap=2)
    assert shift.captions == 3
    assert shift.wrong == pytest.approx(-5 / 3) and shift.later == pytest.approx(0.0)
    # left out: a caption of `swap` words or fewer, one whose donor is shorter, one the swap leaves as it is
    assert [i for i, _ in swapped_pairs([["a", "b"], ["a", "b", "c"], ["d"], ["d", "e", "f"]], 2)] == [3]
    with pytest.raises(DataError, match="no caption has more than 2 words"):
        prefix_credit(words_of_my_clip, ["x1 x2", "x1 x2 x3", "y1"], RewardBatch(["x", "y", "z"], [[]] * 3), swap=2)
    with pytest.raises(DataError, match="two clips"):
        prefix_credit(words_of_my_clip, ["x1 x2 x3"], RewardBatch(["x"], [[]]), swap=2)
    with pytest.raises(DataError, match="one caption per clip"):
        prefix_credit(words_of_my_clip, ["x1 x2 x3", "y1 y2 y3"], RewardBatch(["x", "x"], [[], []]), swap=2)


@pytest.fixture(scope="module")
def moving_shapes():
    """Caption 0 of 30 moving-shapes clips and the other four of each of 300 clips as references (the
    document frequencies); the captions alone, no video rendered."""
    from rlcap.data.synthetic.moving import MovingShapesConfig, clip_and_captions

    cfg = MovingShapesConfig()
    captions = {f"video{i}": [text for _, text, _ in clip_and_captions(cfg, i)[1]] for i in range(300)}
    refs = {vid: caps[1:] for vid, caps in captions.items()}
    ids = list(captions)[:30]
    return refs, [captions[i][0] for i in ids], RewardBatch(ids, [refs[i] for i in ids])


@pytest.mark.parametrize("eos_counts", [True, False])
def test_cider_d_moves_a_wrong_prefix_s_cost_onto_later_words_and_plain_cider_does_not(moving_shapes, eos_counts):
    refs, captions, batch = moving_shapes
    d = prefix_credit(CiderDReward(refs, eos_counts), captions, batch, swap=5)
    plain = prefix_credit(CiderDReward(refs, eos_counts, plain=True), captions, batch, swap=5)
    assert d.captions == plain.captions >= 25
    # CIDEr-D: the length penalty keeps a 5-word prefix near 0, so most of the drop lands on the
    # identical later words (with the end token: -0.36 on the wrong words, -0.59 on the later ones)
    assert d.later < d.wrong < 0
    # plain CIDEr: the wrong words take the drop (-2.15), the later words even gain (+0.80)
    assert plain.wrong < 0 < plain.later
