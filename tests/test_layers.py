"""The layering of docs/architecture.md: a module imports only from its own layer and those below."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import autosched

SRC = Path(autosched.__file__).parent

# Lowest first, as docs/architecture.md ("Layers, lowest first") lists them; every package and
# top-level module of autosched must be in one (the test below checks it).
LAYERS: list[tuple[str, ...]] = [
    ("errors", "atomic", "jsonable", "timeparse", "htmlreport", "switchback", "data"),  # foundations
    ("trace", "associations"),  # data
    ("cluster", "sim"),  # cluster and engine
    ("space", "policies"),
    ("export",),  # scheduler syntax: used by the live layer
    ("workload",),
    ("tune",),
    ("adapt",),
    ("live",),
    ("cli", "service", "client"),  # surfaces
]
LAYER = {name: k for k, names in enumerate(LAYERS) for name in names}


def _modules() -> list[tuple[str, Path]]:
    """(dotted name, path) of every module of autosched."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        out.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return out


def _imports(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import: top level, inside a function, and under
    ``if TYPE_CHECKING:`` (a type-only import of a higher layer is still a dependency: the lower
    module's interface is written in the higher one's terms)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                # `from . import x` may name a submodule: count it as one
                out.extend((node.lineno, mod if node.module else f"{mod}.{a.name}") for a in node.names)
            else:
                out.append((node.lineno, node.module or ""))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return out


def _layer(dotted: str) -> int | None:
    """The layer of an autosched module (None: not autosched's)."""
    parts = dotted.split(".")
    if parts[0] != "autosched" or len(parts) == 1 or parts[1] == "__version__":
        return None  # (autosched's own __init__ holds only the version)
    return LAYER.get(parts[1])  # (a package with no layer fails the test above)


def test_every_package_has_a_layer():
    tops = {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert sorted(tops - LAYER.keys()) == []


def test_no_module_imports_a_higher_layer():
    bad = []
    for name, path in _modules():
        mine = _layer(name)
        if mine is None:
            continue
        for line, mod in _imports(name, path):
            theirs = _layer(mod)
            if theirs is not None and theirs > mine:
                bad.append(f"{path.relative_to(SRC.parent)}:{line} imports {mod}")
    assert bad == []


@pytest.mark.parametrize("source, expected", [
    ("from ..report.html import Report", ["autosched.report.html"]),
    ("from ..report import Report", ["autosched.report"]),
    ("from . import report", ["autosched.tune.report"]),
    ("def f():\n    import autosched.cli.common", ["autosched.cli.common"]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..cli import x\nelse:\n    from ..trace import y",
     ["typing", "autosched.cli", "autosched.trace"]),
])
def test_imports_are_resolved_as_python_does(tmp_path, source, expected):
    # a module autosched/tune/x.py: the checker must see its relative and lazy imports
    path = tmp_path / "x.py"
    path.write_text(source)
    assert [m for _, m in _imports("autosched.tune.x", path)] == expected


# The agent's parts, highest first, as docs/architecture.md ("The agent's parts") draws them: a
# part imports only the parts after it (the stop switch is shared, below them all).
AGENT_PARTS = ["agent", "loop", "step", "observe", "actions", "tuning", "applying", "view",
               "stopping"]


def test_the_agents_parts_call_only_the_parts_below_them():
    rank = {f"autosched.live.{p}": k for k, p in enumerate(AGENT_PARTS)}
    bad = []
    for name in rank:
        path = SRC / "live" / f"{name.rsplit('.', 1)[1]}.py"
        for line, mod in _imports(name, path):
            if mod in rank and rank[mod] <= rank[name]:
                bad.append(f"{path.relative_to(SRC.parent)}:{line} imports {mod}")
    assert bad == []


def _graph() -> dict[str, set[str]]:
    """Each autosched module and the autosched modules it imports (as `_imports` sees them)."""
    mods = dict(_modules())
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for _, mod in _imports(name, path):
            while mod and mod not in mods:  # `from .x import name`: the module x
                mod = mod.rpartition(".")[0]
            if mod.startswith("autosched.") and mod != name:
                deps.add(mod)
        graph[name] = deps
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a circle (Tarjan's
    strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                circles.append(sorted([v, *group]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_modules_import_each_other():
    """A lazy or type-only import counts: each of a circle's modules can only be read with the
    others'."""
    assert import_circles(_graph()) == []


def test_import_circles_are_found():
    # a -> b -> c -> a and d -> e -> d, worked out by hand; f stands alone
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "f"}, "f": set()}
    assert sorted(import_circles(graph)) == [["a", "b", "c"], ["d", "e"]]
