"""bench-grpo's rows and harness (benchmarks/bench_grpo.py): each GRPO row is its recipe with one change, every
row's settings load on both benchmarks' recipes, and the validation curves and their table from hand-made logs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlcap import api
from rlcap.bench.registry import BENCH_ROWS

REPO = Path(__file__).resolve().parents[2]
ROWS = {"grpo": {}, "grpo_clip": {"iterations": 2, "epsilon_high": 0.28}, "dr_grpo": {"scale": "none",
                                                                                     "loss": "dr_grpo"}}


@pytest.fixture(scope="module")
def bench(request):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_grpo
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return bench_grpo


@pytest.mark.parametrize("recipes", ["shapes", "shapes-hf"])
def test_each_row_is_the_grpo_recipe_with_one_change(recipes):
    """TRL's defaults in the recipe; grpo_clip, dr_grpo and grpo_kl each change what their name says, and
    nothing else (the budget, G and optimizer are the SCST recipe's: equal sampled captions)."""
    scst = api.load_run_config(str(REPO / "configs" / f"{recipes}_scst.yaml"), [])
    for name, changed in [*ROWS.items(), ("grpo_kl", {})]:
        stage = BENCH_ROWS[name].stages[-1]
        assert stage.recipe == "grpo" and stage.init_from == "xe"
        cfg = api.load_run_config(str(REPO / "configs" / f"{recipes}_{stage.recipe}.yaml"), list(stage.overrides))
        expected = {"iterations": 1, "epsilon": 0.2, "epsilon_high": None, "scale": "group", "loss": "dapo",
                    "ratio": "token", "mask_truncated": False, **changed}
        assert {k: getattr(cfg.grpo, k) for k in expected} == expected, name
        assert cfg.rl.kl_coef == (0.04 if name == "grpo_kl" else 0.0)
        assert (cfg.rl.epochs, cfg.rl.batch_size, cfg.rl.n_samples, cfg.optim.lr) == (
            scst.rl.epochs, scst.rl.batch_size, scst.rl.n_samples, scst.optim.lr)
        assert cfg.data == scst.data and cfg.reward == scst.reward and cfg.decode == scst.decode


def _run(folder: Path, vals: list[float], train: list[dict], batch: int = 4, g: int = 3) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"rl": {"batch_size": batch, "n_samples": g}}))
    rows = [{"step": 2 * i + 1, "split": "train", **r} for i, r in enumerate(train)]  # every other step logged
    rows += [{"step": 10 * (e + 1), "split": "val", "CIDEr": v, "epoch": e + 1} for e, v in enumerate(vals)]
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_curves_and_their_table(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "REPO", tmp_path)
    _run(tmp_path / "out" / "scst", [1.0, 1.2], [{"reward": 1.0}, {"reward": 2.0}])
    _run(tmp_path / "out" / "grpo_clip", [1.1, 1.05], [{"reward": 1.0, "clipped": 0.1, "kl": 0.02},
                                                       {"reward": 1.5, "clipped": 0.3, "kl": 0.04}])
    _run(tmp_path / "out" / "xe", [0.8, 0.9], [{"loss": 3.0}])
    found = bench.curves("out", ["scst", "grpo_clip"])
    assert found["scst"] == {"val": [1.0, 1.2], "steps": 3, "captions": 36, "reward": 1.5}
    assert found["grpo_clip"]["clipped"] == pytest.approx(0.2) and found["grpo_clip"]["kl"] == pytest.approx(0.03)
    assert bench.xe_val("out") == 0.9
    table = bench.curve_table(found, 0.9)
    assert table[2] == "| scst | 36 | 1.000 | 1.200 | 1.200 (+33.3%) | 1.500 | - | - | - |"
    assert table[3] == "| grpo_clip | 36 | 1.100 | 1.050 | 1.100 (+22.2%) | 1.250 | - | 20.00% | 0.0300 |"


def test_the_verdicts_read_each_row_against_the_one_it_changes(bench):
    def row(cider, spice, div2):
        return {"beam": {"CIDEr": cider, "SPICE": spice}, "rs": {"Div-2": div2}}

    m = {"scst": row(2.0, 0.30, 0.30), "grpo": row(2.1, 0.31, 0.31), "grpo_clip": row(1.9, 0.29, 0.25),
         "grpo_kl": row(2.2, 0.33, 0.40)}
    found = {"scst": {"val": [1.0, 1.2]}, "grpo": {"val": [1.5, 1.4], "entropy": 0.4},
             "grpo_clip": {"val": [1.2, 1.3], "clipped": 0.08}, "grpo_kl": {"val": [1.6], "kl": 0.25, "entropy": 0.5}}
    lines = bench.verdicts(m, found)
    assert len(lines) == 3  # no dr_grpo row: no line for it
    assert "**1.500 against 1.200** (+25.0%)" in lines[0] and "CIDEr-D 2.100 against 2.000" in lines[0]
    assert "**1.300 against 1.500** (-13.3%)" in lines[1] and "8.00% of the second update's words" in lines[1]
    assert "mean k3 0.250" in lines[2] and "entropy 0.500 against 0.400" in lines[2]
    assert "Div-2 of 5 random samples 0.400 against 0.310" in lines[2]


def test_the_template_line_counts_each_rows_captions_holding_the_top_4gram(bench, tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "REPO", tmp_path)
    (tmp_path / "out" / "captions").mkdir(parents=True)
    said = {"xe": ["a red star on the left", "a blue circle in the middle"],
            "scst": ["a red star to the right of a blue circle", "a green heart to the right of a circle"]}
    for name, caps in said.items():
        (tmp_path / "out" / "captions" / f"{name}.json").write_text(json.dumps(
            {"captions": {str(i): c for i, c in enumerate(caps)}}))
    line = bench.template_line("out", ["xe", "scst"])
    assert '"to the right of"' in line and "xe 0%, scst 100%" in line
