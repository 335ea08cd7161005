"""The terminal's score tables (rlcap.cli.tables): counts as integers, other figures to 4 decimals."""

from rlcap.cli.tables import format_scores


def test_counts_print_as_integers_and_figures_to_four_decimals():
    table = format_scores({"third shape": {"samples": 205, "mean R": 0.46612, "flag": True},
                           "other": {"samples": 484, "mean R": 0.7}}, label="form")
    header, first, second = table.splitlines()
    assert header.split() == ["form", "samples", "mean", "R", "flag"]
    assert first.split() == ["third", "shape", "205", "0.4661", "1.0000"]  # (a bool is a figure, not a count)
    assert second.split() == ["other", "484", "0.7000", "-"]
    assert len({len(line) for line in (header, first, second)}) == 1  # fixed width
