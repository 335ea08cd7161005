"""``rlcap report``: one self-contained HTML page per run, evaluation or bench folder (docs/REPORT.md)."""

from rlcap.report.page import write_report

__all__ = ["write_report"]
