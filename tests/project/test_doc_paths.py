"""Every dotted ``loopwise.…`` path a docstring, a comment or a docs page names exists: a
module moved into a folder (``sqlstore``, ``mcp_wire``, ``evidence.sweep``) leaves no
reader following a path to nowhere (issue 46)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

from tests.support import ROOT

PACKAGE = ROOT / "src" / "loopwise"
PATH = re.compile(r"(?<![\w/])loopwise(?:\.[A-Za-z_]\w*)+")
# A second part that is a room of the package (or a documented submodule) makes a code
# path; anything else (``loopwise.run_id``, ``loopwise.shadow.agree``) is an attribute
# name a sink writes, not a path.
ROOMS = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
ROOMS |= {"gates", "calls", "approvals", "hybrid", "mcp", "otel"}


def _texts() -> list[Path]:
    sources = [p for p in PACKAGE.rglob("*.py") if "templates" not in p.parts]
    return [*sources, *sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]


def _named_by(cls: type, name: str) -> bool:
    """An instance attribute ``name`` of ``cls`` (a dataclass field, an annotation, or set
    as ``self.name =`` in a method), which the class object itself does not hold."""
    for klass in inspect.getmro(cls):
        if name in getattr(klass, "__dataclass_fields__", {}):
            return True
        if name in vars(klass).get("__annotations__", {}):
            return True
        try:
            if f"self.{name} =" in inspect.getsource(klass):
                return True
        except (OSError, TypeError):
            continue
    return False


def _resolves(path: str) -> bool:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for i, part in enumerate(parts[cut:]):
            if hasattr(obj, part):
                obj = getattr(obj, part)  # getattr: a path a reader wrote, walked by name
            elif isinstance(obj, type) and i == len(parts[cut:]) - 1:
                return _named_by(obj, part)
            else:
                return False
        return True
    return False


def test_every_loopwise_path_named_in_the_docs_and_the_source_exists() -> None:
    broken = []
    for page in _texts():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for found in PATH.finditer(line):
                path = found.group(0)
                if path.split(".")[1] not in ROOMS or path.endswith((".py", ".md")):
                    continue
                if not _resolves(path):
                    broken.append(f"{page.relative_to(ROOT)}:{number}: {path}")
    assert not broken, "paths to nowhere:\n" + "\n".join(broken)
