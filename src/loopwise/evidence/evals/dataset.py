"""An eval's dataset: its :class:`Case` lines, and how an output is scored against one.

* :func:`load_dataset` reads JSONL cases ``{"input": ..., "expected": ..., "id"?: ...}``.
* :func:`field_match` is the default scorer: every field named in ``expected`` must be
  equal in the output (recursively for nested objects); :func:`field_diff` says where they
  differ. A custom scorer (:data:`Scorer`) is any ``(output, expected) -> bool | float``
  function, loaded by :func:`load_scorer` from ``module:function``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopwise.core.events import jsonable
from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.errors import ConfigError
from loopwise.running.targets import defined, import_module_of

__all__ = ["Case", "Scorer", "field_diff", "field_match", "load_dataset", "load_scorer"]

Scorer = Callable[[Any, Any], "bool | float"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    """One dataset line."""

    id: str
    """The case's ``id`` field, or its line number."""
    input: object
    """What the target runs on."""
    expected: object = None
    """What a correct output contains (``None``: not scored)."""


def load_dataset(path: str | Path) -> list[Case]:
    """Read a JSONL dataset; raises :class:`ConfigError` naming the bad line."""
    source = Path(path)
    if not source.is_file():
        raise ConfigError(f"dataset {source}: no such file", name=str(source))
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"dataset {source}: cannot read it as UTF-8 text ({e})") from e
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"dataset {source} line {number}: not JSON ({e.msg})") from e
        if not isinstance(row, dict) or "input" not in row:
            raise ConfigError(f"dataset {source} line {number}: needs an object with 'input'")
        cases.append(
            Case(id=str(row.get("id", number)), input=row["input"], expected=row.get("expected"))
        )
    if not cases:
        raise ConfigError(f"dataset {source} has no cases", name=str(source))
    return cases


def field_match(output: object, expected: object) -> bool:
    """True when every field named in ``expected`` has the same value in ``output``.

    Objects match field by field (extra output fields are ignored, nested objects are
    matched the same way); anything else must be equal. Pydantic models and enums are
    compared through their JSON form.
    """
    output, expected = jsonable(output), jsonable(expected)
    if isinstance(expected, dict):
        return isinstance(output, dict) and all(
            key in output and field_match(output[key], value) for key, value in expected.items()
        )
    return bool(output == expected)


def field_diff(output: object, expected: object) -> list[JSONObject]:
    """Where ``output`` differs from ``expected``, field by field, as :func:`field_match`
    judges it: ``[{"field", "expected", "actual"}]`` (``field`` is a dotted path, ``""``
    for the whole value; a missing field has ``"actual": None`` and ``"missing": True``).
    Empty when they match.
    """
    return _diff_at("", jsonable(output), jsonable(expected))


def _diff_at(at: str, output: JSONValue, expected: JSONValue) -> list[JSONObject]:
    if not isinstance(expected, dict) or not isinstance(output, dict):
        return [] if output == expected else [{"field": at, "expected": expected, "actual": output}]
    found: list[JSONObject] = []
    for key, value in expected.items():
        where = f"{at}.{key}" if at else str(key)
        if key not in output:
            found.append({"field": where, "expected": value, "actual": None, "missing": True})
        else:
            found.extend(_diff_at(where, output[key], value))
    return found


def load_scorer(spec: str) -> Scorer:
    """A scorer from ``module:function`` or ``path/to/file.py:function``."""
    module_part, _, name = spec.partition(":")
    if not module_part or not name:
        raise ConfigError(f"--scorer {spec!r}: use module:function or file.py:function")
    module = import_module_of(module_part, spec, what="--scorer")
    scorer = defined(module, name)
    if not callable(scorer):
        raise ConfigError(f"--scorer {spec!r}: {name!r} is not a function")
    return scorer
