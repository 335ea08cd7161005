"""The bcmr reward (001's BCMR): the equal-weight sum of its four metrics; its METEOR is closed."""

import pytest
import torch

from rlcap.rewards import RewardBatch, RewardConfig, build_reward
from rlcap.rewards.bcmr import BCMR_WEIGHTS


@pytest.mark.parametrize("eos_counts", [True, False])
def test_bcmr_is_the_sum_of_bleu4_cider_meteor_rouge(eos_counts):
    refs = {"1": ["A red car.", "a red car parked on the street"], "2": ["a dog runs", "a brown dog"]}
    batch = RewardBatch(["1", "1", "2"], [refs["1"], refs["1"], refs["2"]])
    captions = ["a red car parked", "a dog", "a brown dog runs"]
    assert BCMR_WEIGHTS == {"bleu_4": 1.0, "cider_d": 1.0, "meteor": 1.0, "rouge_l": 1.0}
    with build_reward(RewardConfig(weights=dict(BCMR_WEIGHTS), eos_counts=eos_counts), refs) as parts:
        expected = parts(captions, batch)
    with build_reward(RewardConfig(weights={"bcmr": 1.0}, eos_counts=eos_counts), refs) as bcmr:
        got = bcmr(captions, batch)
        meteor = bcmr.rewards["bcmr"].rewards["meteor"].meteor
    assert torch.allclose(got, expected, atol=1e-6) and bool((got > 0).all())
    assert meteor._proc.poll() is not None, "closing the run's reward must stop bcmr's METEOR process"
