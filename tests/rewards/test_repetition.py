"""The n-gram repetition penalty (rewards/repetition.py, [Yeo25]), by hand."""

from __future__ import annotations

import pytest

from rlcap.errors import ConfigError
from rlcap.rewards import RewardBatch, RewardConfig, build_reward
from rlcap.rewards.repetition import RepetitionPenalty, repeated_share

# a looping caption of the every-shape row (docs/BENCHMARKS.md): 12 words, 10 trigrams, of which "a purple circle"
# twice and "purple circle on" once repeat one before them: 7 distinct, 3 / 10 repeated
LOOP = "a purple circle below a purple circle on a purple circle on"
PLAIN = "a yellow heart to the right of a red triangle"  # 10 words, 8 distinct trigrams
TWO_ALIKE = "A red square, to the right of a red Square."  # 10 words once the tokenizer drops case and commas
REFS = ["a red square beside another red square"]


def test_the_share_of_repeated_ngrams_by_hand():
    assert repeated_share(LOOP.split(), 3) == pytest.approx(0.3)
    assert repeated_share(PLAIN.split(), 3) == 0.0
    assert repeated_share("a red square on a red square".split(), 3) == pytest.approx(0.2)  # 5 trigrams, 4 distinct
    assert repeated_share("a red".split(), 3) == 0.0  # shorter than n: no n-gram to repeat
    assert repeated_share("a a a a".split(), 1) == pytest.approx(0.75)  # 4 unigrams, 1 distinct
    # n = 4 no longer sees the shape named twice, only the loop's "a purple circle on"
    assert repeated_share(LOOP.split(), 4) == pytest.approx(1 / 9)  # 9 four-grams, 8 distinct
    with pytest.raises(ValueError, match=">= 1"):
        repeated_share(["a"], 0)


def test_the_reward_reads_words_as_the_metrics_do_and_is_weighted():
    batch = RewardBatch(["1", "1", "1"], [REFS] * 3)
    captions = [LOOP, PLAIN, TWO_ALIKE]
    assert RepetitionPenalty()(captions, batch).tolist() == pytest.approx([-0.3, 0.0, -1 / 8])
    with build_reward(RewardConfig(weights={"repetition": 0.5}), {}) as reward:
        assert reward(captions, batch).tolist() == pytest.approx([-0.15, 0.0, -1 / 16])  # the weight scales it
    with build_reward(RewardConfig(weights={"repetition": 1.0}, repetition_ngram=4), {}) as reward:
        assert reward(captions, batch).tolist() == pytest.approx([-1 / 9, 0.0, 0.0])
    with pytest.raises(ValueError):
        RepetitionPenalty()(captions, RewardBatch(["1"], [REFS]))  # one image for three captions


def test_the_ngram_setting_is_checked_and_read_only_with_the_reward():
    with pytest.raises(ConfigError, match="reward.repetition_ngram"):
        RewardConfig(weights={"repetition": 1.0}, repetition_ngram=0)
    assert RewardConfig(weights={"repetition": 1.0}).reads("repetition_ngram")
    assert not RewardConfig(weights={"cider_d": 1.0}).reads("repetition_ngram")
