"""Every third-party module the package imports is installed by what it declares: a core
dependency, or the extra of the one module allowed to need it (the module then says what
to install, tests/project/test_extras.py). A fresh ``pip install loopwise`` never meets a
ModuleNotFoundError on a core path (a cascade's person gate once needed jsonschema, which
only the dev and mcp extras brought)."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import loopwise

PACKAGE = Path(loopwise.__file__).parent

#: Modules (relative to the package) that may import an extra's distribution, and the extra.
EXTRA_MODULES = {
    "integrations/otel.py": "otel",
    "cli/watch.py": "otel",  # builds --otel's provider, after otel.py checked the extra
    "integrations/mcp/servers.py": "mcp",
    "integrations/mcp/connection.py": "mcp",
    "integrations/mcp/elicit.py": "mcp",
    "integrations/mcp/wire_http.py": "mcp",
    "integrations/mcp/listing.py": "mcp",
    "integrations/mcp/mapping.py": "mcp",
    "integrations/mcp/schema.py": "mcp",
    "integrations/mcp/wire.py": "mcp",
    "integrations/mcp/results.py": "mcp",
    **{
        f"integrations/temporal/{m}.py": "temporal"
        for m in ("activities", "codec", "store", "worker", "workflow")
    },
    "store/postgres.py": "postgres",
    "testing/pytest_plugin.py": "test",
}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: set[str]) -> set[str]:
    """The distributions ``names`` install, theirs included (extras' markers left out)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def _declared() -> dict[str | None, set[str]]:
    """Extra (``None``: core) → the distributions installing it brings."""
    requires = metadata.requires("loopwise") or []
    core = {_name(r) for r in requires if "extra ==" not in r}
    found: dict[str | None, set[str]] = {None: _closure(core)}
    for r in requires:
        extra = re.search(r"extra == ['\"]([\w-]+)['\"]", r)
        if extra:
            found.setdefault(extra[1], set()).add(_name(r))
    return {k: v if k is None else _closure(v) | found[None] for k, v in found.items()}


def _imports(path: Path) -> set[str]:
    tops = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    ours = ("loopwise", "__future__")
    return {t for t in tops if t not in sys.stdlib_module_names and t not in ours}


def test_every_import_is_installed_by_a_declared_dependency() -> None:
    declared = _declared()
    providers = metadata.packages_distributions()
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("templates/"):  # the starters import their own modules
            continue
        allowed = declared[EXTRA_MODULES.get(where)]
        for top in sorted(_imports(path)):
            dists = {_name(d) for d in providers.get(top, [])}
            if not dists & allowed:
                problems.append(f"{where} imports {top} ({', '.join(sorted(dists)) or '?'})")
    assert not problems, "not installed by what loopwise declares:\n" + "\n".join(problems)
