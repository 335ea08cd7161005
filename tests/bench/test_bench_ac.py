"""The actor-critic method in `rlcap bench`: its stages (XE, the embedding, actor-critic from XE) run
in order, and the ac stage's reward loads the embedding stage's best checkpoint (Stage.paths)."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from rlcap.bench.registry import BENCH_ROWS, BENCHMARKS, Benchmark, BenchRow, Stage, stages_of
from rlcap.bench.methods import train_stages
from rlcap.errors import ConfigError
from tests.tiny import make_tiny_dataset, tiny_overrides


def test_ac_stages_and_their_order():
    assert [s.name for s in stages_of(["ac"])] == ["xe", "embedding", "ac"]
    assert BENCH_ROWS["ac"].stages[-1].paths == (("embedding", "embedding"),)


def test_a_reward_stage_no_method_trains_is_refused(monkeypatch):
    monkeypatch.setitem(BENCH_ROWS, "orphan", BenchRow((Stage("x", "x", None, (("embedding", "e"),)),)))
    with pytest.raises(ConfigError, match="loads 'embedding' from 'e'"):
        stages_of(["orphan"])


def _recipe(path, items: dict):
    data = {}
    for key, value in items.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(str(value))
    path.write_text(yaml.safe_dump(data))


def test_ac_stages_train_in_order_with_the_embedding_path(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    tiny = dict(o.split("=", 1) for o in tiny_overrides("unused", "unused", "unused"))
    for key in ("data.dataset", "data.features", "out_dir"):
        del tiny[key]
    model = {k: v for k, v in tiny.items() if k.startswith("model.")}
    shared = {k: v for k, v in tiny.items() if not k.startswith("model.")}
    _recipe(configs / "tiny_xe.yaml", {**tiny, "algorithm": "xe", "xe.epochs": 1})
    _recipe(configs / "tiny_embedding.yaml", {**shared, "algorithm": "embedding", "embedding.epochs": 1,
                                              "embedding.batch_size": 8, "embedding.model.word_dim": 8,
                                              "embedding.model.hidden_dim": 8, "embedding.model.joint_dim": 8})
    _recipe(configs / "tiny_ac.yaml", {**shared, "algorithm": "ac", "rl.epochs": 1, "rl.batch_size": 8,
                                       "rl.n_samples": 2, "ac.value_pretrain_epochs": 1,
                                       "reward.weights": "{cider_d: 1.0, embedding: 0.5}"})
    assert model  # the ac stage takes its architecture from the XE checkpoint

    dataset, feats = make_tiny_dataset(tmp_path)
    monkeypatch.setitem(BENCHMARKS, "tiny", Benchmark(lambda *args: (dataset, feats), "tiny"))
    out = tmp_path / "bench"
    # what `rlcap bench --methods ac` trains before it evaluates (the evaluation is the same for every method)
    best = train_stages("tiny", ["ac", "ac_att"], out, [f"data.dataset={dataset}", f"data.features={feats}"], configs,
                        [], [], lambda line: None)
    assert best == {stage: out / stage / "best" for stage in ("xe", "embedding", "ac", "ac_att")}
    for stage, reads in (("ac", "fc"), ("ac_att", "att")):  # ac_att: the ac recipe with its stage's override
        config = json.loads((out / stage / "config.json").read_text())
        assert config["reward"]["paths"] == {"embedding": str(out / "embedding" / "best")}
        assert config["init_from"] == str(out / "xe" / "best")
        assert config["ac"]["value_features"] == reads
        assert (out / stage / "best" / "value.safetensors").is_file()

    # bench-credit's value-fit table over the two stages: one row each, R^2 in [-inf, 1], the better one named
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import bench_credit
    finally:
        sys.path.pop(0)
    fits = bench_credit.value_fits(out, images=8)
    assert {stage: fit["reads"] for stage, fit in fits.items()} == {"ac": "fc", "ac_att": "att"}
    # every sampled caption is running at t = 0 (the tiny validation split has fewer than 8 images)
    assert all(fit["overall"] <= 1 and fit["rows"][0] == fit["images"] * fit["samples"] for fit in fits.values())
    table = bench_credit.fit_table(fits)
    assert [row.split(" | ")[1] for row in table[2:]] == ["fc", "att"]
    assert bench_credit.better_value(fits) == max(fits, key=lambda stage: fits[stage]["overall"])
