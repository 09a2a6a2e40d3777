"""Evals that cannot touch the real world by accident.

An eval runs a target many times on made-up cases; a ``write``/``irreversible`` tool run
against the target's real deps would pay, mail or delete for real. So ``loopwise eval``:

* answers every gate by the eval's own rule (``--gates deny``, the default, or
  ``approve``), never a person: nothing of an eval waits in ``pending`` or the inbox,
  and the report counts the answers;
* runs a target whose effects could happen under that rule (a ``write``/``irreversible``
  tool whose gate is not a plain ``human()`` one, or any of them with ``--gates
  approve``) only against a **sandbox**: ``--deps module:function`` when given, else the
  target module's ``make_eval_deps()``; with neither it refuses in one line naming the
  tools and the fix (its real ``make_deps()`` is never used by accident);
* reports, per target, which effects its runs performed and into which deps.

A sandbox (``make_eval_deps()`` or ``--deps``) may be a context manager (a
``@contextlib.contextmanager`` function that copies a database into a temporary folder,
yields it and removes it): the eval enters one per run and leaves it when the run ends,
so nothing of the sandbox is left behind, and the report says the effects went into a
throwaway sandbox. What the real ``make_deps()`` returns (a target with no effects to
fear) is used as ``loopwise run`` uses it, never entered nor left.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

from loopwise.core.events import Event, EventType, SinkDefaults, Status
from loopwise.core.result import Halt, RunResult
from loopwise.core.shape import Shape, ToolShape, describe
from loopwise.core.step import Step
from loopwise.errors import ConfigError
from loopwise.running.targets import EVAL_DEPS_FACTORY, Target, defined, deps_factory
from loopwise.tools.gates import Gate
from loopwise.tools.tool import Tool
from loopwise.tools.verdicts import ApprovalRequest, Approved, Denied, Verdict

__all__ = ["GATE_RULES", "EffectGuard", "EvalGates", "effects_of", "eval_deps", "risky_tools"]

"""The name of a target module's sandbox deps factory, which ``loopwise eval`` uses."""

GATE_RULES = ("deny", "approve")
"""How an eval answers its gates."""

_EFFECTS = frozenset({"write", "irreversible"})


def risky_tools(step: Step, rule: str) -> list[str]:
    """The ``write``/``irreversible`` tools of ``step`` that could take effect in an eval
    whose gates answer ``rule`` (sorted names)."""
    found = set()
    for t in _tools_in(describe(step)):
        if t.effect not in _EFFECTS:
            continue
        gate = t.tool.gate if isinstance(t.tool, Tool) else None
        only_a_person = isinstance(gate, Gate) and gate.kind == "human"
        if rule == "approve" or not only_a_person:
            found.add(t.name)
    return sorted(found)


def _tools_in(shape: Shape) -> list[ToolShape]:
    out = [*shape.tools, *shape.actions]
    for _, child in shape.children():
        out.extend(_tools_in(child))
    for action in shape.actions:
        if action.step is not None:
            out.extend(_tools_in(action.step))
    return out


def eval_deps(
    target: Target, spec: str | None, rule: str
) -> tuple[Callable[[], object] | None, str | None]:
    """Where an eval's runs of ``target`` get their deps, and how the report names it.

    ``--deps`` (``spec``) wins; a module that defines ``make_eval_deps()`` gets it (a
    step may reach tools the review cannot see: a graduated workflow's nodes call the
    executor from code); else a target whose effects could happen is refused
    (:class:`ConfigError`), and any other keeps ``make_deps()`` — its runs guarded by
    :class:`EffectGuard`."""
    if spec is not None:
        return deps_factory(target, spec), f"--deps {spec}"
    risky = risky_tools(target.step, rule)
    sandbox = defined(target.module, EVAL_DEPS_FACTORY)
    if not risky and not callable(sandbox):
        return _as_given(deps_factory(target)), None
    if callable(sandbox):
        # What it returns as it is: a context manager is a throwaway sandbox, entered for
        # one run and left (removed) when the run ends.
        factory: Callable[[], object] = sandbox
        return factory, f"{target.spec}: {EVAL_DEPS_FACTORY}() (the target's sandbox)"
    raise ConfigError(
        f"eval: {target.spec} has tools that take effect ({', '.join(risky)}) and no sandbox: "
        f"define {EVAL_DEPS_FACTORY}() in its module, or pass --deps module:function (the "
        "real make_deps only on purpose)",
        name=target.spec,
    )


class EffectGuard(SinkDefaults):
    """A run's guard where no effect may happen (an eval on the real deps, a shadow outside
    a sandbox): no ``write``/``irreversible`` tool starts, however it was reached — the
    static review (:func:`risky_tools`) sees the tools a step declares, not one called
    from code it cannot see into (a function node calling the executor, as a graduated
    workflow's nodes do). The run ends ``denied`` with ``message`` (its ``{tools}`` the
    tools that tried)."""

    __slots__ = ("message", "tools")

    def __init__(self, message: str) -> None:
        self.message = message
        self.tools: list[str] = []

    def record(self, run_id: str, event: Event) -> None:
        """Note the tools that asked to take effect (their ``tool_call`` comes first)."""
        if event.type is EventType.TOOL_CALL and event.data.get("effect") in _EFFECTS:
            self.tools.append(str(event.data.get("tool")))

    async def before_effect(self) -> None:
        """Stop the effect: the run ends ``denied``, saying which tool and why."""
        tools = ", ".join(dict.fromkeys(self.tools)) or "a tool"
        raise Halt(Status.DENIED, self.message.format(tools=tools))


def _as_given(make: Callable[[], object] | None) -> Callable[[], object] | None:
    """``make`` as ``loopwise run`` uses it: what it returns is the deps, never entered nor
    left by the eval, even when it is a context manager (a connection, a shared client)."""
    if make is None:
        return None
    factory = make
    return lambda: nullcontext(factory())


@dataclass
class EvalGates:
    """The approval handler of an eval's runs: every ask answered by ``rule``, counted."""

    rule: str = "deny"
    """``deny`` or ``approve``."""
    by: str = "eval"
    """The name decisions are recorded under."""
    answered: dict[str, int] = field(default_factory=dict)
    """How many asks were answered each way."""

    def __call__(self, request: ApprovalRequest) -> Verdict:
        decision = "approved" if self.rule == "approve" else "denied"
        self.answered[decision] = self.answered.get(decision, 0) + 1
        if self.rule == "approve":
            return Approved(by=self.by, reason="loopwise eval --gates approve")
        return Denied(
            "an eval asks no person: its gates answer deny (loopwise eval --gates approve "
            "measures the approved path, in a sandbox)",
            by=self.by,
        )


def effects_of(result: RunResult) -> dict[str, int]:
    """How many ``write``/``irreversible`` calls of ``result`` took effect, per tool."""
    effectful = {
        str(e.data.get("call_id"))
        for e in result.events
        if e.type is EventType.TOOL_CALL and e.data.get("effect") in _EFFECTS
    }
    done: dict[str, int] = {}
    for e in result.events:
        if e.type is not EventType.TOOL_RESULT or e.data.get("status") != "done":
            continue
        # (an effect answered from an earlier one carries its reason: not taken again)
        if str(e.data.get("call_id")) in effectful and e.data.get("reason") is None:
            tool = str(e.data.get("tool"))
            done[tool] = done.get(tool, 0) + 1
    return done
