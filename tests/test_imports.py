"""The package's module graph: dependencies flow one way, so no module imports itself back.

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
