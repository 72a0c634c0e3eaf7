"""Imports run one way: no module of the package imports, however indirectly, a module that
imports it back. Every import counts, inside functions and under TYPE_CHECKING too (a lazy
import kept for start-up time must still point down). `make lint` runs this test."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"


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


# The floors, lowest first (docs/architecture.md#the-floors). A module imports its own floor
# and those below; a new module belongs to a floor before this test passes.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("ringflow", "ringflow.core")),
    (
        "mechanisms",
        (
            "ringflow.supervisor",
            "ringflow.sandbox",
            "ringflow.weights",
            "ringflow.workcopy",
            "ringflow.task",
            "ringflow.candidate",
            "ringflow.scorer_modes",
            "ringflow.guardstats",
            "ringflow.config",
            "ringflow.demo",
            "ringflow.cluster",
        ),
    ),
    (
        "stages",
        (
            "ringflow.ring",
            "ringflow.scoring",
            "ringflow.execute",
            "ringflow.nodes",
            "ringflow.carryover",
            "ringflow.search",
            "ringflow.selection",
            "ringflow.reporting",
            "ringflow.verify",
            "ringflow.check_guard",
            "ringflow.precheck",
        ),
    ),
    ("glue", ("ringflow.workflow", "ringflow.cli", "ringflow.__main__", "ringflow.docs_config")),
]


def unit_of(module: str) -> tuple[int, str]:
    """(floor number, the floor's package or module holding `module`)."""
    best: tuple[int, str] | None = None
    for number, (_name, units) in enumerate(FLOORS):
        for unit in units:
            # The package root holds only its version: it contains no other module.
            inside = module == unit or (unit != "ringflow" and module.startswith(unit + "."))
            if inside and (best is None or len(unit) > len(best[1])):
                best = (number, unit)
    assert best is not None, f"{module} belongs to no floor: add it to FLOORS"
    return best


def units_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package (or top-level module) -> the others it imports."""
    units: dict[str, set[str]] = {}
    for name, targets in graph.items():
        unit = unit_of(name)[1]
        units.setdefault(unit, set()).update(
            other for t in targets if (other := unit_of(t)[1]) != unit
        )
    return units


def test_the_checker_sees_an_arrow_running_up():
    assert unit_of("ringflow.core.jsonio") == (0, "ringflow.core")
    assert unit_of("ringflow.cli") == (3, "ringflow.cli")
    assert cycles(units_graph({"ringflow.nodes": {"ringflow.search.plan"},
                               "ringflow.search.plan": {"ringflow.nodes"}})) == [
        ["ringflow.nodes", "ringflow.search"]
    ]  # fmt: skip


def test_every_import_points_to_its_own_floor_or_below():
    graph = import_graph()
    upward = [
        f"{name} ({FLOORS[unit_of(name)[0]][0]}) imports {target} ({FLOORS[unit_of(target)[0]][0]})"
        for name, targets in graph.items()
        for target in targets
        if unit_of(target)[0] > unit_of(name)[0]
    ]
    assert upward == []


def test_no_two_packages_import_each_other_even_indirectly():
    assert cycles(units_graph(import_graph())) == []
