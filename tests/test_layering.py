"""What the layering rules of tests/test_imports.py moved: corpus scores combined from metrics live with the metrics
(and the bcmr reward takes its weights from them), ``val.metric: auto`` follows the reward registry, and the
transformers helpers data/ and encoders/ share live below both."""

from __future__ import annotations

import sys

import pytest

from rlcap.errors import RlcapError
from rlcap.metrics.combined import BCMR_WEIGHTS, COMBINED, parts_of, with_combined
from rlcap.rewards.bcmr import BCMR_WEIGHTS as REWARD_WEIGHTS
from rlcap.rewards.bcmr import PART_REWARDS
from rlcap.rewards.registry import OPTIMISES, REWARDS
from rlcap.rewards.reward_config import RewardConfig
from rlcap.run_config import VAL_METRICS, auto_val_metric
from rlcap.transformers_io import import_transformers


def test_combined_scores_by_hand():
    corpus = {"CIDEr": 1.2, "SPICE": 0.2, "Bleu_4": 0.3, "METEOR": 0.25, "ROUGE_L": 0.5}
    asked = []
    scores = with_combined(lambda names: asked.append(names) or {n: corpus[n] for n in names},
                           ["SPIDEr", "BCMR", "CIDEr"])
    assert scores["SPIDEr"] == pytest.approx(0.7)  # (1.2 + 0.2) / 2
    assert scores["BCMR"] == pytest.approx(2.25)    # 0.3 + 1.2 + 0.25 + 0.5
    assert asked == [["CIDEr", "SPICE", "Bleu_4", "METEOR", "ROUGE_L"]]  # each part scored once
    assert with_combined(lambda names: {n: corpus[n] for n in names}, ["Bleu_4"]) == {"Bleu_4": 0.3}  # passed through
    assert parts_of("BCMR") == ("Bleu_4", "CIDEr", "METEOR", "ROUGE_L") and parts_of("METEOR") == ("METEOR",)


def test_the_bcmr_reward_weighs_its_parts_as_the_metric_does():
    assert {PART_REWARDS[metric]: w for metric, w in BCMR_WEIGHTS.items()} == REWARD_WEIGHTS
    assert set(PART_REWARDS.values()) <= set(REWARDS) and set(PART_REWARDS) == set(COMBINED["BCMR"].parts)


def test_auto_val_metric_is_what_the_reward_registry_says(monkeypatch):
    assert set(OPTIMISES.values()) <= set(COMBINED) <= set(VAL_METRICS)
    assert auto_val_metric(RewardConfig(weights={"spider": 1.0, "bcmr": 1.0})) == "SPIDEr"  # the first named
    assert auto_val_metric(RewardConfig(weights={"cider_d": 1.0})) == "CIDEr"
    monkeypatch.setitem(OPTIMISES, "cider_d", "BCMR")  # a reward registered as optimising a combined metric
    assert auto_val_metric(RewardConfig(weights={"cider_d": 1.0})) == "BCMR"


def test_missing_transformers_is_one_line_naming_what_needs_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # (import then raises ImportError)
    with pytest.raises(RlcapError, match=r"^model.arch=hf needs transformers: pip install 'rlcap\[hf\]'$"):
        import_transformers("model.arch=hf")
