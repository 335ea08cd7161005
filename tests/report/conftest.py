"""Tiny runs, evaluations and a tiny bench folder to report on, made once per test session."""

from __future__ import annotations

import json

import pytest

SCRIPT_CAPTION = '<script>document.title = "injected"</script> a red circle & a <b>square</b>'


def add_pictures(dataset) -> None:
    """A PNG for every image of the tiny dataset (tests/tiny.py names them but writes none)."""
    from PIL import Image

    colours = {"red": (200, 40, 40), "blue": (40, 40, 200), "green": (40, 160, 40)}
    for item in json.loads(dataset.read_text())["images"]:
        colour = next(c for c in colours if c in item["sentences"][0]["raw"])
        Image.new("RGB", (48, 48), colours[colour]).save(dataset.parent / item["filename"])


@pytest.fixture(scope="session")
def reported(tmp_path_factory):
    """A folder of two runs (XE, then SCST from it) evaluated on the test split like the demo's, with one
    caption replaced by :data:`SCRIPT_CAPTION`, and a bench folder of xe and scst: {"runs", "bench", "dataset"}."""
    from rlcap import api
    from rlcap.bench.methods import run_benchmark
    from tests.tiny import make_tiny_dataset, tiny_overrides

    folder = tmp_path_factory.mktemp("report")
    dataset, feats = make_tiny_dataset(folder)
    add_pictures(dataset)
    runs = folder / "runs"
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, runs / "xe")))
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, runs / "scst", **{
        "algorithm": "scst", "init_from": runs / "xe" / "best", "rl.epochs": 1, "rl.batch_size": 12})))
    api.evaluate(runs / "xe" / "best", out_dir=runs / "xe" / "eval_test", references=("nearest_neighbour",))
    api.evaluate(runs / "scst" / "best", out_dir=runs / "scst" / "eval_test")
    predictions = runs / "scst" / "eval_test" / "predictions.json"
    rows = json.loads(predictions.read_text())
    rows[0]["caption"] = SCRIPT_CAPTION
    predictions.write_text(json.dumps(rows))

    tiny = [o for o in tiny_overrides(dataset, feats, folder / "unused") if not o.startswith("out_dir=")]
    rl = [*[o for o in tiny if not o.startswith("model.")], "rl.epochs=1", "rl.batch_size=12"]
    configs = __import__("pathlib").Path(__file__).resolve().parents[2] / "configs"
    run_benchmark("shapes", ["xe", "scst"], folder / "bench", configs=configs, rl_overrides=rl,
                  xe_overrides=tiny, prepared=(dataset, feats))
    return {"runs": runs, "bench": folder / "bench", "dataset": dataset}
