"""Writing a graduated workflow's module: :func:`write_workflow` learns the plan, checks it
against the agent as it is now, writes the module atomically and loads it fresh.

The module finds the agent by import, by its module's name (a ``pkg.module`` spec's module,
or a ``file.py``'s stem): ``loopwise run`` puts a target file's folder on the import path,
so a module written beside the agent (the default) imports it; one written elsewhere needs
the agent's folder on ``PYTHONPATH``, as any Python module would. Nothing half-written is
left behind: the source is made whole in memory, written to a temporary file and moved
into place, and a module that then does not load is taken back (the file it replaced,
with ``force``, restored).
"""

from __future__ import annotations

import importlib
import importlib.util
import keyword
import os
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loopwise.core.names import printable
from loopwise.errors import ConfigError, TargetError
from loopwise.evidence.graduate.codegen import AgentRef, Header, workflow_name, workflow_source
from loopwise.evidence.graduate.dataflow import Plan, Split, StepPlan, TurnPlan, learn
from loopwise.evidence.graduate.mining import Mined
from loopwise.running.targets import DEPS_FACTORY, EVAL_DEPS_FACTORY, Target, load_target

__all__ = ["out_path", "write_workflow"]


def out_path(agent: Target, out: str | Path | None, force: bool) -> Path:
    """Where the module goes: ``out``, else ``<agent_module>_workflow.py`` beside the
    agent's file; :class:`ConfigError` when it exists (without ``force``) or is no ``.py``."""
    if out is None:
        module_file = getattr(agent.module, "__file__", None)  # getattr: it may have none
        if module_file is None:
            raise ConfigError(f"graduate {agent.spec}: its module has no file; give --out")
        source = Path(module_file)
        path = source.with_name(f"{_stem(agent, source)}_workflow.py")
    else:
        path = Path(out)
    if path.suffix != ".py":
        raise ConfigError(f"--out {path}: must be a .py file", name="out")
    if path.exists() and not force:
        raise ConfigError(f"--out {path}: exists; pass --force to overwrite it", name="out")
    return path


def write_workflow(agent: Target, mined: Mined, path: Path) -> tuple[str, Target]:
    """Learn, write the module to ``path`` and load it (fresh: never an older module of
    the same file this process loaded); its target spec (``path:name``) and the loaded
    target. Raises :class:`ConfigError` naming the culprit when the runs call a tool or
    an argument the agent no longer has, a learned value cannot be written, or the module
    does not load (then ``path`` is as it was)."""
    plan = learn(mined.traces)
    _check_plan(plan, agent)
    ref = _ref(agent)
    header = Header(
        date=datetime.now(UTC).date().isoformat(),
        runs=mined.mined,
        coverage=sum(p.share for p in mined.paths),
        paths=[(p.share, p.text) for p in mined.paths],
        held_out=len(mined.held_out),
    )
    source = workflow_source(plan, ref, header)
    compile(source, str(path), "exec")  # a bug here, never a broken file on disk
    before = path.read_bytes() if path.exists() else None
    _replace(path, source.encode("utf-8"))
    spec = f"{path}:{workflow_name(ref)}"
    try:
        return spec, _load_fresh(spec, path)
    except TargetError as e:
        _take_back(path, before)
        raise ConfigError(
            f"graduate {agent.spec}: the generated module does not load ({e}); it imports "
            f"the agent as `{ref.module}`: write it beside the agent (the default) or put "
            "the agent's folder on PYTHONPATH",
            name="out",
        ) from e


def _ref(agent: Target) -> AgentRef:
    module_part, _, _ = agent.spec.partition(":")
    step: Any = agent.step
    if module_part.endswith(".py") or "/" in module_part:
        module = _stem(agent, Path(module_part))
    else:
        module = module_part
    tools = step.tool_map
    return AgentRef(
        spec=agent.spec,
        module=module,
        name=_attribute(agent),
        offline=hasattr(agent.module, "offline_model"),
        structured_output=step.output_type is not None and step.output_type is not str,
        deps=tuple(d for d in (DEPS_FACTORY, EVAL_DEPS_FACTORY) if hasattr(agent.module, d)),
        gates={name: t.gate.kind for name, t in tools.items() if t.gate is not None},
    )


def _stem(agent: Target, source: Path) -> str:
    """The agent file's module name; :class:`ConfigError` when it cannot be imported by
    name (``my-agent.py``, ``agent.v2.py``)."""
    stem = source.stem
    if not stem.isidentifier() or keyword.iskeyword(stem):
        raise ConfigError(
            f"graduate {agent.spec}: the generated workflow imports the agent by its "
            f"module's name, and {stem!r} is not one Python can import: rename the file "
            "to a Python name (letters, digits and _, not starting with a digit)",
            name="target",
        )
    return stem


def _attribute(agent: Target) -> str:
    """The agent's name in its module (the spec's ``:NAME``, else the attribute holding it)."""
    _, _, name = agent.spec.partition(":")
    if name:
        return name
    found = [k for k, v in vars(agent.module).items() if v is agent.step and k.isidentifier()]
    if not found:
        raise ConfigError(f"graduate {agent.spec}: name the agent, as {agent.spec}:NAME")
    return sorted(found, key=lambda k: (k.startswith("_"), k))[0]


def _check_plan(plan: Plan, agent: Target) -> None:
    """Every tool and argument the runs used, the agent still has (else it was renamed)."""
    step: Any = agent.step
    tools = step.tool_map
    for plan_step in _steps(plan.first):
        tool = tools.get(plan_step.tool)
        if tool is None:
            have = ", ".join(sorted(tools)) or "(none)"
            raise ConfigError(
                f"graduate {agent.spec}: the mined runs call the tool "
                f"{printable(plan_step.tool)!r}, which the agent no longer has (its tools: "
                f"{have}); renamed or removed since: mine the runs of the agent as it is now "
                "(--since DATE)",
                name=plan_step.tool,
            )
        fields = tool.args_model.model_fields
        for name in _arguments(plan_step):
            if name not in fields:
                raise ConfigError(
                    f"graduate {agent.spec}: the mined runs call {tool.name} with an argument "
                    f"{printable(repr(name))}, which it does not take (its arguments: "
                    f"{', '.join(fields) or '(none)'}); renamed since: mine the runs of the "
                    "agent as it is now (--since DATE)",
                    name=printable(str(name)),
                )


def _steps(node: TurnPlan | Split | None) -> Iterator[StepPlan]:
    if isinstance(node, Split):
        for branch in node.branches.values():
            yield from _steps(branch)
    elif node is not None:
        yield from node.tools
        yield from _steps(node.then)


def _arguments(step: StepPlan) -> set[str]:
    names = {*step.bound, *step.constants, *step.filled, *step.edited}
    if step.fanout is not None:
        names |= set(step.fanout.fields)
    return names


def _replace(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _take_back(path: Path, before: bytes | None) -> None:
    if before is None:
        path.unlink(missing_ok=True)
    else:
        _replace(path, before)
    _forget(path)


def _load_fresh(spec: str, path: Path) -> Target:
    """Load the module just written, not one this process loaded from the file before."""
    _forget(path)
    return load_target(spec)


def _forget(path: Path) -> None:
    """Drop every loaded module of ``path`` and its bytecode (written within the same
    second, a stale ``.pyc`` of the same size would pass for the new source)."""
    resolved = str(path.resolve())
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)  # getattr: a module may have none
        if isinstance(file, str) and os.path.abspath(file) in (resolved, str(path.absolute())):
            del sys.modules[name]
    Path(importlib.util.cache_from_source(str(path))).unlink(missing_ok=True)
    importlib.invalidate_caches()
