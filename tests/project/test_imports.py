"""The package's shape: dependencies flow one way (core <- architectures <- services <-
faces, DESIGN §2), so no module imports itself back, and no module grows past a size one
reads in a sitting (issue 12).

Every ``import`` counts, function-local ones included (a local import of a private name is
how a cycle hides); only ``if TYPE_CHECKING:`` blocks are left out, since they never run.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
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


def _imports(tree: ast.AST, modules: set[str], typing: bool = False) -> set[str]:
    found: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing:
            found |= {n for child in node.orelse for n in _imports(child, modules)}
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        found |= _imports(node, modules, typing)
    return {name for name in found if name in modules}


def import_graph(*, typing: bool = False) -> dict[str, set[str]]:
    """``module -> loopwise modules it imports`` for every module of the package (with
    ``typing``, the imports of ``if TYPE_CHECKING:`` blocks too)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {
        name: _imports(ast.parse(path.read_text()), modules, typing) - {name}
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
    assert "loopwise.testing" not in graph["loopwise.models.openai"]
    assert "loopwise.models.scripted" in graph["loopwise.models.openai"]
    assert "loopwise.testing" not in graph["loopwise.testing._fakeserver"]


MAX_LINES = 600
"""No module of the package is longer (issue 26: 700 lines; issue 46: 600). A module that
outgrows it is split by concept, not squeezed."""


def test_no_module_is_longer_than_the_limit() -> None:
    lines = {_module_name(p): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = {name: n for name, n in lines.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concept): {long}"


MAX_GETATTR = 40
"""At most this many ``getattr(`` calls in the package (issue 26: "contracts declared, not
guessed"). A member the library reads from its own steps or models is declared, with its
default, on ``StepDefaults`` / ``ModelDefaults`` and read as an attribute (or through
``step_member`` / ``model_member`` for any step or model); ``getattr`` is left for what
cannot be declared (a user's module attribute, an SDK object, a name chosen at run time),
and each one carries a comment saying why."""


def _getattr_calls() -> dict[str, list[int]]:
    """``module -> lines of its getattr() calls`` (calls, not the word in a string)."""
    found: dict[str, list[int]] = {}
    for path in PACKAGE.rglob("*.py"):
        lines = [
            node.lineno
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
        ]
        if lines:
            found[_module_name(path)] = sorted(lines)
    return found


def _comment_lines(source: str) -> set[int]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0] for t in tokens if t.type == tokenize.COMMENT}


def test_getattr_is_rare_and_each_one_says_why() -> None:
    calls = _getattr_calls()
    total = sum(len(lines) for lines in calls.values())
    most = sorted(calls.items(), key=lambda item: -len(item[1]))[:5]
    assert total <= MAX_GETATTR, (
        f"{total} getattr() calls in the package, over {MAX_GETATTR}: declare the member "
        f"(StepDefaults / ModelDefaults) instead of guessing it; most in {most}"
    )
    unexplained = []
    for module, lines in calls.items():
        path = PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")
        if not path.exists():
            path = path.with_suffix("") / "__init__.py"
        comments = _comment_lines(path.read_text())
        # the comment stands on the call's line or within the three lines above it
        unexplained += [f"{module}:{n}" for n in lines if not comments & set(range(n - 3, n + 1))]
    assert not unexplained, f"getattr() without a comment saying why: {unexplained}"


LAYERS = {
    "core": 0,
    "models": 0,
    "tools": 1,
    "architectures": 2,
    "store": 3,
    "running": 3,
    "evidence": 3,
    "integrations": 4,
    "testing": 4,
    "cli": 5,
    "serve": 5,
}
"""Each folder of the package is a layer (DESIGN §2), lowest first: a module may import
its own folder, folders of its rank, and lower ranks; ``loopwise.errors`` is below all.
The optional extras and the fakes for tests share a rank no lower layer may import."""


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if module == "loopwise.errors":
        return -1
    return LAYERS.get(parts[1]) if len(parts) > 2 else None


def _own_modules(graph: dict[str, set[str]]) -> set[str]:
    """The package's modules but its root and the starter projects ``loopwise init`` writes."""
    return {m for m in graph if m != "loopwise" and not m.startswith("loopwise.templates.")}


def test_every_module_lives_in_a_layer_folder() -> None:
    folders = {f"loopwise.{folder}" for folder in LAYERS}
    unplaced = sorted(
        m for m in _own_modules(import_graph()) if _layer(m) is None and m not in folders
    )
    assert not unplaced, f"move {unplaced} into a layer folder ({', '.join(LAYERS)})"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import running up a layer, named ``module (folder) imports target (folder)``."""
    upward = []
    for module in sorted(_own_modules(graph)):
        here = _layer(module)
        for target in sorted(graph[module] - {"loopwise"}):
            there = _layer(target)
            if here is not None and there is not None and there > here:
                upward.append(f"{module} (rank {here}) imports {target} (rank {there})")
    return upward


def test_dependencies_flow_one_way_typing_imports_included() -> None:
    upward = upward_imports(import_graph(typing=True))
    assert not upward, "\n".join(upward)


def test_the_layer_check_names_an_upward_import() -> None:
    graph = {
        "loopwise.core.step": {"loopwise.tools.calls"},
        "loopwise.tools.calls": {"loopwise.core.step"},
    }
    assert upward_imports(graph) == [
        "loopwise.core.step (rank 0) imports loopwise.tools.calls (rank 1)"
    ]


def test_the_import_graph_has_no_cycle_typing_imports_included() -> None:
    cycle = _find_cycle(import_graph(typing=True))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _root_names(tree: ast.AST) -> set[str]:
    """The names a module imports from the package root (``from loopwise import X``)."""
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "loopwise" and node.level == 0
        for alias in node.names
        if not (PACKAGE / f"{alias.name}.py").exists() and not (PACKAGE / alias.name).is_dir()
    }


def test_modules_take_nothing_from_the_package_root() -> None:
    # The root re-exports every layer's names: importing one of them from inside the
    # package would hide an upward (or cyclic) dependency from the checks above.
    taken = {
        _module_name(p): names
        for p in PACKAGE.rglob("*.py")
        if p != PACKAGE / "__init__.py"
        and "templates" not in p.relative_to(PACKAGE).parts
        and (names := _root_names(ast.parse(p.read_text())))
    }
    assert not taken, taken


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


def _defined(tree: ast.Module) -> set[str]:
    """The names a module's own top level defines (functions, classes, assignments)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def forwarded_imports() -> list[str]:
    """Every in-package ``from loopwise.X import name`` where X does not define ``name``."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    defined = {m: _defined(ast.parse(p.read_text())) for m, p in files.items()}
    found = []
    for module, path in sorted(files.items()):
        if module == "loopwise" or module.startswith("loopwise.templates"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module not in files:
                continue
            for alias in node.names:
                if alias.name not in defined[node.module] and (
                    f"{node.module}.{alias.name}" not in files
                ):
                    found.append(f"{module}: {alias.name} from {node.module}")
    return found


def test_every_import_names_the_module_that_defines_the_name() -> None:
    # A name taken through a module that merely re-exports it hides the real dependency
    # (and loads the door: the examples' ModelRequest once loaded the openai SDK).
    found = forwarded_imports()
    assert not found, "import these from their home module:\n" + "\n".join(found)


def test_the_face_loads_each_name_from_its_home() -> None:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    wrong = [
        f"{name}: {module}"
        for name, module in loopwise._LAZY.items()  # type: ignore[attr-defined]
        if name not in _defined(ast.parse(files[module].read_text()))
    ]
    assert not wrong, wrong


def test_the_report_imports_neither_the_sweep_runner_nor_an_architecture() -> None:
    # The report draws numbers; running a sweep (and through it the cascade) is not its job.
    code = (
        "import sys, loopwise.evidence.report\n"
        "bad = sorted(m for m in sys.modules if m.startswith('loopwise.architectures')"
        " or m == 'loopwise.evidence.sweeps.sweep')\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", out.stdout


EVIDENCE_FAMILIES = {"evals": 0, "sweeps": 1, "graduate": 1}
"""``evidence/``'s family folders: the sweeps and graduation build on the evals, never the
other way, and neither reaches into the other."""


def test_evidence_families_build_on_the_evals_one_way() -> None:
    graph = import_graph(typing=True)
    wrong = []
    for module in sorted(_own_modules(graph)):
        parts = module.split(".")
        if parts[1] != "evidence" or len(parts) < 4 or parts[2] not in EVIDENCE_FAMILIES:
            continue
        for target in graph[module]:
            there = target.split(".")
            if len(there) < 4 or there[1] != "evidence" or there[2] == parts[2]:
                continue
            if there[2] in EVIDENCE_FAMILIES and (
                EVIDENCE_FAMILIES[there[2]] >= EVIDENCE_FAMILIES[parts[2]]
            ):
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_the_kernel_imports_no_model_adapter() -> None:
    # core/ knows the model port; a model *name* is resolved by the runner, not the kernel.
    graph = import_graph(typing=True)
    reach = sorted(
        f"{m} imports {t}"
        for m in graph
        if m.startswith("loopwise.core.")
        for t in graph[m]
        if t.startswith("loopwise.models.") and t != "loopwise.models.port"
    )
    assert not reach, reach
