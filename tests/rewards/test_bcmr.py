"""The bcmr reward ([Liu17]'s BCMR): the equal-weight sum of its four metrics; its METEOR is closed.

One METEOR process only (a Java start takes seconds on a loaded machine)."""

import pytest
import torch

from rlcap.rewards import RewardBatch, RewardConfig, build_reward
from rlcap.rewards.bcmr import BCMR_WEIGHTS


@pytest.mark.java
def test_bcmr_is_the_sum_of_bleu4_cider_meteor_rouge():
    refs = {"1": ["A red car.", "a red car parked on the street"], "2": ["a dog runs", "a brown dog"]}
    batch = RewardBatch(["1", "1", "2"], [refs["1"], refs["1"], refs["2"]])
    captions = ["a red car parked", "a dog", "a brown dog runs"]
    assert BCMR_WEIGHTS == {"bleu_4": 1.0, "cider_d": 1.0, "meteor": 1.0, "rouge_l": 1.0}
    without_java = {"bleu_4": 1.0, "cider_d": 1.0, "rouge_l": 1.0}
    with build_reward(RewardConfig(weights=without_java, eos_counts=True), refs) as others:
        expected = others.components(captions, batch)
    with build_reward(RewardConfig(weights={"bcmr": 1.0}, eos_counts=True), refs) as bcmr:
        got = bcmr(captions, batch)
        inner = bcmr.rewards["bcmr"]
        parts = inner.components(captions, batch)
    assert set(parts) == set(BCMR_WEIGHTS)
    for name in without_java:  # BLEU-4 and CIDEr-D follow eos_counts as the plain rewards do
        assert torch.allclose(parts[name], expected[name])
    assert bool(((parts["meteor"] > 0) & (parts["meteor"] <= 1)).all())
    assert torch.allclose(got, sum(parts.values()), atol=1e-6)
    assert inner.rewards["meteor"].meteor._proc.poll() is not None, "closing the run's reward stops METEOR"
