"""The import graph of src/rlcap: no circle among its modules, every import counted (those inside functions
and under ``if TYPE_CHECKING:`` too: a deferred import still ties the two modules together, and a reader or a
tool follows it like any other)."""

from __future__ import annotations

import ast
import itertools
import re
import sys
from pathlib import Path
from typing import NamedTuple

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The rlcap modules ``name`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative
                package = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}".rstrip(".")
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("rlcap."):
            found.add(node.value.partition(":")[0])  # a module named by a string, for importlib: "rlcap.cli.train"
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(files)
    return {name: _imports(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py",
                                     modules)
            for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_checker_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_src():
    graph = import_graph()
    assert len(graph) > 150 and "rlcap.run_config" in graph["rlcap.methods.scst"]
    assert "rlcap.cli.train" in graph["rlcap.cli"]  # the CLI's lazy imports, named by string, are counted
    assert circles(graph) == []


def _in(package: str, module: str) -> bool:
    return module == package or module.startswith(package + ".")


def arrows(graph: dict[str, set[str]], lower: str, higher: str) -> list[tuple[str, str]]:
    """The imports from a module of package ``lower`` to one of package ``higher``: what the layering forbids."""
    return sorted((m, t) for m, targets in graph.items() if _in(lower, m) for t in targets if _in(higher, t))


def test_the_arrow_checker_finds_an_upward_import():
    graph = {"rlcap.data.a": {"rlcap.encoders.hf", "rlcap.errors"}, "rlcap.encoders.hf": {"rlcap.data.a"},
             "rlcap.database": {"rlcap.encoders"}}
    assert arrows(graph, "rlcap.data", "rlcap.encoders") == [("rlcap.data.a", "rlcap.encoders.hf")]


def test_report_and_eval_import_no_method():
    """The report and a run opened for inference read what a run recorded, never a method's code."""
    graph = import_graph()
    assert "rlcap.report.page" in graph and "rlcap.eval.open_run" in graph
    assert arrows(graph, "rlcap.report", "rlcap.methods") == []
    assert arrows(graph, "rlcap.eval", "rlcap.methods") == []


def test_data_imports_no_encoder():
    """The transformers helpers data/ and encoders/ share live below both, in rlcap.transformers_io."""
    graph = import_graph()
    assert "rlcap.transformers_io" in graph["rlcap.data.hf_text"]
    assert arrows(graph, "rlcap.data", "rlcap.encoders") == []


def test_metrics_import_no_reward():
    """Corpus scores combined from metrics (SPIDEr, BCMR) are the metrics'; a reward takes its weights from them."""
    graph = import_graph()
    assert "rlcap.metrics.combined" in graph["rlcap.rewards.bcmr"]
    assert arrows(graph, "rlcap.metrics", "rlcap.rewards") == []


# what the engine may import of rlcap.models: the package's builders, the protocols, the model section and the
# families' registry; every other module of it is a family's (or a part's) own
ENGINE_MAY_IMPORT = {"rlcap.models", "rlcap.models.base", "rlcap.models.architecture", "rlcap.models.architectures",
                     "rlcap.models.model_config"}


def engine_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports of a module of rlcap.train that the layering forbids: a model family's module, a method, a
    reward."""
    return sorted((m, t) for m, targets in graph.items() if _in("rlcap.train", m) for t in targets
                  if (_in("rlcap.models", t) and t not in ENGINE_MAY_IMPORT) or _in("rlcap.methods", t)
                  or _in("rlcap.rewards", t))


def test_the_engine_checker_finds_a_family_a_method_and_a_reward():
    graph = {"rlcap.train.a": {"rlcap.models.hf.architecture", "rlcap.models.architectures", "rlcap.methods.xe"},
             "rlcap.train.b": {"rlcap.rewards.bcmr", "rlcap.models.base"}, "rlcap.eval.c": {"rlcap.models.hf.architecture"}}
    assert engine_arrows(graph) == [("rlcap.train.a", "rlcap.methods.xe"), ("rlcap.train.a", "rlcap.models.hf.architecture"),
                                    ("rlcap.train.b", "rlcap.rewards.bcmr")]


def test_the_engine_imports_no_model_family_no_method_and_no_reward():
    """train/ asks a model family what it needs through the registry (rlcap.models.architectures), never its module."""
    graph = import_graph()
    assert "rlcap.models.architectures" in graph["rlcap.train.checkpoint"]
    assert "rlcap.models.hf.architecture" in graph["rlcap.models.architectures"]
    assert engine_arrows(graph) == []


# --- docs/ARCHITECTURE.md's layering table, row by row -----------------------------------------------------------

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"
TORCH = "torch"  # the one name outside rlcap a row's "never imports" may give


class Row(NamedTuple):
    packages: tuple[str, ...]  # the first column's backticked names: rlcap packages and modules
    imports: tuple[str, ...]   # the third column's backticked names outside parentheses (a package by its short
    never: tuple[str, ...]     # name, `data`), and the fourth column's; a parenthesis says why, in any words


def layering_rows(page: str) -> list[Row]:
    """The rows of the table under "## Packages and their layering", the lowest first."""
    lines = page.split("## Packages and their layering", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))[2:]  # (header, rule)
    rows = []
    for line in table:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        names = [tuple(re.findall(r"`([^`]+)`", re.sub(r"\([^()]*\)", "", cell))) for cell in cells]
        rows.append(Row(names[0], names[2], names[3]))
    return rows


def short_names(rows: list[Row]) -> dict[str, int]:
    """A package's short name (``rlcap.data``: ``data``) -> its row."""
    return {name.removeprefix("rlcap."): i for i, row in enumerate(rows) for name in row.packages}


def row_of(rows: list[Row], module: str) -> int | None:
    """The row whose package holds ``module`` (the root package ``rlcap`` holds only itself)."""
    found = [i for i, row in enumerate(rows) for p in row.packages if module == p or (p != "rlcap" and _in(p, module))]
    return found[0] if len(found) == 1 else None


def row_arrows(graph: dict[str, set[str]], rows: list[Row]) -> dict[int, dict[int, list[tuple[str, str]]]]:
    """row -> the rows its modules import (the first row, the foundation every row may import, and its own left
    out) -> the imports that make each arrow."""
    arrows: dict[int, dict[int, list[tuple[str, str]]]] = {i: {} for i in range(len(rows))}
    for module, targets in graph.items():
        for target in targets:
            i, j = row_of(rows, module), row_of(rows, target)
            if i != j and j != 0:
                arrows[i].setdefault(j, []).append((module, target))
    return arrows


def imports_torch(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        if any(name == TORCH or name.startswith(TORCH + ".") for name in names):
            return True
    return False


def test_the_table_reader_reads_names_from_each_column():
    page = ("## Packages and their layering\n\n| package | holds | imports | never imports |\n|---|---|---|---|\n"
            "| `rlcap.errors`, `rlcap` | the foundation | nothing outside it | |\n"
            "| `rlcap.data` | `Vocab` | `metrics` (the `Vocab`'s tokenizer) | `models`, `torch` |\n\nprose\n| `x` | | | |\n")
    rows = layering_rows(page)
    assert rows == [Row(("rlcap.errors", "rlcap"), (), ()), Row(("rlcap.data",), ("metrics",), ("models", "torch"))]
    assert short_names(rows) == {"errors": 0, "rlcap": 0, "data": 1}
    assert row_of(rows, "rlcap.data.vocab") == 1 and row_of(rows, "rlcap") == 0 and row_of(rows, "rlcap.api") is None
    graph = {"rlcap.data.vocab": {"rlcap.errors", "rlcap.data.feats"}, "rlcap.data.feats": set()}
    assert row_arrows(graph, rows) == {0: {}, 1: {}}  # the foundation and its own package: no arrow


def test_every_module_of_src_is_in_one_row_of_the_table():
    rows = layering_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(rows) > 15 and "rlcap.errors" in rows[0].packages  # the foundation: the first row
    graph = import_graph()
    assert [m for m in sorted(graph) if row_of(rows, m) is None] == []
    assert [p for row in rows for p in row.packages if not any(m == p or _in(p, m) for m in graph)] == []


def test_each_row_imports_exactly_the_rows_it_lists_and_only_rows_above_it():
    """The table is the import graph: a row's third column lists every package its modules import (the foundation
    aside), no other, and each is a row above it (a lower package never imports a higher one)."""
    rows = layering_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    short = short_names(rows)
    unknown = [(row.packages[0], name) for row in rows for name in (*row.imports, *row.never)
               if name not in short and name != TORCH]
    assert unknown == [], "a name in the table's third or fourth column that is no row's package"
    arrows = row_arrows(import_graph(), rows)
    for i, row in enumerate(rows):
        listed = {short[name] for name in row.imports}
        unlisted = {rows[j].packages[0]: pairs[0] for j, pairs in arrows[i].items() if j not in listed}
        assert unlisted == {}, f"{row.packages[0]} imports what its row does not list (one import each)"
        absent = [rows[j].packages[0] for j in listed if j not in arrows[i]]
        assert absent == [], f"{row.packages[0]}'s row lists packages it does not import"
        assert all(j < i for j in listed), f"{row.packages[0]} imports a row below it in the table"


def test_no_row_imports_what_it_never_imports():
    rows = layering_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    short = short_names(rows)
    arrows = row_arrows(import_graph(), rows)
    assert any(row.never for row in rows) and any(TORCH in row.never for row in rows)
    for i, row in enumerate(rows):
        never = {short[name] for name in row.never if name != TORCH}
        assert never.isdisjoint(short[name] for name in row.imports), row.packages[0]
        assert {rows[j].packages[0]: arrows[i][j][0] for j in never if j in arrows[i]} == {}, row.packages[0]
        if TORCH in row.never:
            files = [p for name in row.packages for p in (sorted((SRC / name.replace(".", "/")).rglob("*.py"))
                     if (SRC / name.replace(".", "/")).is_dir() else [SRC / f"{name.replace('.', '/')}.py"])]
            assert files and [p.name for p in files if imports_torch(p)] == [], row.packages[0]
