"""``loopwise.Shadow``: run a second step beside the one that answers, on live traffic,
without effects, and keep the pair as evidence.

A certificate (a cascade's threshold, a graduation) holds on traffic like its dataset;
traffic changes. ``Shadow(name, primary, shadow, share=0.1)`` is a step like any other: it
runs ``primary`` and returns its output unchanged, and for a sampled ``share`` of runs it
also runs ``shadow`` on the same input and keeps the pair — the input, both outputs and
whether they agree — as a live case of the run's target in the run store
(:class:`~loopwise.store.base.LiveCase`), which ``loopwise check`` reads
(:mod:`loopwise.evidence.live.verdict`). It composes: the graduated workflow with the
agent in shadow, a cascade with its pure agent in shadow, a new prompt in shadow of the old.

**Without effects.** The shadow runs in a context of its own, as ``loopwise eval`` runs a
target (:mod:`loopwise.evidence.evals.sandbox`): its gates are answered by the eval's rule
(``gates="deny"``, or ``"approve"`` to measure the approved path), never a person, so
nothing of it reaches ``pending`` or the inbox; a ``write``/``irreversible`` tool that could
take effect under that rule runs only against a sandbox — ``sandbox=`` (a deps factory), else
``make_eval_deps()`` of the module that declares the ``Shadow`` (a context manager is entered
per shadow run and left after it) — and with neither the shadow is refused, as the eval
refuses, and recorded so. A shadow with no such tools reads the run's own deps, and there
no ``write``/``irreversible`` tool may start, however it is reached (a guard on the
executor's ``before_effect``: a function node calling the executor is one the static review
cannot see); it gets a deep copy of the input, never the primary's own object. Its events
stay out of the run's log but for one ``step_started``/``step_finished`` pair at
``<name>/<shadow name>`` (a span of its own in tracing, with ``loopwise.shadow.agree``),
whose data says how it ended, what it used and which (sandboxed) effects it performed.

**Apart.** Its model calls count against ``shadow_budget`` (default: the shadow step's own
budget), never the run's, and are reported apart (``usage["shadow"]``); a shadow that
raises, loops, times out or runs over its budget is recorded with its status and the
primary's result stands. It runs the run's model unless ``model=`` gives it another.

**Its primary is its body.** The primary runs as the Shadow's own body, not as a step nested
in it: its events, journal keys and approvals sit at the Shadow's path, a resumed run
restores the Shadow's output when the primary's would be restored, and a Shadow at
``share=0`` costs nothing measurable over its primary (``benchmarks/run.py``).

**Once.** Whether a run is shadowed is decided from the run id and the step's journal key,
so a resumed run decides as before; the shadow runs after the primary returned (a primary
that pauses at a gate has not reached it, and a resumed one finds its record under that
key), so a run is shadowed at most once across resumes; a process killed during the shadow
took no effect (a sandbox, or no effect tool at all), and the primary's effects are the
journal's, once. The price: a sampled run's wall time grows by the shadow's (bounded by
``shadow_budget.max_seconds``); an unsampled run pays one hash, ``share=0`` nothing.

It lives in ``evidence/`` because it needs the eval's sandbox rules
(:mod:`loopwise.evidence.evals.sandbox`) and scorer; ``architectures/`` (a lower layer)
may not import them, and the sandbox rules belong with the eval that defined them.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from types import ModuleType
from typing import Literal

from loopwise.core.events import LIVE, EventType, Status, jsonable
from loopwise.core.execute import execute, new_context
from loopwise.core.jsontypes import JSONValue, json_object
from loopwise.core.members import StepDefaults, step_member
from loopwise.core.names import check_name
from loopwise.core.options import ModelLike, RunOptions
from loopwise.core.replay import RERUN, replays
from loopwise.core.result import RunResult
from loopwise.core.shape import Edge, Graph, Kind, Limits, Node, Shape, describe, kind_of, name_of
from loopwise.core.step import Context, Step, check_step, needs_model
from loopwise.core.usage import Budget, Usage
from loopwise.errors import ConfigError
from loopwise.evidence.evals.dataset import field_match
from loopwise.evidence.evals.sandbox import (
    GATE_RULES,
    EffectGuard,
    EvalGates,
    effects_of,
    eval_deps,
    risky_tools,
)
from loopwise.running.conventions import entered
from loopwise.running.targets import Target

__all__ = ["Agreement", "Shadow"]

_EFFECTS = ("write", "irreversible")

Agreement = Callable[[JSONValue, JSONValue], "bool | float"]
"""``agree(primary_output, shadow_output)``, on their JSON forms: ``True``/``False``, or a
score in [0, 1] (at least 0.5 agrees)."""


class Shadow(StepDefaults):
    """A step that answers with ``primary`` and, for a ``share`` of runs, runs ``shadow``
    beside it without effects and keeps the pair (see the module docs).

    ``agree`` judges a pair (default: the eval's scorer, ``field_match``, with the
    shadow's output as the reference: every field the shadow answered must be equal in the
    primary's). ``gates`` answers the shadow's gates (``deny``/``approve``). Mistakes raise
    :class:`~loopwise.errors.ConfigError` naming the argument: a share outside [0, 1], a
    budget that is not a :class:`~loopwise.core.usage.Budget`, a shadow named as its
    primary (their records would share a path).
    """

    def __init__(
        self,
        name: str,
        primary: Step,
        shadow: Step,
        *,
        share: float = 0.1,
        shadow_budget: Budget | None = None,
        agree: Agreement | None = None,
        gates: str = "deny",
        sandbox: Callable[[], object] | None = None,
        model: ModelLike = None,
    ) -> None:
        self.name = check_name(name, what="shadow step")
        self.primary = check_step(primary)
        self.shadow = check_step(shadow)
        if self.shadow.name == self.primary.name:
            raise ConfigError(
                f"shadow {name!r}: the shadow step is named {shadow.name!r} like its primary; "
                "give it a name of its own (its record sits beside the primary's)",
                name="shadow",
            )
        self.share = _checked_share(share, name)
        if shadow_budget is not None and not isinstance(shadow_budget, Budget):
            raise ConfigError(
                f"shadow {name!r}: shadow_budget must be a loopwise.Budget, not "
                f"{type(shadow_budget).__name__}",
                name="shadow_budget",
            )
        self.shadow_budget = shadow_budget
        if gates not in GATE_RULES:
            raise ConfigError(
                f"shadow {name!r}: gates must be one of {', '.join(GATE_RULES)}, not {gates!r}",
                name="gates",
            )
        for what, fn in (("agree", agree), ("sandbox", sandbox)):
            if fn is not None and not callable(fn):
                raise ConfigError(f"shadow {name!r}: {what} must be a function", name=what)
        self.gates = gates
        self.agree = agree
        self.sandbox = sandbox
        self.model = model
        self.input_type = step_member(primary, "input_type")
        self.output_type = step_member(primary, "output_type")
        self.budget = step_member(primary, "budget")
        self._home = _declaring_module()

    @property
    def needs_model(self) -> bool:
        return needs_model(self.primary) or (self.model is None and needs_model(self.shadow))

    def describe(self) -> Shape:
        """Two nodes: the primary, which answers, and the shadow beside it (``loopwise
        graph`` draws them; ``check`` reviews both)."""
        nodes = tuple(_node(step) for step in (self.primary, self.shadow))
        share = f"shadow, {self.share:.0%} of runs, no effects"
        edge = Edge(source=self.primary.name, target=self.shadow.name, label=share)
        return Shape(
            kind=Kind.WORKFLOW,
            name=self.name,
            limits=Limits(budget=self.budget),
            graph=Graph(nodes=nodes, edges=(edge,)),
        )

    async def run(self, input: object, ctx: Context) -> object:
        # The primary is this step's body, not a step nested in it: its events, journal keys
        # and approvals sit at the Shadow's path, and a Shadow at share 0 costs nothing over it.
        output = await self.primary.run(input, ctx)
        if self.share == 0.0:
            return output
        key = ctx.next_key(LIVE)
        if not _sampled(ctx.run_id, key, self.share):
            return output
        done = ctx.journal.recall(key)
        if done is not None:  # shadowed before this resume: counted again, not run again
            _count(ctx, Usage.from_dict(json_object(json_object(done.get("shadow")).get("usage"))))
            return output
        await self._shadowed(input, output, ctx, key)
        return output

    def restorable(self, output: object, recorded: JSONValue) -> bool:
        """Whether a resumed run may take this step's output from its record: when the
        primary's may (the shadow, if sampled, was recorded before the step finished)."""
        primary = replays(self.primary)
        return primary is not None and primary.restorable(output, recorded)

    def restore(self, input: object, recorded: JSONValue) -> object:
        """The primary's output restored from its record (:data:`RERUN` when it cannot be)."""
        primary = replays(self.primary)
        return RERUN if primary is None else primary.restore(input, recorded)

    async def _shadowed(self, input: object, output: object, ctx: Context, key: str) -> None:
        """Run the shadow on ``input`` and record its pair with the primary's ``output``."""
        at = ctx.child(self.shadow.name)
        at.emit(
            EventType.STEP_STARTED,
            {"input": jsonable(input), "kind": str(kind_of(self.shadow)), "shadow": True},
        )
        result, sandbox = await self._run_shadow(input, ctx)
        agree, why = self._judged(output, result)
        _count(ctx, result.usage)
        status = str(result.status)
        detail = result.detail if why is None else why
        # What a shadow that did not complete gathered is its record's, never a reference.
        completed = result.status is Status.COMPLETED
        reference = jsonable(result.output) if completed else None
        at.emit(
            EventType.STEP_FINISHED,
            {
                "key": key,
                "output": jsonable(result.output),
                # Of the run's own usage nothing: what the shadow used is apart.
                "usage": Usage(shadow=result.usage).to_dict(),
                "shadow": {
                    "status": status,
                    "detail": detail,
                    "agree": agree,
                    "usage": result.usage.to_dict(),
                    "steps": result.steps,
                    "effects": {**effects_of(result)},
                    "sandbox": sandbox,
                },
                LIVE: {
                    "kind": "shadow",
                    "input": jsonable(input),
                    "output": jsonable(output),
                    "reference": reference,
                    "agree": agree,
                    "status": status,
                    "detail": detail,
                },
            },
        )

    async def _run_shadow(self, input: object, ctx: Context) -> tuple[RunResult, str | None]:
        """The shadow's own run (its context, gates, budget and deps) and where its effects
        went; a refusal or a failure is a result, never the primary's exception."""
        sandbox: str | None = None
        limit = None if self.shadow_budget is None else self.shadow_budget.max_seconds
        sub: Context | None = None
        try:
            # Its own copy: a shadow that changes its input in place must not change what
            # the primary returned (an output that holds the input) nor the pair's record.
            own = copy.deepcopy(input)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
            detail = f"its input cannot be copied ({why}); a shadow never shares the primary's"
            return _failed(None, Status.ERROR, detail), None
        try:
            async with AsyncExitStack() as scope:
                deps, sandbox = await self._deps(ctx, scope)
                options = RunOptions(
                    model=self.model if self.model is not None else ctx.model,
                    budget=self.shadow_budget,
                    approvals=EvalGates(self.gates, by=f"shadow {self.name}"),
                    pricing=ctx.pricing,
                    clock=ctx.clock,
                    run_id=_shadow_run_id(ctx),
                    deps=deps,
                    # Outside a sandbox no effect may start, whatever the static review saw.
                    sinks=() if sandbox is not None else (_no_effects(self.name),),
                )
                sub = new_context(self.shadow, options)
                async with asyncio.timeout(limit):
                    return await execute(self.shadow, own, sub), sandbox
        except TimeoutError:
            detail = f"the shadow ran past max_seconds {limit} and was cut off"
            return _failed(sub, Status.BUDGET_EXCEEDED, detail), sandbox
        except Exception as e:  # the shadow's failure (a refusal, a bug) is its record's
            return _failed(sub, Status.ERROR, f"{type(e).__name__}: {e}"), sandbox

    async def _deps(self, ctx: Context, scope: AsyncExitStack) -> tuple[object, str | None]:
        """The shadow's deps and how its record names them: the run's own when none of its
        tools could take effect, else a sandbox (refused, as an eval refuses, without one)."""
        if not risky_tools(self.shadow, self.gates):
            return (ctx.deps if ctx.has_deps else None), None
        if self.sandbox is not None:
            return await entered(scope, self.sandbox()), f"sandbox= {name_of(self.sandbox)}"
        factory, where = self._module_sandbox()
        return await entered(scope, factory()), where

    def refusal(self) -> str | None:
        """Why every shadow run would be refused (tools that take effect and no sandbox),
        or ``None``: what ``loopwise check`` warns about before any traffic."""
        if self.sandbox is not None or not risky_tools(self.shadow, self.gates):
            return None
        try:
            self._module_sandbox()
        except ConfigError as e:
            return str(e)
        return None

    def _module_sandbox(self) -> tuple[Callable[[], object], str | None]:
        """``make_eval_deps`` of the declaring module, found as ``loopwise eval`` finds a
        target's (:func:`~loopwise.evidence.evals.sandbox.eval_deps`); else
        :class:`ConfigError` naming the tools and the fix."""
        risky = risky_tools(self.shadow, self.gates)
        try:
            if self._home is None:
                raise ConfigError("no module declares it", name=self.name)
            spec = f"{self._home.__name__}:{self.name}"
            home = Target(spec=spec, step=self.shadow, module=self._home)
            factory, where = eval_deps(home, None, self.gates)
        except ConfigError as e:
            raise ConfigError(
                f"shadow {self.name!r}: {self.shadow.name!r} has tools that take effect "
                f"({', '.join(risky)}) and no sandbox: pass sandbox=, or define "
                f"make_eval_deps() in the module that declares the Shadow ({e})",
                name=self.name,
            ) from e
        if factory is None:  # pragma: no cover - eval_deps gives a risky target a factory
            raise ConfigError(f"shadow {self.name!r}: no sandbox", name=self.name)
        return factory, where

    def _judged(self, output: object, result: RunResult) -> tuple[bool | None, str | None]:
        """Whether the primary's ``output`` agrees with the shadow's (``None``: the shadow
        did not complete, or ``agree`` failed, which the second value says)."""
        if result.status is not Status.COMPLETED:
            return None, None
        judge = self.agree or field_match
        named = name_of(judge) or repr(judge)
        try:
            value = judge(jsonable(output), jsonable(result.output))
        except Exception as e:  # the user's agree: its failure is the record's, not the run's
            return None, f"agree {named} raised {type(e).__name__}: {e}"
        if isinstance(value, bool):
            return value, None
        if isinstance(value, int | float) and 0.0 <= value <= 1.0:  # NaN is not
            return value >= 0.5, None
        # Neither a verdict nor a score: the record says so; the run is the primary's.
        shown = repr(value)[:80]
        return None, f"agree {named} returned {shown}, not true/false or a score in [0, 1]"


def _shadow_run_id(ctx: Context) -> str:
    """The shadow run's id: the run's, and where in it this Shadow runs (a hash of its
    path, counted when it runs again there), so two Shadows of one run — whose sandbox
    may keep idempotency keys — never share keys."""
    where = hashlib.sha256(ctx.step_path.encode()).hexdigest()[:8]
    n = ctx.journal.counted(ctx.step_path, "shadow")
    return f"{ctx.run_id}-shadow-{where}" + ("" if n == 1 else f"-{n}")


def _no_effects(name: str) -> EffectGuard:
    """The guard of a shadow run outside a sandbox (on the run's own deps, or none)."""
    return EffectGuard(
        f"shadow {name!r}: {{tools}} would take effect outside a sandbox (the shadow runs on "
        "the run's own deps); pass sandbox=, or define make_eval_deps() in the module that "
        "declares the Shadow"
    )


def _node(step: Step) -> Node:
    inner = describe(step)
    nested = inner.kind in (Kind.WORKFLOW, Kind.HYBRID)
    form: Literal["box", "nested"] = "nested" if nested else "box"
    return Node(id=step.name, label=step.name, kind=inner.kind.value, form=form, shape=inner)


def _checked_share(share: object, name: str) -> float:
    if isinstance(share, int | float) and not isinstance(share, bool) and 0.0 <= share <= 1.0:
        return float(share)  # NaN is not between them
    raise ConfigError(
        f"shadow {name!r}: share must be a number between 0 and 1 (the part of runs "
        f"shadowed), not {share!r}",
        name="share",
    )


def _sampled(run_id: str, key: str, share: float) -> bool:
    """Whether this run shadows here: a hash of the run id and the journal key below
    ``share``, so the same run decides the same way in every process."""
    if share >= 1.0:
        return True
    digest = hashlib.blake2b(f"{run_id}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest) / 2**64 < share


def _count(ctx: Context, used: Usage) -> None:
    """Count a shadow's usage apart in the run's and every enclosing step's usage."""
    for usage in (ctx.usage, *ctx.scopes):
        usage.add_shadow(used)


def _failed(sub: Context | None, status: Status, detail: str) -> RunResult:
    """The record of a shadow that did not end as a run does (refused before it started,
    cut off, raised): what it used until then (``sub``, its context, when it had one)."""
    if sub is None:
        return RunResult(run_id="", status=status, detail=detail)
    sub.elapsed()
    return RunResult(
        run_id=sub.run_id,
        status=status,
        usage=sub.usage,
        steps=sub.steps[0],
        events=sub.events,
        detail=detail,
    )


def _declaring_module() -> ModuleType | None:
    """The module whose code declares the Shadow (where ``make_eval_deps`` is looked up)."""
    frame = sys._getframe(2)
    name = frame.f_globals.get("__name__")
    return sys.modules.get(name) if isinstance(name, str) else None
