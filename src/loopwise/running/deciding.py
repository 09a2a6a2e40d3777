"""Judging a person's edit when it is made: the step it is checked against, and the
context its policies get.

``loopwise approve --args``, the inbox's "Approve edited" and :func:`loopwise.approve`
judge an edit when the person decides, outside the run (:func:`check_edit`): against the
tool of that name in the run's step, by its schema (strictly) and its policies.

**The step.** The one given (``step=``, as ``resume(step=...)`` takes it), else the one the
run's recorded spec loads. A run whose step is defined in the script being run (its
``__main__``, which another process cannot import) records no spec: in that process the
step of the run's name defined in ``__main__`` is taken, so the documented in-process edit
works in a script.

**The context.** A policy with a ``ctx`` parameter still gets a
:class:`~loopwise.core.step.Context`: the run's id, the asking step's path and the run's
**deps** — those given (``deps=``, ``approve --deps``), else what the target module's
``make_deps()`` makes, the factory ``loopwise resume`` uses (a step given has no module to
ask: give ``deps=``). Nothing else of the run is there (no model, no events, no usage): a
policy must judge from the arguments and its deps. One that reads ``ctx.deps`` when there
are none gets a message saying how to give them, and nothing is decided.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

from loopwise.core.events import Status
from loopwise.core.jsontypes import JSONObject
from loopwise.core.result import Halt
from loopwise.core.shape import Shape, ToolShape, describe
from loopwise.core.step import Context, Step
from loopwise.core.svg import shorten
from loopwise.errors import DecisionError, LoopwiseError
from loopwise.running.targets import Target, deps_factory, load_target
from loopwise.store.base import RunStore, StoredApproval, StoredRun
from loopwise.tools.arguments import ToolArgumentsError
from loopwise.tools.edits import judge_edit
from loopwise.tools.verdicts import Denied

__all__ = ["check_edit", "deciding_context", "tools_in"]

_SAID = 2_000
"""The most characters of a schema's refusal an edit's refusal repeats."""


def check_edit(
    store: RunStore,
    found: StoredApproval,
    edited: JSONObject,
    *,
    deps: object = None,
    step: Step | None = None,
) -> JSONObject:
    """Refuse ``edited`` (:class:`DecisionError`) unless the tool's schema (strictly) and
    policies accept it now; the arguments as the schema read them (as JSON data)."""
    run = store.get_run(found.run_id)
    chosen, target, where = _step_of(run, step)
    tool = _tool_in(chosen, where, found)
    ctx = deciding_context(found.run_id, found.step, target, deps)
    judged = asyncio.run(judge_edit(tool.tool, edited, tool.policies, ctx))
    if isinstance(judged, ToolArgumentsError):
        # An edit of thousands of unknown fields names each: the message stays readable.
        said = shorten(str(judged), _SAID)
        raise DecisionError(
            f"the edited arguments were rejected: {said}", name="args", code="invalid-args"
        ) from judged
    if isinstance(judged, Denied) and judged.by == "loopwise":
        raise DecisionError(
            f"the edited arguments could not be judged now: {judged.reason}",
            name="args",
            code="cannot-judge",
        )
    if isinstance(judged, Denied):
        raise DecisionError(
            f"the edited arguments were rejected by the policy: {judged.reason}",
            name="args",
            code="policy-denied",
        )
    return judged.model_dump(mode="json")


def _step_of(run: StoredRun, step: Step | None) -> tuple[Step, Target | None, str]:
    """The run's step, as a target when its module is known, and where it came from."""
    if step is not None:
        _same_name(run, step, "the step given")
        return step, _in_main(step), run.spec or f"the step given ({step.name})"
    if run.spec:
        try:
            target = load_target(run.spec)
        except LoopwiseError as e:
            raise DecisionError(
                f"cannot load {run.spec} to check the edited arguments: {e}",
                name=run.spec,
                code="no-target",
            ) from e
        _same_name(run, target.step, run.spec)
        return target.step, target, run.spec
    found = _main_steps(run.target)
    if len(found) != 1:
        raise DecisionError(
            f"run {run.run_id!r} recorded no target to load (its step is not bound in an "
            "importable module), so edited arguments cannot be checked here: pass the step "
            "(loopwise.approve(run_id, args=..., step=STEP)), or approve or deny it as asked",
            name=run.run_id,
            code="no-target",
        )
    return found[0].step, found[0], found[0].spec


def _same_name(run: StoredRun, step: Step, where: str) -> None:
    if step.name != run.target:
        raise DecisionError(
            f"run {run.run_id!r} is of step {run.target!r}, but {where} is {step.name!r}: "
            "its edit is not checked against another step's tools",
            name=run.run_id,
            code="no-target",
        )


def _main_steps(name: str) -> list[Target]:
    """The steps named ``name`` that the running script (``__main__``) defines."""
    main = sys.modules.get("__main__")
    if main is None:
        return []
    steps = {id(v): v for v in list(vars(main).values()) if isinstance(v, Step)}
    return [
        Target(spec=f"__main__:{name}", step=s, module=main)
        for s in steps.values()
        if s.name == name
    ]


def _in_main(step: Step) -> Target | None:
    """``step`` as a target of ``__main__`` when the script defines it (its ``make_deps()``
    then makes the deps), else ``None``."""
    main = sys.modules.get("__main__")
    if main is None or not any(v is step for v in list(vars(main).values())):
        return None
    return Target(spec=f"__main__:{step.name}", step=step, module=main)


def _tool_in(step: Step, where: str, found: StoredApproval) -> ToolShape:
    """The one tool of ``found``'s name in ``step`` that takes arguments."""
    tools = {id(t.tool): t for t in tools_in(describe(step)) if t.name == found.tool and t.tool}
    if len(tools) != 1:
        raise DecisionError(
            f"{where} has {len(tools) or 'no'} tool(s) named {found.tool!r} that take "
            "arguments; this approval can only be approved or denied as asked",
            name=found.tool,
            code="not-editable",
        )
    return next(iter(tools.values()))


def tools_in(shape: Shape) -> Iterator[ToolShape]:
    """Every tool a step's description holds: its own, its actions', its children's."""
    if shape.repeated:
        return
    yield from shape.tools
    yield from shape.actions
    for _, child in shape.children():
        yield from tools_in(child)
    for action in shape.actions:
        if action.step is not None:
            yield from tools_in(action.step)


def deciding_context(
    run_id: str, step: str, target: Target | None, deps: object = None
) -> Context[object]:
    """The context for judging an edit of ``run_id``'s call at ``step`` (its deps are
    ``deps``, else ``target``'s ``make_deps()``, else none)."""
    if deps is None and target is not None:
        make = deps_factory(target)
        deps = make() if make is not None else None
    spec = target.spec if target is not None else "the step"
    return _Deciding(run_id=run_id, path=tuple(step.split("/")), deps=deps, spec=spec)


class _Deciding(Context[object]):
    """A context at decision time: deps, but no run going on."""

    def __init__(self, *, run_id: str, path: tuple[str, ...], deps: object, spec: str) -> None:
        super().__init__(run_id=run_id, path=path, _deps=deps)
        self.spec = spec

    @property
    def deps(self) -> object:
        """The deps the decision was given; without any, reading them says how to give
        them (the policy then cannot judge the edit, and nothing is decided)."""
        if self._deps is None:
            raise Halt(
                Status.ERROR,
                "the policy reads ctx.deps and this decision has none: define make_deps() "
                f"in the module of {self.spec}, pass --deps module:function to `loopwise "
                "approve`, or deps= to loopwise.approve or loopwise.approvals.decide",
            )
        return self._deps
