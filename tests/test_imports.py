"""The package's shape: dependencies flow one way (core <- architectures <- services <-
faces, DESIGN §2), so no module imports itself back, and no module grows past a size one
reads in a sitting (issue 12).

Every ``import`` counts, function-local ones included (a local import of a private name is
how a cycle hides); only ``if TYPE_CHECKING:`` blocks are left out, since they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import loopwise

PACKAGE = Path(loopwise.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    found: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            found |= {n for child in node.orelse for n in _imports(child, modules)}
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        found |= _imports(node, modules)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    """``module -> loopwise modules it imports`` for every module of the package."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {
        name: _imports(ast.parse(path.read_text()), modules) - {name}
        for name, path in files.items()
    }


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_the_package_import_graph_has_no_cycle() -> None:
    cycle = _find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _find_cycle(graph) == ["a", "b", "c", "a"]


def test_local_imports_count_and_type_checking_ones_do_not() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from loopwise.b import X\n"
        "def f():\n    from loopwise import c\n    import loopwise.d\n"
    )
    modules = {"loopwise", "loopwise.b", "loopwise.c", "loopwise.d"}
    assert _imports(ast.parse(source), modules) == {"loopwise.c", "loopwise.d"}


def test_the_model_port_does_not_import_the_test_fakes() -> None:
    graph = import_graph()
    assert "loopwise.testing" not in graph["loopwise.model"]
    assert "loopwise.scripted" in graph["loopwise.model"]
    assert "loopwise.testing" not in graph["loopwise._fakeserver"]


MAX_LINES = 720
"""No module of the package is longer: issue 12's bar ("no module above ~700 lines"),
with room for a fix or two. A module that outgrows it is split by concept, not squeezed."""


def test_no_module_is_longer_than_the_limit() -> None:
    lines = {_module_name(p): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = {name: n for name, n in lines.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concept): {long}"


LAYERS = {
    "core": "errors usage events options result step journal replay loops port model scripted "
    "tools allowlists digraph shape svg audit",
    "architectures": "calls structured workflow nodes wiring agent gates verdicts handlers "
    "plans hybrid history",
    "services": "store sqlstore sqlrows sqlconvo sqlite_store postgres_store stores runner "
    "targets evals stats failures recommend report decide check analyze approvals stream "
    "worker scaffold",
    "extras": "otel mcp mcp_schema testing _fakeserver _cassette _serverprofiles",
    "faces": "cli cli_analyze cli_check cli_decide cli_eval cli_init cli_input cli_options "
    "cli_run cli_runs cli_serve cli_watch cli_worker serve inbox demo",
}
"""Every module of the package by layer (DESIGN §2), lowest first. The optional extras
(OpenTelemetry, MCP) and the fakes for tests share a layer: no core, architecture or
service module may import them; only the faces (and each other) do."""


def _layer_of() -> dict[str, int]:
    return {
        f"loopwise.{name}": rank
        for rank, names in enumerate(LAYERS.values())
        for name in names.split()
    }


def _own_modules(graph: dict[str, set[str]]) -> set[str]:
    """The package's modules but its root and the starter projects ``loopwise init`` writes."""
    return {m for m in graph if m != "loopwise" and not m.startswith("loopwise.templates.")}


def test_every_module_has_a_layer() -> None:
    layer = _layer_of()
    unplaced = sorted(_own_modules(import_graph()) - set(layer))
    assert not unplaced, f"add {unplaced} to LAYERS (core, architectures, services...)"
    assert not set(layer) - _own_modules(import_graph()), "LAYERS names a module that is gone"


def test_dependencies_flow_one_way_core_architectures_services_faces() -> None:
    graph, layer, names = import_graph(), _layer_of(), list(LAYERS)
    upward = [
        f"{m} ({names[layer[m]]}) imports {d} ({names[layer[d]]})"
        for m in sorted(_own_modules(graph) & set(layer))
        for d in sorted(graph[m] - {"loopwise"})
        if layer[d] > layer[m]
    ]
    assert not upward, "\n".join(upward)


def _root_names(tree: ast.AST) -> set[str]:
    """The names a module imports from the package root (``from loopwise import X``)."""
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "loopwise" and node.level == 0
        for alias in node.names
        if not (PACKAGE / f"{alias.name}.py").exists()
    }


def test_modules_take_only_the_version_from_the_package_root() -> None:
    # The root re-exports every layer's names: importing one of them from inside the
    # package would hide an upward (or cyclic) dependency from the checks above.
    taken = {
        _module_name(p): names
        for p in PACKAGE.glob("*.py")
        if p.name != "__init__.py" and (names := _root_names(ast.parse(p.read_text())))
    }
    assert all(names == {"__version__"} for names in taken.values()), taken


def test_no_module_imports_another_modules_private_names() -> None:
    # A private name is its module's own business (STYLE: private helpers start with _);
    # one another module needs is part of that module's interface, and named as such.
    taken = sorted(
        f"{_module_name(p)} imports {node.module}.{alias.name}"
        for p in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loopwise")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    )
    assert not taken, "\n".join(taken)
