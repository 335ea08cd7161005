"""The method tables (images, video) as Markdown, and the training curves as a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcap.train.logger import read_log

BEAM_COLUMNS = ["METEOR", "CIDEr", "SPICE", "CLIP-S", "RefCLIP-S"]  # the last two: rlcap bench --clip
SET_COLUMNS = ["CIDEr", "Div-1", "Div-2", "mBLEU-4"]
# [Wang18]'s Table 2 (the video table): every pycocoevalcap metric of the beam captions
VIDEO_BEAM_COLUMNS = ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE"]


def set_names(methods: dict[str, Any]) -> list[str]:
    """The caption sets of the rows, in table order: ``rs``, any ``rs@T``, ``bs``."""
    return ["rs", *sorted({k for row in methods.values() for k in row if k.startswith("rs@")}), "bs"]


def set_cells(row: dict[str, Any], sets: list[str], scale: float = 1.0, digits: int = 3) -> list[str]:
    """One method's cells for ``sets`` x :data:`SET_COLUMNS`, "-" for a set it lacks: CIDEr-D times
    ``scale`` to ``digits`` decimals (100 and 1 in the video table, as [Chen20]'s Table 4), the diversity
    figures as fractions to 3 decimals."""
    cells = []
    for s in sets:
        for c in SET_COLUMNS:
            if s not in row:
                cells.append("-")
            else:
                cells.append(f"{scale * row[s][c]:.{digits}f}" if c == "CIDEr" else f"{row[s][c]:.3f}")
    return cells


def results_markdown(results: dict[str, Any]) -> str:
    """Table 4 of [Chen20]: beam METEOR/CIDEr-D/SPICE; rs and bs CIDEr-D and diversity;
    and the training cost of the method's own last stage (minutes, seconds per update) when logged."""
    methods = results["methods"]
    beam_cols = [c for c in BEAM_COLUMNS if any(c in row["beam"] for row in methods.values())]
    sets = set_names(methods)
    head = ["method", *(f"beam {c}" for c in beam_cols), *(f"{s} {c}" for s in sets for c in SET_COLUMNS),
            "train min", "s/update"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in methods.items():
        cost = row.get("cost") or {}
        cells = [name, *(f"{row['beam'][c]:.3f}" for c in beam_cols), *set_cells(row, sets),
                 f"{cost['minutes']:.1f}" if cost else "-", f"{cost['seconds_per_update']:.2f}" if cost else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def video_markdown(results: dict[str, Any]) -> str:
    """The video table: [Wang18]'s Table 2 columns (:data:`VIDEO_BEAM_COLUMNS` of the beam captions) and
    [Chen20]'s Table 4 columns of the rs and bs sets, scores x 100 (as both papers), diversity as fractions."""
    methods = results["methods"]
    sets = set_names(methods)
    head = ["method", *VIDEO_BEAM_COLUMNS, *(f"{s} {c}" for s in sets for c in SET_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name, row in methods.items():
        beam = [f"{100 * row['beam'].get(c, float('nan')):.1f}" for c in VIDEO_BEAM_COLUMNS]
        lines.append("| " + " | ".join([name, *beam, *set_cells(row, sets, scale=100.0, digits=1)]) + " |")
    return "\n".join(lines) + "\n"


def training_cost(log: Path) -> dict[str, float] | None:
    """Wall-clock of a stage from its log: minutes from its first to its last record and seconds per
    training update (None for a log written before records carried their time)."""
    if not log.exists():
        return None
    records = [r for r in read_log(log) if "time" in r]
    updates = [r["step"] for r in records if r.get("split") == "train"]
    if len(records) < 2 or not updates:
        return None
    seconds = records[-1]["time"] - records[0]["time"]
    return {"minutes": seconds / 60, "seconds_per_update": seconds / max(max(updates) - min(updates) + 1, 1)}


def plot_curves(logs: dict[str, Path], out: Path) -> None:
    """Validation CIDEr-D and mean training reward against steps, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    fig, (ax_val, ax_rew) = plt.subplots(1, 2, figsize=(11, 4))
    for method, path in logs.items():
        if not path.exists():
            continue
        records = read_log(path)
        val = [(r["step"], r["CIDEr"]) for r in records if "CIDEr" in r]
        rew = [(r["step"], r["reward"]) for r in records if r.get("split") == "train" and "reward" in r]
        if val:
            ax_val.plot(*zip(*val), marker="o", label=method)
        if rew:
            ax_rew.plot(*zip(*rew), label=method)
    ax_val.set(title="validation CIDEr-D", xlabel="step (each method from its own start)", ylabel="CIDEr-D")
    ax_rew.set(title="mean training reward (RL methods)", xlabel="step", ylabel="reward")
    for ax in (ax_val, ax_rew):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # (no RL method ran: no reward curve to name)
            ax.legend()
        else:
            ax.text(0.5, 0.5, "no curve", transform=ax.transAxes, ha="center", va="center", color="grey")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
