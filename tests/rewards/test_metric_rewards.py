"""The metric rewards on hand-computed examples, with and without the EOS token."""

import math

import pytest
import torch

from rlcap.errors import DataError
from rlcap.rewards import EOS_TOKEN, BleuReward, CiderDReward, MeteorReward, RewardBatch, RougeLReward

# Two training images; document frequencies: "a" in both (idf 0), "dog", "cat" in one (idf ln 2).
TRAIN_REFS = {"1": ["A dog."], "2": ["a cat"]}


def batch(*ids, refs=None):
    default = {"1": ["a dog"], "2": ["a cat"]}
    return RewardBatch(list(ids), refs or [default[i] for i in ids])


def test_cider_d_hand_computed_without_eos():
    reward = CiderDReward(TRAIN_REFS, eos_counts=False)
    # "A dog." -> [a, dog]: n=1 and n=2 vectors equal the reference's (cosine 1); no 3-, 4-grams.
    # CIDEr-D = 10 * (1 + 1 + 0 + 0) / 4 = 5; "a" alone has idf 0 -> 0.
    out = reward(["A dog.", "a", "a dog"], batch("1", "1", "2"))
    assert torch.allclose(out, torch.tensor([5.0, 0.0, 0.0]))


def test_cider_d_hand_computed_with_eos():
    reward = CiderDReward(TRAIN_REFS, eos_counts=True)
    # [a, dog, <eos>] vs [a, dog, <eos>]: 1-, 2- and 3-grams match (cosine 1 each) -> 10 * 3/4
    assert torch.allclose(reward(["a dog"], batch("1")), torch.tensor([7.5]))


@pytest.mark.parametrize("eos_counts", [False, True])
def test_cider_d_empty_caption_is_zero(eos_counts):
    reward = CiderDReward(TRAIN_REFS, eos_counts=eos_counts)
    assert torch.equal(reward(["", "a dog"], batch("1", "1"))[:1], torch.zeros(1))


def test_cider_d_caches_document_frequencies(tmp_path):
    cache = tmp_path / "cider.npz"
    first = CiderDReward(TRAIN_REFS, eos_counts=True, cache=cache)
    assert cache.is_file()
    second = CiderDReward(TRAIN_REFS, eos_counts=True, cache=cache)
    assert second.scorer.fingerprint == first.scorer.fingerprint
    assert second.scorer.document_frequency([EOS_TOKEN]) == 2  # the end token is in every image


def test_bleu_2_hand_computed():
    refs = [["a dog runs fast"]]
    # no EOS: precisions 3/3, 2/2; brevity penalty exp(1 - 4/3)
    plain = BleuReward(2, eos_counts=False)(["a dog runs"], batch("1", refs=refs))
    assert plain.item() == pytest.approx(math.exp(1 - 4 / 3), rel=1e-5)
    # EOS: [a dog runs <eos>] vs [a dog runs fast <eos>]: p1 = 4/4, p2 = 2/3; BP exp(1 - 5/4)
    eos = BleuReward(2, eos_counts=True)(["a dog runs"], batch("1", refs=refs))
    assert eos.item() == pytest.approx(math.sqrt(2 / 3) * math.exp(1 - 5 / 4), rel=1e-5)


def test_bleu_4_empty_caption_is_about_zero():
    out = BleuReward(4, eos_counts=False)(["", "a dog"], batch("1", "1"))
    assert out[0].item() == pytest.approx(0.0, abs=1e-9) and torch.isfinite(out).all()


def test_rouge_l_hand_computed_and_empty():
    # LCS("a dog runs", "a big dog runs") = 3: P = 1, R = 3/4, F = 2.44 * 0.75 / (0.75 + 1.44)
    out = RougeLReward()(["a dog runs", ""], batch("1", "1", refs=[["a big dog runs"]] * 2))
    assert torch.allclose(out, torch.tensor([2.44 * 0.75 / 2.19, 0.0]))


@pytest.mark.java
def test_meteor_matches_the_metrics_process():
    reward = MeteorReward()  # one Java process for both (each start costs seconds)
    try:
        captions = ["A dog runs.", "a cat", ""]
        refs = [["a dog runs", "a dog is running"]] * 2 + [["a cat sleeps"]]
        out = reward(captions, RewardBatch(["1", "1", "2"], refs))
        _, expected = reward.meteor.score(["a dog runs", "a cat", ""], refs)  # tokenized by hand
    finally:
        reward.close()
    assert torch.allclose(out, torch.tensor(expected))
    assert out[0] > 0.9 and out[2] == 0.0


def test_cider_d_rejects_tokenized_training_references():
    with pytest.raises(DataError, match="references of image '1': expected a list of caption strings"):
        CiderDReward({"1": [["a", "dog"]]}, eos_counts=True)


def test_cider_d_unknown_image_id():
    with pytest.raises(DataError, match="'9'"):
        CiderDReward(TRAIN_REFS, eos_counts=True)(["a dog"], batch("1", refs=[["a dog"]])._replace(image_ids=["9"]))
