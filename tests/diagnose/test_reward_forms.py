"""Each form of caption's mean reward and leave-one-out advantage among an image's samples, by hand."""

import math

import pytest
import torch

from rlcap.diagnose.reward_forms import OTHER, form_advantages, form_labels

# image 0: rewards 1, 2, 3 labelled a, b, b; image 1: rewards 0, 0, 3 labelled b, b, b
# leave-one-out advantages: image 0: 1 - 2.5, 2 - 2, 3 - 1.5 = -1.5, 0, 1.5; image 1: 0 - 1.5, 0 - 1.5, 3 - 0 = -1.5,
# -1.5, 3
REWARDS = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]])
LABELS = torch.tensor([[0, 1, 1], [1, 1, 1]])


def test_advantages_by_hand():
    got = form_advantages(REWARDS, LABELS, 3)
    assert got.samples.tolist() == [1, 5, 0]
    assert got.images.tolist() == [1, 2, 0]
    assert got.contested.tolist() == [1, 1, 0]  # a and b share image 0; image 1 is b's alone
    assert got.mean_reward[:2].tolist() == pytest.approx([1.0, 8 / 5])
    assert got.mean_advantage[:2].tolist() == pytest.approx([-1.5, 1.5 / 5])  # b: (0 + 1.5 - 1.5 - 1.5 + 3) / 5
    assert math.isnan(got.mean_reward[2]) and math.isnan(got.mean_advantage[2])  # a label no sample carries


def test_advantages_sum_to_zero_over_the_labels():
    """Every image's leave-one-out advantages sum to 0, so the labels' counts times their mean advantages do too,
    however the samples are labelled; a label's mean advantage is the long way's."""
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(9, 5, generator=gen)
    labels = torch.randint(0, 4, (9, 5), generator=gen)
    got = form_advantages(rewards, labels, 4)
    present = got.samples > 0
    assert float((got.samples[present] * got.mean_advantage[present]).sum()) == pytest.approx(0.0, abs=1e-12)
    for f in range(4):
        long_way = [float(rewards[n, k] - (rewards[n].sum() - rewards[n, k]) / 4)
                    for n in range(9) for k in range(5) if labels[n, k] == f]
        if long_way:
            assert float(got.mean_advantage[f]) == pytest.approx(sum(long_way) / len(long_way), rel=1e-6)


def test_a_form_the_reward_does_not_tell_apart_has_no_advantage():
    # the same reward for every sample of an image: whatever the labels, no advantage
    rewards = torch.tensor([[0.7, 0.7, 0.7], [0.2, 0.2, 0.2]])
    got = form_advantages(rewards, torch.tensor([[0, 1, 1], [0, 0, 1]]), 2)
    assert got.mean_advantage.tolist() == pytest.approx([0.0, 0.0])
    assert got.mean_reward.tolist() == pytest.approx([(0.7 + 0.2 + 0.2) / 3, (0.7 + 0.7 + 0.2) / 3])


def test_bad_shapes_and_labels():
    with pytest.raises(ValueError, match="expected rewards"):
        form_advantages(torch.zeros(2, 1), torch.zeros(2, 1, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="expected rewards"):
        form_advantages(torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="labels must lie in 0 .. 1"):
        form_advantages(torch.zeros(1, 2), torch.tensor([[0, 2]]), 2)


def test_the_first_form_matched_labels_a_caption():
    forms = {"third": r"(circle|square).*(circle|square).*(circle|square)", "count": r"with (two|another) other",
             "two": r"(circle|square).*(circle|square)"}
    captions = [["a red circle left of a blue square and a green circle", "a red circle with two other shapes"],
                ["a red circle left of a blue square with two other shapes", "a dog"]]
    labels, names = form_labels(captions, forms)
    assert names == ["third", "count", "two", OTHER]
    # the count phrase's caption names two shapes too: the first form listed that it matches wins
    assert labels.tolist() == [[0, 1], [1, 3]]
