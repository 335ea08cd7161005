"""``rlcap report``: one self-contained HTML page (styles, script, plots and thumbnails inline) for a run, an
evaluation, the demo or a bench folder, rendered by Jinja2 with every caption escaped."""

from __future__ import annotations

import datetime
import logging
from pathlib import Path
from typing import Any

from rlcap.report.collect import METRICS, ReportData, System, collect
from rlcap.report.media import picture
from rlcap.report.stats import best_cells, diversity, gallery_ids
from rlcap.train.logger import OWN_REWARD

log = logging.getLogger(__name__)

SAMPLE = 48  # gallery items by default (a seeded sample, plus each pair's extremes)
EPOCHS_ROW = "epochs done"  # what each run's last checkpoint records it completed (ReportData.epochs)
SAMPLES_ROW = "samples per image"  # what each run's log records it sampled (ReportData.drawn), not a config key
# The settings summary: (label, section, key) of the run config
SUMMARY = [("algorithm", None, "algorithm"), ("dataset", "data", "dataset"), ("features", "data", "features"),
           ("model", "model", "arch"), ("seed", None, "seed"), ("init_from", None, "init_from"),
           ("learning rate", "optim", "lr"), (EPOCHS_ROW, None, EPOCHS_ROW), ("RL epochs", "rl", "epochs"),
           ("images per batch", "rl", "batch_size"), (SAMPLES_ROW, None, SAMPLES_ROW),
           ("reward", "reward", "weights"), ("end token scored", "reward", "eos_counts"),
           ("validation metric", "val", "metric"), ("beam size", "decode", "beam_size"),
           ("device", None, "device"), ("precision", None, "precision")]




def settings_rows(configs: dict[str, dict[str, Any]],
                  drawn: dict[str, int] | None = None, learned: dict[str, Any] | None = None,
                  epochs: dict[str, int] | None = None) -> list[tuple[str, list[str]]]:
    """(label, one value per run) for each :data:`SUMMARY` key some run sets ("-" where a run lacks it); the
    samples per image are those each run's log records it drew (``drawn``: run name -> captions per image), the
    epochs those its last checkpoint records it completed (``epochs``), and the reward the one its log records it
    learned from (``learned``: run name -> its reward.weights, or "its own" for a method whose reward is its own:
    [Chaffin24]'s retrieval reward and discriminator, HRL's plain-CIDEr prefixes); a run whose log records none
    shows its config's weights."""
    rows = []
    for label, section, key in SUMMARY:
        values = []
        for name, config in configs.items():
            where = config.get(section, {}) if section else config
            value = where.get(key) if isinstance(where, dict) else None
            if label == SAMPLES_ROW:
                value = (drawn or {}).get(name)
            if label == EPOCHS_ROW:
                value = (epochs or {}).get(name)
            if key == "weights" and name in (learned or {}):
                value = learned[name] if learned[name] != OWN_REWARD else "the method's own (conventions below)"
            values.append("-" if value in (None, "") else str(value))
        if any(v != "-" for v in values):
            rows.append((label, values))
    return rows


def _records(data: ReportData, dataset: str | Path | None):
    """id -> ImageRecord of the report's split (references and file names), and the dataset's folder."""
    from rlcap.data.hf_datasets import Columns
    from rlcap.data.readers import raw_captions, read_dataset

    cfg = data.data or next(iter(data.settings.values()), {}).get("data", {})  # the evaluation's, else the run's
    path = Path(dataset) if dataset else Path(cfg.get("dataset", "")) if cfg.get("dataset") else None
    if path is not None and not path.exists() and not path.is_absolute():
        # a relative path of the run's working directory: try the report source's ancestors
        path = next((p / path for p in data.source.resolve().parents if (p / path).exists()), path)
    if path is None or not path.exists():
        data.notes.append(f"dataset {path} not found (pass --dataset): no references or pictures in the gallery")
        return {}, None
    coco_splits = cfg.get("coco_splits") if not dataset else None
    columns = Columns(*(cfg.get(f"{key}_column", default) for key, default in Columns._field_defaults.items()))
    with raw_captions():  # the page shows the references; their words are not needed
        records = read_dataset(path, cfg.get("format", "auto") if not dataset else "auto", coco_splits, columns)
    # a datasets dataset's file names are relative to its folder, a caption file's to the folder it lies in
    return {r.id: r for r in records if r.split == data.split}, path if path.is_dir() else path.parent


def hrl_segments(system: System, captions: dict[str, str]) -> dict[str, list[str]]:
    """An HRL captioner's captions cut where its internal critic ends a segment (eq. 9: p(z) > 0.5)."""
    import torch

    from rlcap.eval.open_run import open_run

    run = open_run(system.checkpoint, device="cpu")
    model, vocab = run.policy, run.vocab
    if run.config.get("model", {}).get("arch") != "hrl":
        return {}
    out = {}
    with torch.no_grad():
        for i, caption in captions.items():
            words = caption.split()
            if not words:
                continue
            ends = model.critic(torch.tensor([vocab.encode(words)]))[0] > 0
            parts, current = [], []
            for w, end in zip(words, ends.tolist()):
                current.append(w)
                if end:
                    parts.append(" ".join(current))
                    current = []
            out[i] = parts + ([" ".join(current)] if current else [])
    return out


def _score_text(system: System, i: str) -> str:
    s = system.per_image.get(i, {})
    parts = [f"CIDEr-D {s['CIDEr']:.2f}" if "CIDEr" in s else "", f"SPICE {s['SPICE']:.2f}" if "SPICE" in s else ""]
    parts += [f"{m} {s[m]:.2f}" for m in ("CLIP-S", "RefCLIP-S") if m in s]  # an evaluation given a CLIP
    # an evaluation given the pictures' objects (rlcap eval --objects): what [Rohrbach18]'s CHAIR_s flags
    parts += ["names an object not there" if s.get("CHAIR_s") == 1.0 else "",
              "a wrong colour" if s.get("Colour-err", 0.0) > 0 else "",
              f"coverage {s['Coverage']:.2f}" if "Coverage" in s else ""]
    r = system.ranks.get(i, {})
    parts += [f"{d} rank {r[d]:g}" for d in ("I2T", "T2I") if d in r]
    return " · ".join(p for p in parts if p)


def build_context(data: ReportData, sample: int = SAMPLE, seed: int = 0, everything: bool = False,
                  dataset: str | Path | None = None) -> dict[str, Any]:
    from rlcap import __version__
    from rlcap.report.plots import plot_all

    systems = data.systems
    columns = [c for c in METRICS if any(c in s.metrics for s in systems)]
    extra = [c for c in dict.fromkeys(k for s in systems for k in s.extra)]
    best = {**best_cells(systems, columns), **best_cells(systems, extra, "extra")}
    table = [{"name": s.name, "reference": s.reference,
              "cells": [{"text": _cell(s.metrics.get(c, s.extra.get(c))), "best": best.get(c) == s.name}
                        for c in columns + extra]} for s in systems]
    records, folder = _records(data, dataset)
    ids = [i for i in records if any(i in s.captions for s in systems)] or \
        sorted({i for s in systems for i in s.captions})
    shown, why = gallery_ids(ids, systems, sample, seed, everything)
    segments = {s.name: hrl_segments(s, {i: s.captions[i] for i in shown if i in s.captions})
                for s in systems if s.checkpoint is not None and (s.checkpoint / "checkpoint.json").exists()
                and _arch(s) == "hrl"}
    trained = [s for s in systems if not s.reference and s.per_image]
    items = [_item(i, why[i], records.get(i), folder, systems, trained, segments) for i in shown]
    sort_keys = [(f"{k.lower()}-{n}", f"{s.name} {label}") for n, s in enumerate(systems) if s.per_image
                 for k, label in (("CIDEr", "CIDEr-D"), ("SPICE", "SPICE"))]
    sort_keys += [(f"diff-{n}", f"{s.name} minus {trained[0].name}, CIDEr-D") for n, s in enumerate(systems)
                  if s in trained[1:]]
    return {
        "title": data.title, "source": str(data.source), "split": data.split, "n_images": len(ids),
        "written": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "version": __version__,
        "notes": data.notes, "settings": settings_rows(data.settings, data.drawn, data.learned, data.epochs),
        "runs": list(data.settings), "conventions": data.conventions,
        "columns": columns + extra, "extra_columns": bool(extra), "table": table,
        "plots": plot_all({s.name: s.log for s in systems if s.log is not None}),
        "diversity": [{"name": s.name, **diversity([s.captions[i] for i in ids if i in s.captions])}
                      for s in systems if s.captions],
        "gallery_note": _gallery_note(len(shown), len(ids), everything, sample, seed, trained),
        "sort_keys": sort_keys, "whys": sorted(set(why.values())), "items": items,
    }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.4f}"


def _arch(system: System) -> str | None:
    import json

    config = system.checkpoint / "config.json"
    return json.loads(config.read_text()).get("model", {}).get("arch") if config.exists() else None


def _gallery_note(shown: int, total: int, everything: bool, sample: int, seed: int, trained: list[System]) -> str:
    if everything:
        return f"All {total} images (--all)."
    note = f"{shown} of {total} images: a sample of {min(sample, total)} (seed {seed}; --all shows every image)"
    if len(trained) > 1:
        note += (f", and for each method against {trained[0].name} the 6 images where it gained most and lost most "
                 "in per-caption CIDEr-D")
    return note + (". Per caption: CIDEr-D and SPICE against that image's references (and CLIP-S, RefCLIP-S when "
                   "the evaluation had a CLIP; whether it names an object the picture lacks, and its coverage, when "
                   "it had the pictures' objects).")


def _item(i: str, why: str, record: Any, folder: Path | None, systems: list[System], trained: list[System],
          segments: dict[str, dict[str, list[str]]]) -> dict[str, Any]:
    path = folder / record.filename if record is not None and record.filename and folder is not None else None
    uri, what = picture(record.image if record is not None and record.image is not None else path)
    data: list[tuple[str, str]] = []
    captions = []
    for n, s in enumerate(systems):
        if i not in s.captions:
            continue
        scores = s.per_image.get(i, {})
        data += [(f"{k.lower()}-{n}", f"{scores[k]:.4f}") for k in ("CIDEr", "SPICE") if k in scores]
        if trained and s in trained[1:] and "CIDEr" in scores and "CIDEr" in trained[0].per_image.get(i, {}):
            data.append((f"diff-{n}", f"{scores['CIDEr'] - trained[0].per_image[i]['CIDEr']:.4f}"))
        captions.append({"system": s.name, "reference": s.reference, "scores": _score_text(s, i),
                         "parts": segments.get(s.name, {}).get(i) or [s.captions[i]]})
    return {"id": i, "why": why, "picture": uri, "what": what, "data": data, "captions": captions,
            "refs": record.captions if record is not None else []}


def render(context: dict[str, Any]) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("report.html").render(**context)


def write_report(path: str | Path, out: str | Path | None = None, sample: int = SAMPLE, seed: int = 0,
                 everything: bool = False, dataset: str | Path | None = None) -> Path:
    """Write the HTML report of ``path`` (a run, checkpoint, evaluation, bench or demo folder) to ``out``
    (default: ``path/report.html``) and return its path."""
    from rlcap.files import write_text

    data = collect(path)
    target = Path(out) if out is not None else Path(path) / "report.html"
    html = render(build_context(data, sample, seed, everything, dataset))
    write_text(target, html)
    log.info("wrote %s (%.1f MB)", target, len(html.encode("utf-8")) / 1e6)
    return target
