"""What a report shows, read from the files a run, an evaluation, the demo or ``rlcap bench`` leaves.

Four layouts are recognised (:func:`collect`):

- an **evaluation folder** (``rlcap eval --out DIR``, of any name): ``predictions.json``, ``scores.json``,
  ``per_image.json`` and, for reference captioners, ``predictions_NAME.json`` / ``per_image_NAME.json``.
  ``scores.json`` records what was evaluated (``evaluated``: the checkpoint, the split, the data), so the page
  finds the run's settings and the dataset's references and pictures wherever the folder is;
- a **run folder** (``config.json`` and ``log.jsonl``), or one of its checkpoint folders (``best``, ``last``): the
  curves of its log, and its most recent evaluation folder, of the test split when there is one: ``eval_*``
  in the run folder or in a checkpoint folder (``rlcap eval RUN/best`` writes ``RUN/best/eval_test``);
- a **bench folder** (``results.json`` of ``rlcap bench``): every method's row, its captions
  (``captions/METHOD.json``) and the log of its last stage;
- a folder of run folders (``rlcap demo --out``: ``xe/`` and ``scst/``): one system per run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcap.errors import RlcapError

# The corpus metrics of the table, in the papers' order (those a layout lacks are left out).
METRICS = ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE", "SPIDEr", "CLIP-S",
           "RefCLIP-S",  # an evaluation given a CLIP (rlcap eval --clip)
           "CHAIR_i", "CHAIR_s", "Coverage", "Colour-err",  # one given the pictures' objects (rlcap eval --objects)
           "Template"]
# [Chaffin24]'s retrieval columns of a bench folder's distinct rows
DISTINCT = ["T2I R@1", "T2I R@5", "I2T R@1", "I2T R@5", "judge T2I R@1", "judge I2T R@1", "Self-BLEU"]


@dataclass
class System:
    """One captioner's outputs on the report's split: a trained method, or a reference captioner."""

    name: str
    metrics: dict[str, float]
    captions: dict[str, str] = field(default_factory=dict)          # image id -> caption
    per_image: dict[str, dict[str, float]] = field(default_factory=dict)  # image id -> metric -> value
    ranks: dict[str, dict[str, float]] = field(default_factory=dict)  # image id -> "T2I"/"I2T" -> expected rank
    log: Path | None = None
    checkpoint: Path | None = None
    reference: bool = False  # a reference captioner (nearest neighbour), not a trained method
    extra: dict[str, float] = field(default_factory=dict)  # more table columns (distinctiveness, diversity sets)


@dataclass
class ReportData:
    title: str
    kind: str                      # "run", "eval", "bench" or "runs"
    source: Path
    split: str = "test"
    systems: list[System] = field(default_factory=list)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # run name -> its config (dict of sections)
    conventions: list[str] = field(default_factory=list)    # the logs' conventions lines
    learned: dict[str, Any] = field(default_factory=dict)   # run name -> the reward its log records it learned from
    epochs: dict[str, int] = field(default_factory=dict)    # run name -> the epochs its last checkpoint completed
    drawn: dict[str, int] = field(default_factory=dict)     # run name -> the captions it sampled per image (its log)
    notes: list[str] = field(default_factory=list)          # what is missing, said on the page
    data: dict[str, Any] = field(default_factory=dict)      # the evaluation's data section (absolute paths), if known


def _read(path: Path, expected: type = dict) -> Any:
    """A JSON file of the layouts above; one line naming it when it is not JSON or not a ``expected``."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RlcapError(f"{path}: cannot read it as JSON ({exc})") from None
    if not isinstance(value, expected):
        raise RlcapError(f"{path}: expected a JSON {'object' if expected is dict else 'list'}, got "
                         f"{type(value).__name__}: {_WRITERS.get(path.name, 'not a file rlcap wrote')}")
    return value


_WRITERS = {"config.json": "a run's settings, as rlcap train writes them",
            "predictions.json": "COCO results, [{image_id, caption}], as rlcap eval writes them",
            "scores.json": "{model: {metric: value}, references: ...}, as rlcap eval writes it",
            "results.json": "{methods: {name: {beam: {metric: value}}}}, as rlcap bench writes it"}


def _shaped(path: Path, read: Any) -> Any:
    """``read()``, a value taken from ``path``'s JSON; one line naming the file when its items lack a key
    or have another type (a file of another program, or edited)."""
    try:
        return read()
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise RlcapError(f"{path}: not laid out as expected ({type(exc).__name__}: {exc}): "
                         f"{_WRITERS.get(path.name, 'not a file rlcap wrote')}") from None


def _coco_captions(path: Path) -> dict[str, str]:
    """COCO results format ``[{"image_id", "caption"}]`` -> id -> caption (ids as strings)."""
    if not path.exists():
        return {}
    rows = _read(path, list)
    return _shaped(path, lambda: {str(r["image_id"]): str(r["caption"]) for r in rows})


def _per_image(path: Path) -> dict[str, dict[str, float]]:
    return {str(k): v for k, v in _read(path).items()} if path.exists() else {}


def is_run(folder: Path) -> bool:
    return (folder / "config.json").exists() and (folder / "log.jsonl").exists()


def evaluated(folder: Path) -> dict[str, Any]:
    """What an evaluation folder's ``scores.json`` says was evaluated: ``checkpoint``, ``split``, ``data``
    ({} for folders written before rlcap recorded it)."""
    path = folder / "scores.json"
    record = _read(path).get("evaluated", {}) if path.exists() else {}
    return record if isinstance(record, dict) else {}


def _eval_folders(run: Path) -> list[Path]:
    """The evaluation folders of a run (its own, and its checkpoints'), the test split's first, then the
    most recent first."""
    found = [p for p in (*run.glob("eval_*"), *run.glob("*/eval_*")) if (p / "predictions.json").exists()]

    def order(folder: Path) -> tuple[bool, float]:
        split = evaluated(folder).get("split") or folder.name.removeprefix("eval_")
        return split != "test", -(folder / "predictions.json").stat().st_mtime

    return sorted(found, key=order)


def eval_systems(folder: Path, name: str) -> list[System]:
    """The model of an evaluation folder and the reference captioners evaluated with it."""
    path = folder / "scores.json"
    scores = _read(path) if path.exists() else {}
    out = [System(name, _shaped(path, lambda: dict(scores.get("model", {}))),
                  _coco_captions(folder / "predictions.json"), _per_image(folder / "per_image.json"))]
    for ref, metrics in _shaped(path, lambda: dict(scores.get("references", {}))).items():
        out.append(System(ref, dict(metrics), _coco_captions(folder / f"predictions_{ref}.json"),
                          _per_image(folder / f"per_image_{ref}.json"), reference=True))
    return out


def _conventions(log: Path | None) -> list[str]:
    if log is None or not log.exists():
        return []
    from rlcap.train.logger import read_log

    return [r["text"].removeprefix("conventions: ") for r in read_log(log)
            if r.get("split") == "note" and "text" in r][:1]


def learned_from(log: Path | None) -> Any:
    """The reward a run's loop learned from, as its log records it (the note that states it: ``learns_from``, its
    ``reward.weights`` or "its own"); None for a run whose log records none (XE; a log of an earlier release)."""
    if log is None or not log.exists():
        return None
    from rlcap.train.logger import read_log

    return next((r["learns_from"] for r in read_log(log) if r.get("split") == "note" and "learns_from" in r), None)


def samples_drawn(log: Path | None) -> int | None:
    """The captions per image a run's loop sampled, as its log records them (the note that states its sampling:
    ``samples_per_image``); None for a run that samples none, or whose log records none."""
    if log is None or not log.exists():
        return None
    from rlcap.train.logger import read_log

    return next((r["samples_per_image"] for r in read_log(log)
                 if r.get("split") == "note" and "samples_per_image" in r), None)


def _record_drawn(data: ReportData, name: str, log: Path) -> None:
    drawn = samples_drawn(log)
    if drawn is not None:
        data.drawn[name] = drawn


def _record_run(data: ReportData, name: str, run: Path) -> None:
    """What run folder ``run`` recorded beside its settings: the reward its log records it learned from
    (:func:`learned_from`) and the epochs its last checkpoint completed."""
    learned = learned_from(run / "log.jsonl")
    if learned is not None:
        data.learned[name] = learned
    last = run / "last" / "checkpoint.json"
    epoch = _read(last).get("epoch") if last.is_file() else None
    if isinstance(epoch, int):
        data.epochs[name] = epoch


def _run_data(run: Path, data: ReportData, name: str | None = None) -> None:
    """Add one run folder's system(s): the model of its first evaluation folder (or only its curves)."""
    name = name or run.name
    data.settings[name] = _read(run / "config.json")
    data.conventions += [f"{name}: {c}" for c in _conventions(run / "log.jsonl")]
    _record_drawn(data, name, run / "log.jsonl")
    _record_run(data, name, run)
    evals = _eval_folders(run)
    if not evals:
        data.systems.append(System(name, {}, log=run / "log.jsonl", checkpoint=run / "best"))
        data.notes.append(f"{name}: no evaluation folder (eval_*/predictions.json) in {run} or its checkpoints; "
                          f"`rlcap eval {run / 'best'}` writes one")
        return
    record = evaluated(evals[0])
    data.split = record.get("split") or evals[0].name.removeprefix("eval_")
    data.data = data.data or record.get("data", {})
    systems = eval_systems(evals[0], name)
    checkpoint = Path(record["checkpoint"]) if record.get("checkpoint") else None
    systems[0].log = run / "log.jsonl"
    systems[0].checkpoint = checkpoint or (evals[0].parent if evals[0].parent != run else run / "best")
    data.systems += [s for s in systems if not s.reference or s.name not in {x.name for x in data.systems}]


def _bench_data(folder: Path) -> ReportData:
    path = folder / "results.json"
    results = _read(path)
    return _shaped(path, lambda: _bench_rows(folder, results))


def _bench_rows(folder: Path, results: dict[str, Any]) -> ReportData:
    data = ReportData(f"rlcap bench: {results.get('benchmark', folder.name)}", "bench", folder,
                      results.get("split", "test"))
    for name, row in results["methods"].items():
        stage = Path(row.get("checkpoint", f"{name}/best"))
        run = folder / stage.parent.name
        file = folder / "captions" / f"{name}.json"
        saved = _read(file) if file.exists() else {}
        extra = {c: row["distinct"][c] for c in DISTINCT if c in row.get("distinct", {})}
        for s in ("rs", "bs"):
            extra.update({f"{s} {k}": v for k, v in row.get(s, {}).items() if k != "CIDEr"})
        data.systems.append(System(name, dict(row["beam"]), saved.get("captions", {}), saved.get("per_image", {}),
                                   saved.get("ranks", {}), run / "log.jsonl", folder / stage.parent.name / stage.name,
                                   extra=extra))
        if not saved:
            data.notes.append(f"{name}: no captions/{name}.json (a bench folder written before rlcap saved "
                              "each method's captions): no gallery column")
        if (run / "config.json").exists():
            data.settings[name] = _read(run / "config.json")
        data.conventions += [f"{name}: {c}" for c in _conventions(run / "log.jsonl")]
        _record_drawn(data, name, run / "log.jsonl")
        _record_run(data, name, run)
    for ref, metrics in results.get("references", {}).items():
        file = folder / "captions" / f"{ref}.json"
        saved = _read(file) if file.exists() else {}
        data.systems.append(System(ref, dict(metrics), saved.get("captions", {}), saved.get("per_image", {}),
                                   reference=True))
    return data


def check_source(path: Path) -> None:
    """One line unless ``path`` is a folder (a file is not a report's source, and no page goes inside it)."""
    if not path.is_dir():
        raise RlcapError(f"{path}: not a folder; rlcap report reads a run folder, a checkpoint folder, an "
                         "evaluation folder (rlcap eval --out) or a bench folder (rlcap bench --out)")


def collect(path: str | Path) -> ReportData:
    """Read what a report shows from ``path`` (the layouts of the module docstring)."""
    path = Path(path)
    check_source(path)
    if (path / "results.json").exists():
        return _bench_data(path)
    if (path / "checkpoint.json").exists() and is_run(path.parent):
        path = path.parent
    if is_run(path):
        data = ReportData(f"rlcap run: {path.name}", "run", path)
        _run_data(path, data)
        return data
    if (path / "predictions.json").exists():
        return _eval_data(path)
    runs = sorted((p for p in path.iterdir() if p.is_dir() and is_run(p)), key=_start_time)
    if runs:
        data = ReportData(f"rlcap runs: {path.name}", "runs", path)
        for run in runs:
            _run_data(run, data)
        refs = [s for s in data.systems if s.reference]
        data.systems = [s for s in data.systems if not s.reference] + refs
        return data
    raise RlcapError(f"{path}: no run (config.json + log.jsonl), evaluation (predictions.json), bench "
                     "(results.json) or folder of runs found")


def _eval_data(path: Path) -> ReportData:
    """An evaluation folder: its run (and the run's settings and curves) found from the checkpoint that
    scores.json records, else from where the folder lies (in a run folder, or in one of its checkpoints)."""
    record = evaluated(path)
    checkpoint = Path(record["checkpoint"]) if record.get("checkpoint") else None
    around = [p for p in (checkpoint, path.parent) if p is not None]
    run = next((p for c in around for p in (c, c.parent) if is_run(p)), None)
    data = ReportData(f"rlcap evaluation: {path.name}", "eval", path,
                      record.get("split") or path.name.removeprefix("eval_"), data=record.get("data", {}))
    data.systems = eval_systems(path, run.name if run is not None else "model")
    if run is not None:
        data.settings[data.systems[0].name] = _read(run / "config.json")
        _record_drawn(data, data.systems[0].name, run / "log.jsonl")
        data.systems[0].log = run / "log.jsonl"
    data.systems[0].checkpoint = checkpoint
    return data


def _start_time(run: Path) -> float:
    """Runs in the order they were trained (the demo's xe before scst), by their log's first record."""
    with (run / "log.jsonl").open(encoding="utf-8") as f:
        first = f.readline()
    try:
        return float(json.loads(first).get("time", 0.0))
    except (ValueError, AttributeError):
        return 0.0
