"""``rlcap bench``: train several methods from one XE checkpoint with one budget, and tabulate.

The layout follows the papers' tables: one row per method; beam-search quality, then the
quality and diversity of 5 random samples (rs) and of the 5-best beam (bs).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from rlcap import api
from rlcap.config import load_config
from rlcap.errors import ConfigError
from rlcap.train.config import RunConfig

log = logging.getLogger(__name__)

# method name -> recipe in configs/ (the XE recipe trains the shared starting checkpoint)
RECIPES: dict[str, str] = {
    "xe": "shapes_xe.yaml",
    "scst": "shapes_scst.yaml",
    "sll_me": "shapes_sll_me.yaml",
    "sll_sle": "shapes_sll_sle.yaml",
}
BENCHMARKS = ("shapes",)


def check_methods(methods: list[str]) -> None:
    unknown = [m for m in methods if m not in RECIPES]
    if unknown:
        raise ConfigError(f"unknown method {unknown[0]!r}; expected some of {sorted(RECIPES)}")


def train_methods(methods: list[str], out: Path, data: list[str], configs: Path, rl_overrides: list[str],
                  xe_overrides: list[str], report: Callable[[str], None]) -> dict[str, Path]:
    """Train XE once, then every RL method from its best checkpoint; return method -> checkpoint."""
    xe_cfg = load_config(RunConfig, configs / RECIPES["xe"], [*data, f"out_dir={out / 'xe'}", *xe_overrides])
    report("training xe")
    api.train(xe_cfg)
    checkpoints = {"xe": out / "xe" / "best"}
    for method in methods:
        if method == "xe":
            continue
        report(f"training {method} from the XE checkpoint")
        cfg = load_config(RunConfig, configs / RECIPES[method],
                          [*data, f"out_dir={out / method}", f"init_from={checkpoints['xe']}", *rl_overrides])
        api.train(cfg)
        checkpoints[method] = out / method / "best"
    return checkpoints


def run_benchmark(benchmark: str, methods: list[str], out_dir: str | Path, data_dir: str | Path = "data/shapes",
                  configs: str | Path = "configs", rl_overrides: list[str] | None = None,
                  xe_overrides: list[str] | None = None, report: Callable[[str], None] = log.info,
                  prepared: tuple[Path, Path] | None = None, image_size: int = 128) -> dict[str, Any]:
    """Train, evaluate on the test split, and write results.json, results.md and curves.png.

    ``prepared``: (dataset, features) to use instead of generating the benchmark's data.
    ``image_size``: encoder input side for the generated features (128: a 4x4 grid, the recipes'
    default; 224: the encoder's ImageNet size, 7x7, slower but the shapes are recognised more often,
    see docs/SHAPES.md).
    """
    from rlcap.bench.evaluate import method_row
    from rlcap.bench.report import plot_curves, results_markdown
    from rlcap.data.loader import load_data
    from rlcap.demo import prepare_shapes
    from rlcap.train.session import load_model

    if benchmark not in BENCHMARKS:
        raise ConfigError(f"unknown benchmark {benchmark!r}; expected one of {list(BENCHMARKS)}")
    check_methods(methods)
    out = Path(out_dir)
    dataset, feats = prepared or prepare_shapes(Path(data_dir), image_size, report)
    data = [f"data.dataset={dataset}", f"data.features={feats}"]
    checkpoints = train_methods(methods, out, data, Path(configs), list(rl_overrides or []),
                                list(xe_overrides or []), report)
    metrics = api.evaluation_metrics()
    results: dict[str, Any] = {"benchmark": benchmark, "split": "test", "methods": {}}
    test = None
    for method in methods:
        model, vocab, config = load_model(checkpoints[method])
        if test is None:
            test = load_data(load_config(RunConfig, None, data).data, ("test",), vocab=vocab).splits["test"]
        report(f"evaluating {method}")
        results["methods"][method] = method_row(model, test, vocab, metrics)
    api.write_json(out / "results.json", results)
    (out / "results.md").write_text(results_markdown(results), encoding="utf-8")
    plot_curves({m: out / m / "log.jsonl" for m in methods}, out / "curves.png")
    return results
