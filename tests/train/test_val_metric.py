"""val.metric: what best/ is kept by (auto: the metric the reward optimises), recorded in every checkpoint."""

import json
import logging

import pytest
import torch

from rlcap import api
from rlcap.cli import main
from rlcap.errors import ConfigError, RlcapError
from rlcap.train import validation as train_evaluate
from rlcap.train.checkpoint import load_checkpoint
from rlcap.run_config import RunConfig, ValConfig, auto_val_metric
from rlcap.train.validation import Evaluation
from rlcap.train.logger import read_log
from rlcap.train.validation import validation_scores
from tests.tiny import tiny_overrides


@pytest.mark.parametrize("algorithm, weights, expected", [
    ("pg", {"spider": 1.0}, "SPIDEr"),
    ("scst", {"spider": 1.0}, "SPIDEr"),
    ("pg", {"bcmr": 1.0}, "BCMR"),
    ("pg", {"cider_d": 1.0}, "CIDEr"),
    ("ac", {"cider_d": 1.0, "embedding": 0.5}, "CIDEr"),
    ("scst", {"spice": 1.0}, "CIDEr"),             # neither spider nor bcmr: CIDEr-D
    ("xe", {"spider": 1.0}, "CIDEr"),              # xe does not learn from the reward
    ("embedding", {"cider_d": 1.0}, "CIDEr"),
])
def test_auto_is_the_metric_the_reward_optimises(algorithm, weights, expected):
    cfg = api.load_run_config(None, [f"algorithm={algorithm}", f"reward.weights={weights}"], shared=True)
    assert cfg.val.metric == expected
    assert auto_val_metric(cfg.learned_reward) == expected


def test_auto_is_resolved_when_the_config_is_built():
    assert RunConfig().val.metric == "CIDEr"
    cfg = api.load_run_config(None, ["algorithm=pg", "reward.weights={spider: 1.0}"])
    assert cfg.val.metric == "SPIDEr"
    assert api.load_run_config(None, ["algorithm=pg", "reward.weights={bcmr: 1.0}"]).val.metric == "BCMR"
    # a metric named explicitly stays what it is
    explicit = api.load_run_config(None, ["algorithm=pg", "reward.weights={spider: 1.0}", "val.metric=SPICE"])
    assert explicit.val.metric == "SPICE"


def test_shipped_pg_recipes_select_by_their_reward():
    assert api.load_run_config("configs/shapes_pg_spider.yaml").val.metric == "SPIDEr"
    assert api.load_run_config("configs/shapes_pg_bcmr.yaml").val.metric == "BCMR"
    assert api.load_run_config("configs/shapes_pg_cider.yaml").val.metric == "CIDEr"
    assert api.load_run_config("configs/shapes_xe.yaml").val.metric == "CIDEr"


def test_an_unknown_metric_is_refused_listing_the_allowed_ones():
    with pytest.raises(ConfigError) as err:
        api.load_run_config(None, ["val.metric=BLEU"])
    message = str(err.value)
    assert "val.metric" in message and "'BLEU'" in message
    for name in ("auto", "CIDEr", "SPICE", "SPIDEr", "METEOR", "Bleu_4", "ROUGE_L", "BCMR"):
        assert f"'{name}'" in message
    with pytest.raises(ConfigError):
        ValConfig(metric="Div-1").validate()  # a diversity metric does not pick a captioner


def test_combined_metrics_are_computed_from_their_parts():
    asked = []

    def corpus_of(names):
        asked.append(names)
        corpus = {"CIDEr": 1.0, "SPICE": 0.2, "Bleu_4": 0.3, "METEOR": 0.25, "ROUGE_L": 0.5}
        return {name: corpus[name] for name in names}

    assert validation_scores(corpus_of, "SPIDEr") == {"CIDEr": 1.0, "SPICE": 0.2, "SPIDEr": 0.6}  # (1.0 + 0.2) / 2
    bcmr = validation_scores(corpus_of, "BCMR")  # 0.3 + 1.0 + 0.25 + 0.5
    assert bcmr["BCMR"] == pytest.approx(2.05) and bcmr["CIDEr"] == 1.0
    assert validation_scores(corpus_of, "CIDEr") == {"CIDEr": 1.0}
    assert validation_scores(corpus_of, "Bleu_4") == {"CIDEr": 1.0, "Bleu_4": 0.3}
    assert asked == [["CIDEr", "SPICE"], ["CIDEr", "Bleu_4", "METEOR", "ROUGE_L"], ["CIDEr"], ["CIDEr", "Bleu_4"]]


# Per epoch: CIDEr-D is best at epoch 1, BLEU-4 at epoch 2.
SCRIPTED = [{"CIDEr": 0.9, "Bleu_4": 0.10}, {"CIDEr": 0.5, "Bleu_4": 0.30}]


def _scripted_scores(monkeypatch):
    """Validation decodes for real, but scores the captions with SCRIPTED's values, epoch by epoch."""
    calls = []

    def score(split, predictions, metrics):
        calls.append(list(metrics))
        values = SCRIPTED[len(calls) - 1]
        return Evaluation(predictions, {m: values[m] for m in metrics}, {})

    monkeypatch.setattr(train_evaluate, "score_predictions", score)
    return calls


def test_best_is_the_epoch_the_chosen_metric_picks(tiny_data, tmp_path, monkeypatch, capsys, caplog):
    dataset, feats = tiny_data
    calls = _scripted_scores(monkeypatch)
    out = tmp_path / "run"
    overrides = tiny_overrides(dataset, feats, out, **{"val.metric": "Bleu_4", "xe.epochs": 2})
    with caplog.at_level(logging.INFO, logger="rlcap.train.session"):
        assert main(["train", "tests/train/empty.yaml", *overrides]) == 0
    assert calls == [["CIDEr", "Bleu_4"], ["CIDEr", "Bleu_4"]]
    best = load_checkpoint(out / "best", with_trainer=False).manifest
    assert best["epoch"] == 2  # CIDEr-D would have kept epoch 1
    assert best["best_metric"] == "Bleu_4" and best["best_value"] == 0.30
    assert best["metrics"] == {"CIDEr": 0.5, "Bleu_4": 0.30}
    last = load_checkpoint(out / "last")
    assert last.manifest["best_metric"] == "Bleu_4" and last.manifest["best_value"] == 0.30
    assert last.trainer["progress"]["best_metric"] == "Bleu_4"
    assert json.loads((out / "config.json").read_text())["val"]["metric"] == "Bleu_4"
    assert last.config["val"]["metric"] == "Bleu_4"
    assert "epoch 1: val Bleu_4 0.1000 (best), CIDEr-D 0.9000" in caplog.messages
    assert "epoch 2: val Bleu_4 0.3000 (best), CIDEr-D 0.5000" in caplog.messages
    assert "best val Bleu_4 0.3000" in capsys.readouterr().out
    val = [r for r in read_log(out / "log.jsonl") if r["split"] == "val"]
    assert [(r["CIDEr"], r["Bleu_4"]) for r in val] == [(0.9, 0.10), (0.5, 0.30)]


def test_cider_keeps_the_other_epoch(tiny_data, tmp_path, monkeypatch, caplog):
    """The same scripted scores, selected by CIDEr-D: epoch 1, and the log says CIDEr-D."""
    dataset, feats = tiny_data
    calls = _scripted_scores(monkeypatch)
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **{"xe.epochs": 2}))
    assert cfg.val.metric == "CIDEr"
    with caplog.at_level(logging.INFO, logger="rlcap.train.session"):
        result = api.train(cfg)
    assert calls == [["CIDEr"], ["CIDEr"]]
    assert (result.best_metric, result.best_score) == ("CIDEr", 0.9)
    best = load_checkpoint(tmp_path / "run" / "best", with_trainer=False).manifest
    assert (best["epoch"], best["best_metric"], best["best_value"]) == (1, "CIDEr", 0.9)
    assert "epoch 2: val CIDEr-D 0.5000" in caplog.messages


def test_spider_validation_scores_spice_for_real(tiny_data, tmp_path):
    dataset, feats = tiny_data
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **{
        "val.metric": "SPIDEr", "xe.epochs": 1}))
    result = api.train(cfg)
    (val,) = [r for r in read_log(tmp_path / "run" / "log.jsonl") if r["split"] == "val"]
    assert val["SPIDEr"] == pytest.approx((val["CIDEr"] + val["SPICE"]) / 2)
    assert 0 <= val["SPICE"] <= 1
    assert (result.best_metric, result.best_score) == ("SPIDEr", val["SPIDEr"])


def test_a_checkpoint_without_best_metric_resumes_by_cider(tiny_data, tmp_path, caplog):
    """A run written before val.metric existed has kept best/ by CIDEr-D: resumed, it goes on so."""
    dataset, feats = tiny_data
    out = tmp_path / "run"
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, out, **{"xe.epochs": 1})))
    trainer_file = out / "last" / "trainer.pt"
    trainer = torch.load(trainer_file, weights_only=False)
    del trainer["progress"]["best_metric"]  # as rlcap wrote it before val.metric
    torch.save(trainer, trainer_file)
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, out, **{
        "xe.epochs": 2, "val.metric": "Bleu_4"}))
    with caplog.at_level(logging.WARNING, logger="rlcap.train.session"):
        result = api.train(cfg, resume=True)
    assert result.best_metric == "CIDEr"
    assert any("goes on with CIDEr" in m for m in caplog.messages)
    assert json.loads((out / "config.json").read_text())["val"]["metric"] == "CIDEr"
    assert load_checkpoint(out / "last", with_trainer=False).manifest["best_metric"] == "CIDEr"


def test_meteor_without_java_is_refused_before_training(tiny_data, tmp_path, monkeypatch):
    dataset, feats = tiny_data

    def no_java():
        raise RlcapError("METEOR and SPICE need Java 8 or newer: `java` is not on PATH")

    monkeypatch.setattr("rlcap.metrics.java.java_executable", no_java)
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **{"val.metric": "BCMR"}))
    with pytest.raises(ConfigError, match="val.metric BCMR needs METEOR"):
        api.train(cfg)
    assert not (tmp_path / "run" / "last").exists()


@pytest.mark.parametrize("algorithm, settings, metric", [
    ("embedding", {"embedding.epochs": 1, "embedding.batch_size": 8, "embedding.model.word_dim": 8,
                   "embedding.model.hidden_dim": 8, "embedding.model.joint_dim": 8}, "mean_R"),
    ("critic", {"critic.epochs": 1, "critic.batch_size": 16}, "F1"),
])
def test_auxiliary_loops_name_their_own_metric(tiny_data, tmp_path, capsys, algorithm, settings, metric):
    dataset, feats = tiny_data
    out = tmp_path / algorithm
    overrides = tiny_overrides(dataset, feats, out, algorithm=algorithm, **settings)
    assert main(["train", "tests/train/empty.yaml", *overrides]) == 0
    (val,) = [r for r in read_log(out / "log.jsonl") if r["split"] == "val"]
    assert f"best val {metric} {val[metric]:.4f}" in capsys.readouterr().out
    manifest = load_checkpoint(out / "best", with_trainer=False).manifest
    assert (manifest["best_metric"], manifest["best_value"]) == (metric, val[metric])
