"""Score tables for the terminal."""

from __future__ import annotations


def _cell(value: float) -> str:
    """A count (an int) as it is, any other figure to 4 decimals."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else f"{value:.4f}"


def format_scores(rows: dict[str, dict[str, float]], label: str = "system") -> str:
    """A fixed-width table: one row per system, one column per metric (first row's order);
    ``label`` heads the column of row names. Counts (ints) print as integers, other figures to 4 decimals."""
    metrics: list[str] = []
    for scores in rows.values():
        metrics.extend(m for m in scores if m not in metrics)
    name_w = max([len(label), *(len(n) for n in rows)])
    col_w = max([7, *(len(m) for m in metrics)])
    lines = [label.ljust(name_w) + "".join(m.rjust(col_w + 2) for m in metrics)]
    for name, scores in rows.items():
        cells = "".join((_cell(scores[m]) if m in scores else "-").rjust(col_w + 2) for m in metrics)
        lines.append(name.ljust(name_w) + cells)
    return "\n".join(lines)


def print_scores(rows: dict[str, dict[str, float]]) -> None:
    print(format_scores(rows))
