"""Imports run one way: no module of the package imports, however indirectly, a module that
imports it back. Every import counts, inside functions and under TYPE_CHECKING too (a lazy
import kept for start-up time must still point down). `make lint` runs this test."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "ringflow").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports. `from package import submodule` is an
    import of the submodule."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [target, *subs]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
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
            visit(v)
    return found


def test_the_checker_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back():
    assert cycles(import_graph()) == []


def test_the_workflow_glue_and_the_cli_are_the_top_floor():
    """Nothing of the package imports the workflow glue or the command line."""
    graph = import_graph()
    for name, targets in graph.items():
        top = {t for t in targets if t.startswith(("ringflow.workflow", "ringflow.cli"))}
        if name.startswith(("ringflow.workflow", "ringflow.cli", "ringflow.__main__")):
            continue
        assert not top, f"{name} imports {sorted(top)}"


def test_the_records_floor_imports_nothing_above_it():
    """Errors, JSON files, statuses and the ring's paths are the floor everything stands on."""
    floor = {"ringflow.errors", "ringflow.jsonio", "ringflow.statuses", "ringflow.ring.layout"}
    graph = import_graph()
    for name in floor:
        assert graph[name] <= floor, f"{name} imports {sorted(graph[name] - floor)}"
