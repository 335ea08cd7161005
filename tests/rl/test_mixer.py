"""MIXER's schedule of M and its XE / REINFORCE masks, hand-computed."""

import pytest
import torch

from rlcap.data.vocab import EOS, PAD
from rlcap.rl.mixer import mixer_masks, mixer_prefix_len


def test_prefix_len_anneals_by_delta_every_stage_down_to_zero():
    assert [mixer_prefix_len(e, start=6, delta=2, epochs_per_stage=2) for e in range(8)] == [6, 6, 4, 4, 2, 2, 0, 0]
    # a delta that does not divide start still stops at 0
    assert [mixer_prefix_len(e, start=5, delta=2, epochs_per_stage=1) for e in range(5)] == [5, 3, 1, 0, 0]
    # the shapes recipe: 8, 6, 4, 2 for two epochs each, then 0 for the rest of the 12
    assert [mixer_prefix_len(e, 8, 2, 2) for e in range(12)] == [8, 8, 6, 6, 4, 4, 2, 2, 0, 0, 0, 0]


def test_prefix_len_refuses_bad_settings():
    with pytest.raises(ValueError, match="delta >= 1"):
        mixer_prefix_len(0, 4, 0, 1)


def test_masks_split_the_reference_prefix_from_the_sampled_words():
    targets = torch.tensor([[5, 6, EOS, PAD], [7, EOS, PAD, PAD], [4, 5, 6, EOS]])
    # row 0: "5 6" forced, two sampled words; row 1: its reference is shorter than M (ended);
    # row 2: "4 5" forced, then one sampled word and EOS
    sample_mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    xe, rl = mixer_masks(targets != PAD, sample_mask, 2)
    assert xe.tolist() == [[True, True], [True, True], [True, True]]
    assert rl.int().tolist() == [[0, 0, 1, 1, 0], [0, 0, 0, 0, 0], [0, 0, 1, 1, 0]]


def test_masks_at_the_ends_of_the_schedule():
    targets = torch.tensor([[5, 6, EOS, PAD]])
    sample_mask = torch.tensor([[1, 1, 1]], dtype=torch.bool)
    xe, rl = mixer_masks(targets != PAD, sample_mask, 0)  # M = 0: all REINFORCE
    assert xe.shape == (1, 0) and rl.tolist() == [[True, True, True]]
    xe, rl = mixer_masks(targets != PAD, sample_mask, 6)  # M beyond the reference: all XE (words and EOS)
    assert xe.tolist() == [[True, True, True, False]] and not rl.any()
