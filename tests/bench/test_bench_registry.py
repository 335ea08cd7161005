"""A method is one loop plus a recipe: a toy method added through the registries runs with `rlcap bench`."""

import json

import yaml

from rlcap.bench.registry import BENCH_ROWS, BENCHMARKS, XE, Benchmark, BenchRow, Stage
from rlcap.cli import main
from rlcap.methods import registry
from tests.methods.toy_method import TOY  # REINFORCE with a constant baseline, a method from outside src/
from tests.tiny import make_tiny_dataset, tiny_overrides


def _recipe(path, items):
    data = {}
    for item in items:
        key, value = item.split("=", 1)
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    path.write_text(yaml.safe_dump(data))


def test_a_toy_method_runs_through_the_registries(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    tiny = [o for o in tiny_overrides("unused", "unused", "unused") if not o.split("=")[0] in
            ("data.dataset", "data.features", "out_dir")]
    _recipe(configs / "tiny_xe.yaml", [*tiny, "algorithm=xe"])
    _recipe(configs / "tiny_toy.yaml", [*[o for o in tiny if not o.startswith("model.")], "algorithm=toy",
                                        "rl.epochs=1", "rl.batch_size=8", "rl.n_samples=2"])

    def prepare(data_dir, image_size, report):
        data_dir.mkdir(parents=True, exist_ok=True)
        return make_tiny_dataset(data_dir)

    monkeypatch.setitem(registry.METHODS, "toy", TOY)
    monkeypatch.setitem(BENCH_ROWS, "toy", BenchRow((XE, Stage("toy", "toy", "xe")), "REINFORCE, constant baseline"))
    monkeypatch.setitem(BENCHMARKS, "tiny", Benchmark(prepare, "tiny"))
    out = tmp_path / "bench"
    assert main(["bench", "--benchmark", "tiny", "--methods", "xe,toy", "--out", str(out), "--configs", str(configs),
                 "--data", str(tmp_path / "data"), "--max-train-images", "20"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["methods"]) == ["xe", "toy"]
    for stage in ("xe", "toy"):  # the budget reaches every stage
        assert json.loads((out / stage / "config.json").read_text())["data"]["max_train_images"] == 20
    assert json.loads((out / "toy" / "config.json").read_text())["init_from"] == str(out / "xe" / "best")
    assert (out / "toy" / "best" / "policy.safetensors").is_file()
