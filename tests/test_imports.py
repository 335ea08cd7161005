"""The import graph of src/rlcap: no circle among its modules, every import counted (those inside functions
and under ``if TYPE_CHECKING:`` too: a deferred import still ties the two modules together, and a reader or a
tool follows it like any other)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

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
ENGINE_MAY_IMPORT = {"rlcap.models", "rlcap.models.base", "rlcap.models.family", "rlcap.models.families",
                     "rlcap.models.model_config"}


def engine_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports of a module of rlcap.train that the layering forbids: a model family's module, a method, a
    reward."""
    return sorted((m, t) for m, targets in graph.items() if _in("rlcap.train", m) for t in targets
                  if (_in("rlcap.models", t) and t not in ENGINE_MAY_IMPORT) or _in("rlcap.methods", t)
                  or _in("rlcap.rewards", t))


def test_the_engine_checker_finds_a_family_a_method_and_a_reward():
    graph = {"rlcap.train.a": {"rlcap.models.hf_family", "rlcap.models.families", "rlcap.methods.xe"},
             "rlcap.train.b": {"rlcap.rewards.bcmr", "rlcap.models.base"}, "rlcap.eval.c": {"rlcap.models.hf_family"}}
    assert engine_arrows(graph) == [("rlcap.train.a", "rlcap.methods.xe"), ("rlcap.train.a", "rlcap.models.hf_family"),
                                    ("rlcap.train.b", "rlcap.rewards.bcmr")]


def test_the_engine_imports_no_model_family_no_method_and_no_reward():
    """train/ asks a model family what it needs through the registry (rlcap.models.families), never its module."""
    graph = import_graph()
    assert "rlcap.models.families" in graph["rlcap.train.checkpoint"]
    assert "rlcap.models.hf_family" in graph["rlcap.models.families"]
    assert engine_arrows(graph) == []
