"""Learning curves from log.jsonl, drawn by matplotlib as inline SVG: one plot per quantity, the systems overlaid,
against optimizer steps and against wall time."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

# Training quantities plotted when a log has them (the RL loops log reward and entropy; XE its loss only)
TRAIN_KEYS = [("loss", "training loss"), ("reward", "mean training reward"), ("entropy", "entropy of the samples"),
              ("length", "sampled caption length (words)")]
NOT_METRICS = {"step", "epoch", "time", "split", "text", "metric"}
PART_TITLE = "mean training reward, unweighted: "  # a curve per reward of a summed reward (reward/<name>)


def curves(logs: dict[str, Path]) -> dict[str, dict[str, list[tuple[float, float, float]]]]:
    """quantity -> system -> [(step, minutes since the log's first record, value)]: the training keys of
    :data:`TRAIN_KEYS` and every numeric key of the validation records."""
    from rlcap.train.logger import read_log

    out: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    for name, path in logs.items():
        if path is None or not path.exists():
            continue
        records = read_log(path)
        t0 = next((r["time"] for r in records if "time" in r), None)
        for r in records:
            minutes = (r["time"] - t0) / 60 if t0 is not None and "time" in r else float("nan")
            if r.get("split") == "train":
                keys = [(k, f"{title}") for k, title in TRAIN_KEYS if k in r]
                # a summed reward's parts, each its own unweighted mean (rlcap.rewards.combine.part_means)
                keys += [(k, f"{PART_TITLE}{k[len('reward/'):]}") for k in r if k.startswith("reward/")]
            elif r.get("split") == "val":
                keys = [(k, f"validation {k}") for k, v in r.items()
                        if k not in NOT_METRICS and isinstance(v, (int, float))]
            else:
                continue
            for key, title in keys:
                out.setdefault(title, {}).setdefault(name, []).append((r["step"], minutes, float(r[key])))
    return out


def svg_plot(series: dict[str, list[tuple[float, float, float]]], title: str, x: str) -> str:
    """One quantity's curves as an SVG element (``x``: "step" or "minutes")."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text as text: a smaller page, selectable labels
    col = 0 if x == "step" else 1
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    for name, points in series.items():
        xs, ys = [p[col] for p in points], [p[2] for p in points]
        ax.plot(xs, ys, marker="o" if len(points) < 30 else None, markersize=3, linewidth=1.2, label=name)
    ax.set(title=title, xlabel="optimizer step" if x == "step" else "wall time (minutes from the run's start)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prologue and doctype: the SVG sits inside the HTML


def plot_all(logs: dict[str, Path]) -> list[dict[str, Any]]:
    """[{title, step: svg, minutes: svg}] for every quantity any log has."""
    found = curves(logs)
    order = ([t for _, t in TRAIN_KEYS] + sorted(t for t in found if t.startswith(PART_TITLE))
             + sorted(t for t in found if t.startswith("validation")))
    return [{"title": t, "step": svg_plot(found[t], t, "step"), "minutes": svg_plot(found[t], t, "minutes")}
            for t in order if t in found]
