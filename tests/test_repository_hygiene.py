"""What a reader of src/ and docs/ never meets: the papers' file names of the development folder (papers
are cited by key, docs/PAPERS.md), numbers of an issue tracker users do not have, and modules too long to
read in one sitting."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEXTS = [*(REPO / "src").rglob("*.py"), *(REPO / "docs").rglob("*.md"), REPO / "README.md"]
PAPER_FILE = re.compile(r"\b00\d_[0-9a-f]{8,}")  # 000_45a29dab880026f9.txt and the like
ISSUE = re.compile(r"\bissues?\s+#?\d+|(?<![\w&/])#\d{1,3}\b(?![\w-])", re.IGNORECASE)


def _hits(pattern: re.Pattern[str]) -> list[str]:
    out = []
    for path in TEXTS:
        text = path.read_text(encoding="utf-8")
        out += [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
                for m in pattern.finditer(text)]
    return out


def test_the_patterns_find_what_they_look_for():
    assert PAPER_FILE.search("see 000_45a29dab880026f9.txt") and ISSUE.search("as issue\n  15 asked")
    assert ISSUE.search("fixed in #31.") and not ISSUE.search("colour #1f77b4, [Dai17 eq. 3], &#39;")


def test_no_paper_file_name_and_no_issue_number_in_src_or_docs():
    assert _hits(PAPER_FILE) == []
    assert _hits(ISSUE) == []


def test_no_module_in_src_over_400_lines():
    long = {str(p.relative_to(REPO)): n for p in (REPO / "src").rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}


def _long_functions(source: str, most: int) -> list[str]:
    """The functions (methods too) of ``source`` longer than ``most`` lines, decorators and docstrings counted."""
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > most]


def test_no_function_in_src_over_80_lines():
    assert _long_functions("def f():\n" + "    x = 1\n" * 80, 80) == ["f (81 lines)"]  # (the scan finds one)
    long = {str(p.relative_to(REPO)): found for p in (REPO / "src").rglob("*.py")
            if (found := _long_functions(p.read_text(encoding="utf-8"), 80))}
    assert long == {}


def test_train_is_an_engine_of_at_most_eight_modules():
    """train/ holds the engine (session, optimizer step, checkpoints, run folder, logs, validation); a method's
    helpers live beside the methods, evaluation in eval/."""
    modules = sorted(p.name for p in (REPO / "src" / "rlcap" / "train").glob("*.py"))
    assert len(modules) <= 8, modules


def test_no_run_config_is_assembled_at_run_time():
    """Each method's run config is a class written in its file, never one made by make_dataclass."""
    assert [str(p.relative_to(REPO)) for p in (REPO / "src").rglob("*.py")
            if "make_dataclass" in p.read_text(encoding="utf-8")] == []
