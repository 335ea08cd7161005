"""``rlcap bench``: train the stages of several methods (shared stages once) with one budget, and tabulate.

The layout follows the papers' tables: one row per method; beam-search quality, then the
quality and diversity of 5 random samples (rs) and of the 5-best beam (bs).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from pathlib import Path
from typing import Any, Callable

from rlcap import api
from rlcap.bench.registry import BENCHMARKS, BenchRow, bench_rows, check_names, stages_of
from rlcap.eval.clip_score import clip_scores_of, load_clip
from rlcap.eval.open_run import OpenRun, open_run
from rlcap.models.retriever import ClipRetriever
from rlcap.files import check_writable
from rlcap.recipes import find_recipes
from rlcap.methods import load_run_config

log = logging.getLogger(__name__)


def train_stages(benchmark: str, methods: list[str], out: Path, data: list[str], configs: Path,
                 rl_overrides: list[str], xe_overrides: list[str], report: Callable[[str], None],
                 resume: bool = False) -> dict[str, Path]:
    """Train every stage the methods need, each once; return stage name -> its best checkpoint.

    ``xe_overrides`` apply to the stages whose recipe trains with algorithm ``xe``, ``rl_overrides``
    to every other stage (the budget of the methods compared); an override of a section reaches the
    stages whose method reads that section (``mixer.start`` the MIXER stage, ``rl.epochs`` the
    sequence-level ones: :func:`rlcap.run_config.load_run_config`). A stage whose folder holds a finished run with
    the same settings is not trained again; one with other settings is refused, unless ``resume``: each stage's run
    continues in its folder with the settings a run may change (:func:`rlcap.api.train`), e.g. a larger
    ``rl.epochs``."""
    recipes = BENCHMARKS[benchmark].recipes
    best: dict[str, Path] = {}
    for stage in stages_of(methods, benchmark):
        recipe = configs / f"{recipes}_{stage.recipe}.yaml"
        start = [f"init_from={best[stage.init_from]}"] if stage.init_from else []
        start += [f"{name if '.' in name else f'reward.paths.{name}'}={best[source]}" for name, source in stage.paths]
        start += list(stage.overrides)
        cfg = load_run_config(recipe, [*data, f"out_dir={out / stage.name}", *start])
        extra = xe_overrides if cfg.algorithm == "xe" else rl_overrides
        cfg = load_run_config(recipe, [*data, f"out_dir={out / stage.name}", *start, *extra], shared=True)
        report(f"training {stage.name} ({recipe.name})" + (f" from {stage.init_from}" if stage.init_from else ""))
        api.train(cfg, resume=resume)
        best[stage.name] = out / stage.name / "best"
    return best


def run_benchmark(benchmark: str, methods: list[str], out_dir: str | Path, data_dir: str | Path | None = None,
                  configs: str | Path | None = None, rl_overrides: list[str] | None = None,
                  xe_overrides: list[str] | None = None, report: Callable[[str], None] = log.info,
                  prepared: tuple[Path, Path] | None = None, image_size: int = 128,
                  max_train_images: int = 0, regenerate: bool = False,
                  clip: str | Path | None = None, resume: bool = False) -> dict[str, Any]:
    """Train, evaluate on the test split, and write results.json, results.md, curves.png, each method's test
    captions with their scores (captions/METHOD.json) and the report (report.html, docs/REPORT.md).

    ``prepared``: (dataset, features) to use instead of generating the benchmark's data.
    ``image_size``: encoder input side for the generated features (128: a 4x4 grid, the recipes'
    default; 224: the encoder's ImageNet size, 7x7, slower but the shapes are recognised more often,
    see docs/SHAPES.md). ``max_train_images``: every stage trains on the first N training images
    (``data.max_train_images``; 0: all), the budget of a quick or time-boxed table.
    ``regenerate``: generate the benchmark's data over a folder generated with other settings
    (refused otherwise, :attr:`Benchmark.check`). ``configs``: the folder of the recipes (None: rlcap's
    own, :func:`rlcap.recipes.find_recipes`), checked before any data is generated. ``clip``: a local CLIP
    folder, which adds CLIP-S and RefCLIP-S ([Hessel21]) of each method's beam captions. ``resume``: continue the
    stages' runs in ``out_dir`` with changed settings (:func:`train_stages`).
    """
    from rlcap.bench.distinct import distinct_markdown, load_judges
    from rlcap.bench.report import plot_curves, results_markdown, training_cost
    from rlcap.data.loader import load_data

    check_names(benchmark, methods)
    out = Path(out_dir)
    data_dir = Path(data_dir) if data_dir is not None else Path("data") / benchmark
    bench = BENCHMARKS[benchmark]
    configs = find_recipes(configs, [f"{bench.recipes}_{stage.recipe}.yaml" for stage in stages_of(methods, benchmark)])
    check_writable(out, folder=True)  # before the data is generated and the methods trained
    clip_model = load_clip(clip) if clip is not None else None  # (a bad folder: before the training)
    if prepared is None and bench.check is not None and not regenerate:
        bench.check(data_dir)
    dataset, feats = prepared or bench.prepare(data_dir, image_size, report)
    data = [f"data.dataset={dataset}", f"data.features={feats}"]
    if max_train_images:
        data.append(f"data.max_train_images={max_train_images}")
    policy = [f"model.path={(data_dir / bench.policy).resolve()}"] if bench.policy else []
    best = train_stages(benchmark, methods, out, data, configs, list(rl_overrides or []),
                        [*policy, *(xe_overrides or [])], report, resume)
    known = bench_rows(benchmark)
    checkpoints = {m: method_checkpoint(known[m], best) for m in methods}
    metrics = api.evaluation_metrics()
    results: dict[str, Any] = {"benchmark": benchmark, "split": "test", "methods": {}}
    test, judges = None, None
    evaluated: dict[str, str] = {}  # weights_digest -> the method of this call whose row was made with them
    for method in methods:
        lookahead = known[method].decoder == "lookahead"
        run = open_run(checkpoints[method], device="cpu", value=lookahead)
        vocab = run.vocab
        if test is None:
            test = load_data(load_run_config(None, data).data, ("test",), vocab=vocab).splits["test"]
            judges = load_judges(best, test)  # [Chaffin24]'s retrievers, when the methods train them
        scored = [*metrics, *([f"CLIP-S and RefCLIP-S with {clip}"] if clip is not None else [])]
        key = evaluation_key(checkpoints[method], {n: best[n] for n in sorted(judges)}, data, scored,
                             BENCHMARKS[benchmark].sample_temperature)
        digest = weights_digest(checkpoints[method], known[method].decoder)
        if digest in evaluated:  # (a run's last/ that is its best/: scst_end beside scst)
            row = _twin_row(out, method, evaluated[digest], key, results["methods"][evaluated[digest]], report)
        else:
            row = _method_row(out, method, key, run, test, metrics, judges, benchmark, lookahead, clip, clip_model,
                              data, report)
            evaluated[digest] = method
        results["methods"][method] = row
        results["methods"][method]["checkpoint"] = str(checkpoints[method])
        results["methods"][method]["cost"] = training_cost(out / known[method].stages[-1].name / "log.jsonl")
    results["references"] = reference_rows(data, vocab, metrics, out)
    api.write_json(out / "results.json", results)
    (out / "results.md").write_text(results_markdown(results) + distinct_markdown(results), encoding="utf-8")
    plot_curves({m: out / known[m].stages[-1].name / "log.jsonl" for m in methods}, out / "curves.png")
    from rlcap.report import write_report

    report(f"report: {write_report(out, dataset=dataset)}")
    return results


def _add_clip_scores(row: dict[str, Any], captions: dict[str, Any], clip: ClipRetriever, data_cfg: Any,
                     test: Any) -> None:
    """CLIP-S and RefCLIP-S of the beam captions (``clip``: the CLIP): into the row's beam column and each
    caption's scores."""
    corpus, per_image = clip_scores_of(clip, data_cfg, test, captions["captions"])
    row["beam"].update(corpus)
    for i, values in per_image.items():
        captions["per_image"].setdefault(i, {}).update(values)


def evaluation_key(checkpoint: Path, judges: dict[str, Path], data: list[str], metrics: list[str],
                   sample_temperature: float) -> dict[str, Any]:
    """What a method's test row depends on: its checkpoint's files (name, size, modification time), the
    lambda the run folder's lookahead.json chose (its content), the judges' files, the data, the metrics and rlcap's own code (any
    change of rlcap's sources evaluates again)."""
    def files(folder: Path) -> list[list[Any]]:
        return sorted([p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in folder.iterdir() if p.is_file())

    choice = checkpoint.parent / "lookahead.json"  # the lambda lookahead inference decodes with
    return {"checkpoint": str(checkpoint), "files": files(checkpoint),
            "lookahead": json.loads(choice.read_text(encoding="utf-8"))["best_lambda"] if choice.exists() else None,
            "judges": {name: [str(folder), files(folder)] for name, folder in judges.items()},
            "data": list(data), "metrics": list(metrics), "sample_temperature": sample_temperature,
            "code": source_digest()}


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """A SHA-256 of rlcap's Python sources (paths and contents), read once a process."""
    import hashlib

    import rlcap

    root = Path(rlcap.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def weights_digest(checkpoint: Path, decoder: str) -> str:
    """A SHA-256 of a checkpoint's weights (its ``*.safetensors`` files, names and contents) and of the decoder its
    row reads them with: the same for a run's ``best/`` and ``last/`` when its best epoch was its last."""
    import hashlib

    digest = hashlib.sha256(decoder.encode() + b"\0")
    for path in sorted(checkpoint.glob("*.safetensors")):
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as weights:
            for block in iter(lambda: weights.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _twin_row(out: Path, method: str, twin: str, key: dict[str, Any], row: dict[str, Any],
              report: Callable[[str], None]) -> dict[str, Any]:
    """``method``'s row when its checkpoint holds the weights ``twin``'s row was made with in this call: that row
    (without its checkpoint and cost) and captions, written as ``method``'s, not decoded and scored again."""
    report(f"{method}: the weights {twin} was evaluated with (the same checkpoint files), its row not made again")
    row = {k: v for k, v in json.loads(json.dumps(row)).items() if k not in ("checkpoint", "cost")}
    captions = json.loads((out / "captions" / f"{twin}.json").read_text(encoding="utf-8"))
    api.write_json(out / "captions" / f"{method}.json", captions)
    api.write_json(out / "rows" / f"{method}.json", {"key": key, "row": row})
    return row


def evaluated_before(out: Path, method: str, key: dict[str, Any]) -> dict[str, Any] | None:
    """The row an earlier run of this folder evaluated for ``method`` with the same :func:`evaluation_key`
    (rows/METHOD.json, and its captions/METHOD.json), or None: an evaluation cut short resumes at the
    first method not yet evaluated."""
    path = out / "rows" / f"{method}.json"
    if not (path.is_file() and (out / "captions" / f"{method}.json").is_file()):
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    return saved["row"] if saved.get("key") == json.loads(json.dumps(key)) else None


def reference_rows(data: list[str], vocab: Any, metrics: list[str], out: Path) -> dict[str, dict[str, float]]:
    """The nearest-neighbour reference captioner (:data:`rlcap.api.REFERENCE_CAPTIONERS`; the template
    captioner reads concept features only some datasets have) on the test split: name -> corpus scores; its
    captions and per-image scores to captions/NAME.json."""
    from rlcap.data.loader import load_data
    from rlcap.train.validation import score_predictions

    splits = load_data(load_run_config(None, data).data, ("train", "test"), vocab=vocab).splits
    rows = {}
    for name in ("nearest_neighbour",):
        captioner = api.REFERENCE_CAPTIONERS[name]
        scored = score_predictions(splits["test"], captioner(splits["train"], splits["test"]), metrics)
        rows[name] = scored.corpus
        api.write_json(out / "captions" / f"{name}.json", {"captions": scored.predictions,
                                                             "per_image": scored.per_image})
    return rows


def method_checkpoint(row: BenchRow, best: dict[str, Path]) -> Path:
    """The checkpoint a method's row is judged by: its last stage's ``best`` or, for ``checkpoint="last"``,
    the same run's ``last``."""
    folder = best[row.stages[-1].name]
    return folder.parent / "last" if row.checkpoint == "last" else folder


def _lookahead_beam(run: OpenRun, test: Any, max_len: int) -> tuple[dict[str, str], dict]:
    """The test captions of an ``ac`` checkpoint (opened with its value network) by lookahead inference at the
    lambda its run chose on validation (the run folder's lookahead.json), with the table's beam size 3, as
    :func:`rlcap.bench.rows.method_row` decodes every other method."""
    from rlcap.eval.lookahead import lookahead_predictions, read_choice

    chosen = read_choice(run.folder.parent)
    decoding = dataclasses.replace(run.decoding, method="beam", beam_size=3, max_len=max_len)
    return lookahead_predictions(run.policy, run.value, test, run.vocab, chosen["best_lambda"], decoding), chosen


def _method_row(out: Path, method: str, key: Any, run: Any, test: Any, metrics: Any, judges: Any, benchmark: str,
                lookahead: bool, clip: str | Path | None, clip_model: Any, data: list[str],
                report: Callable[[str], None]) -> dict[str, Any]:
    """One method's row of the test table: read back when this checkpoint was evaluated before with the same
    settings (``key``), else decoded and scored now, its captions and row written beside the results."""
    from rlcap.bench.rows import method_row

    row = evaluated_before(out, method, key)
    if row is not None:
        report(f"{method}: evaluated before with this checkpoint (rows/{method}.json), not again")
        return row
    report(f"evaluating {method}")
    max_len = run.decoding.max_len  # the run's caption length (16 on images, 40 on video)
    beam = None
    if lookahead:
        beam, chosen = _lookahead_beam(run, test, max_len)
        report(f"{method}: lookahead at lambda {chosen['best_lambda']} (validation CIDEr-D {chosen['scores']})")
    captions: dict[str, Any] = {}
    row = method_row(run.policy, test, run.vocab, metrics, max_len, judges=judges, predictions=beam,
                     sample_temperature=BENCHMARKS[benchmark].sample_temperature, captions=captions)
    if beam is not None:
        row["lookahead"] = chosen
    if clip is not None:
        _add_clip_scores(row, captions, clip_model, load_run_config(None, data).data, test)
    api.write_json(out / "captions" / f"{method}.json", captions)
    api.write_json(out / "rows" / f"{method}.json", {"key": key, "row": row})
    return row
