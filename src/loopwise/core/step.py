"""The core contract: :class:`Step`, :class:`Context`, :class:`RunResult`, :class:`Status`.

A step is anything with a ``name`` and ``async run(input, ctx)``: a plain function
(``@step``), a structured-output call, an agent, a workflow, a hybrid. One
:class:`Context` per run carries the model, the budget and its running usage, the
event sinks and the approval handler; nested steps share it, so limits are per run.

Guardrails end runs with a :class:`Status`. Inside a step they do so by raising
:class:`Halt`, because a nested step cannot return a status through its typed output;
:func:`loopwise.core.execute.execute` turns a ``Halt`` into a :class:`RunResult`, never into
an exception; it and the making of a run's context are :mod:`loopwise.core.execute`'s, and
awaiting calls at once is :mod:`loopwise.core.concurrency`'s. Starting a run (options, the
store, the sync wrapper) is :mod:`loopwise.running.runner`'s.
The event vocabulary (:class:`Status`, :class:`Event`, ...) is :mod:`loopwise.core.events`'s,
:class:`RunOptions` is :mod:`loopwise.core.options`'s, :class:`Halt` and :class:`RunResult` are
:mod:`loopwise.core.result`'s and the sync wrapper :func:`blocking` is
:mod:`loopwise.core.loops`'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    NoReturn,
    Protocol,
    cast,
    runtime_checkable,
)

import typing_extensions

from loopwise.core.events import (
    Event,
    EventSink,
    EventType,
    Status,
    TextDelta,
    jsonable,
    now_iso,
    sink_member,
)
from loopwise.core.journal import Journal, damaged
from loopwise.core.jsontypes import JSONObject
from loopwise.core.members import step_member
from loopwise.core.names import check_name
from loopwise.core.offload import Offload
from loopwise.core.options import ApprovalHandler
from loopwise.core.replay import entered, journaled_turn, recall, record
from loopwise.core.result import Halt
from loopwise.core.shape import kind_of, name_of
from loopwise.core.usage import Budget, Pricing, Usage
from loopwise.errors import ConfigError

if TYPE_CHECKING:
    from loopwise.models.port import Model, ModelRequest, Turn

__all__ = [
    "Context",
    "Step",
    "check_step",
    "needs_model",
]

DepsT = typing_extensions.TypeVar("DepsT", default=Any)
"""The type of a run's dependencies: ``Context[MyDeps]`` types ``ctx.deps``."""

NO_DEPS = (
    "this run has no deps, and a step, tool or policy of it reads ctx.deps: pass deps= to "
    "loopwise.run/arun/astream/resume/evaluate, --deps module:function to the command, or "
    "define make_deps() in the target's module; a run that ended so resumes once given them"
)


class _NoDeps:
    """``request.deps`` in a run without deps: reading from it ends the run ``error`` with
    :data:`NO_DEPS`, as ``ctx.deps`` does (an offline model that needs deps)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise Halt(Status.ERROR, NO_DEPS)

    def __getitem__(self, key: object) -> NoReturn:
        raise Halt(Status.ERROR, NO_DEPS)

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<no deps>"


_NO_DEPS = _NoDeps()


@runtime_checkable
class Step(Protocol):
    """Anything runnable in a run: a ``name`` and ``async run(input, ctx)``."""

    name: str

    async def run(self, input: Any, ctx: Context) -> Any:
        """Turn ``input`` into the step's output, using ``ctx`` for models and events."""
        ...


@dataclass(kw_only=True)
class Context(Generic[DepsT]):
    """What one run carries through every step; nested steps get a :meth:`child`.

    ``Context[MyDeps]`` (in a tool's, step's or policy's ``ctx`` annotation) types
    :attr:`deps`.
    """

    run_id: str
    """The run's id."""
    model: Model | None = None
    """The run's model (``None`` for model-free runs)."""
    budget: Budget = field(default_factory=Budget)
    """Limits for the whole run."""
    usage: Usage = field(default_factory=Usage)
    """Running usage of the whole run (shared by children)."""
    pricing: Pricing = field(default_factory=Pricing)
    """Prices used to turn tokens into USD."""
    max_steps: int | None = None
    """A run-level override of agents' own ``max_steps`` (``--max-steps``)."""
    approvals: ApprovalHandler = None
    """The approval handler gates ask (see :mod:`loopwise.tools.handlers`)."""
    sinks: tuple[EventSink, ...] = ()
    """Where events go besides :attr:`events`."""
    events: list[Event] = field(default_factory=list)
    """Every event of the run so far (shared by children)."""
    journal: Journal = field(default_factory=Journal)
    """The run's journal: keys, what was recorded (for replay), taint, effects taken."""
    path: tuple[str, ...] = ()
    """The step path this context belongs to."""
    idempotency_key: str | None = None
    """Set while an effectful tool runs: run id + call id."""
    performing: object = None
    """The tool the tool-call executor runs in this context (set by the executor alone):
    a ``write``/``irreversible`` tool performs only in the context made for its call."""
    offload: Offload | None = None
    """The engine's hook for the run's outside-world work (:mod:`loopwise.core.offload`):
    ``None`` does it in place; a durable-execution engine sets it (inherited)."""
    refuse_effects: str | None = None
    """Why ``write``/``irreversible`` calls are refused here (a hybrid's planner; inherited)."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds; injected so tests can control time."""
    stream: bool = False
    """Ask the model to stream its answers (text deltas to sinks with a ``text`` method)."""
    started_at: float = 0.0
    """``clock()`` when the run started."""
    steps: list[int] = field(default_factory=lambda: [0])
    """A one-cell counter of steps taken, shared by children."""
    scopes: tuple[Usage, ...] = ()
    """The own usage of each enclosing step (so parallel siblings are not mixed up)."""
    history: object = None
    """The earlier runs of the run's conversation (a
    :class:`~loopwise.architectures.history.History`,
    sent by the run's target agent before its input), or ``None``."""
    resources: dict[object, Any] = field(default_factory=dict)
    """What the run opened on first use, by owner (an MCP server's connection); each has
    ``async aclose()`` and is closed when the run ends or pauses (shared by children)."""
    safety_identifier: str | None = None
    """The run's end user as the caller named them (sent with every model call)."""
    _deps: DepsT | None = None
    _seq: list[int] = field(default_factory=lambda: [0])
    _taken: tuple[list[int], ...] = ()
    """The steps taken inside each enclosing step (what a replay of it counts again)."""
    _pacers: tuple[Callable[[], Awaitable[None]], ...] = ()
    """The sinks' ``pace`` methods: awaited before each step and model call (back-pressure)."""
    _watchers: tuple[Callable[[], Awaitable[None]], ...] = ()
    """The sinks' ``before_effect`` methods: awaited before each effect (a stream's consumer)."""

    @property
    def deps(self) -> DepsT:
        """The run's dependencies (``deps=`` of :func:`loopwise.run`): clients, accounts, a
        ledger. Shared by every step, tool, policy (a ``ctx`` parameter) and offline model
        (``request.deps``) of the run; never stored. Reading them in a run started without
        any ends the run ``error`` with a detail that says how to give them
        (:data:`NO_DEPS`), not with an ``AttributeError`` somewhere in a tool.
        """
        if self._deps is None:
            raise Halt(Status.ERROR, NO_DEPS)
        return self._deps

    @property
    def has_deps(self) -> bool:
        """Whether the run was given deps (for code that works with and without)."""
        return self._deps is not None

    @property
    def step_path(self) -> str:
        """The current path as ``a/b/c``."""
        return "/".join(self.path)

    async def before_effect(self) -> None:
        """Before the executor starts a ``write``/``irreversible`` tool: wait for the sinks
        that watch the run (``loopwise.astream``'s consumer deals with every event before
        the effect, or leaves), then end a cancelled run. Once its watcher has left, a run
        starts no new effect, even within a step."""
        _stop_if_cancelled()
        for watch in self._watchers:
            await watch()
        _stop_if_cancelled()

    def child(self, name: str) -> Context:
        """A context for a nested step: same run, budget, usage and events; longer path."""
        return self._derived(path=(*self.path, name), idempotency_key=None, performing=None)

    def _derived(self, **changes: object) -> Context:
        # A shallow copy: contexts are derived on every step and tool call, and neither
        # dataclasses.replace (it re-runs __init__ over every field) nor copy.copy (its
        # __reduce_ex__ detour) does less work than this.
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.__dict__.update(changes)
        return clone

    def count_tool_call(self) -> None:
        """Count one tool call in the run's usage and in every enclosing step's."""
        self.usage.tool_calls += 1
        for scope in self.scopes:
            scope.tool_calls += 1

    def count_step(self) -> int:
        """Count one step (an agent turn, a workflow node); return the run's total."""
        self.steps[0] += 1
        for cell in self._taken:
            cell[0] += 1
        return self.steps[0]

    def emit(self, type: EventType, data: JSONObject | None = None) -> Event:
        """Append one event to the run's log and hand it to every sink."""
        self._seq[0] += 1
        event = Event(
            seq=self._seq[0],
            type=type,
            step=self.step_path,
            at=now_iso(),
            data=data or {},
        )
        self.events.append(event)
        if "key" in event.data or type is EventType.TOOL_RESULT:
            self.journal.note(type, event.data)
        for sink in self.sinks:
            sink.record(self.run_id, event)
        return event

    def emit_together(self, entries: Sequence[tuple[str, EventType, JSONObject]]) -> None:
        """Log several events (``(step path, type, data)``) as one: all or none is stored.

        A sink with ``record_many`` (the run store) writes them in one transaction; the
        gate requests of one turn use this, so a crash never leaves only some asked.
        """
        events = []
        for path, type, data in entries:
            self._seq[0] += 1
            events.append(Event(seq=self._seq[0], type=type, step=path, at=now_iso(), data=data))
        self.events.extend(events)
        for event in events:
            self.journal.note(event.type, event.data)
        for sink in self.sinks:
            many = sink_member(sink, "record_many")
            if many is not None:
                many(self.run_id, events)
            else:
                for event in events:
                    sink.record(self.run_id, event)

    def restore(self, events: list[Event]) -> None:
        """Continue a stored log (resume): ``events`` count as emitted, ``seq`` goes on."""
        self.events.extend(events)
        self.journal.observe(events)
        if events:
            self._seq[0] = max(self._seq[0], events[-1].seq)

    def next_key(self, kind: str) -> str:
        """A counted journal key of this step path (see :class:`~loopwise.core.journal.Journal`)."""
        return self.journal.next_key(self.step_path, kind)

    def elapsed(self) -> float:
        """Seconds since the run started (also kept in ``usage.wall_seconds``)."""
        self.usage.wall_seconds = self.clock() - self.started_at
        return self.usage.wall_seconds

    def check_budget(self, *, pending_tokens: int = 0) -> None:
        """Raise :class:`Halt` (``budget_exceeded``) when the run is over its budget."""
        self.elapsed()
        reason = self.budget.exceeded_by(self.usage, pending_tokens=pending_tokens)
        if reason is not None:
            raise Halt(Status.BUDGET_EXCEEDED, reason)

    async def call_model(self, request: ModelRequest) -> Turn:
        """One model call under the run's budget, counted, journaled and logged.

        The budget is checked first (with a ~4 chars/token estimate of the prompt), so
        a call that would cross it is not made; a call still running when ``max_seconds``
        runs out is cut off; it is checked again after, so a run stops as soon as usage
        crosses it. A journaled turn is replayed, not re-sent.
        """
        if self.model is None:
            raise ConfigError("this step calls a model but the run has none", name="model")
        key = self.next_key("model")
        recorded = self.journal.recall(key)
        started_at, took = "", 0.0
        if recorded is not None:
            turn = journaled_turn(recorded, run_id=self.run_id, key=key)
        else:
            _stop_if_cancelled()
            for pace in self._pacers:
                await pace()
            # The estimate (it serializes the tool schemas) only matters to a token limit.
            pending = request.prompt_chars() // 4 if self.budget.max_tokens is not None else 0
            self.check_budget(pending_tokens=pending)
            started_at, began = now_iso(), self.clock()
            # In place: the request is this call's own (a replace() would cost every call).
            request.deps = _NO_DEPS if self._deps is None else self._deps
            request.safety_identifier = self.safety_identifier
            turn = await self._complete(
                self.model, self._streaming(request, key) if self.stream else request
            )
            took = self.clock() - began
        cost = self.pricing.cost(
            turn.model or self.model.name,
            turn.input_tokens,
            turn.output_tokens,
            turn.cached_tokens,
            turn.service_tier,
        )
        spent = {"reasoning_tokens": turn.reasoning_tokens, "cached_tokens": turn.cached_tokens}
        self.usage.add_call(turn.input_tokens, turn.output_tokens, cost, **spent)
        for scope in self.scopes:
            scope.add_call(turn.input_tokens, turn.output_tokens, cost, **spent)
        if recorded is None:
            self.emit(
                EventType.MODEL_CALL,
                {
                    "key": key,
                    "model": turn.model or self.model.name,
                    "request_model": self.model.name,
                    "started_at": started_at,
                    "duration_seconds": took,
                    "input_tokens": turn.input_tokens,
                    "output_tokens": turn.output_tokens,
                    "cost_usd": cost,
                    "finish_reason": turn.finish_reason,
                    "turn": turn.to_dict(),
                },
            )
        self.check_budget()
        return turn

    def _streaming(self, request: ModelRequest, key: str) -> ModelRequest:
        """``request`` asking the model to stream, its text going to the sinks that take it."""
        hooks = [hook for sink in self.sinks if (hook := sink_member(sink, "text")) is not None]
        run_id, step = self.run_id, self.step_path

        def on_text(piece: str) -> None:
            delta = TextDelta(step=step, key=key, text=piece)
            for hook in hooks:
                hook(run_id, delta)

        return replace(request, on_text=on_text)

    async def _complete(self, model: Model, request: ModelRequest) -> Turn:
        """The model call, cut off when the run's wall-time budget runs out during it."""
        limit = self.budget.max_seconds
        if limit is None:
            return await model.complete(request)
        try:
            async with asyncio.timeout(max(limit - self.elapsed(), 0.0)) as window:
                return await model.complete(request)
        except TimeoutError:
            if not window.expired():
                raise  # the model's own timeout, not the budget's
            raise Halt(
                Status.BUDGET_EXCEEDED,
                f"wall {self.elapsed():.2f}s > max_seconds {limit}: a model call was cut off",
            ) from None

    async def run_step(self, step: Step, input: object) -> Any:
        """Run a nested ``step`` with ``step_started``/``step_finished`` events and its usage.

        A step that finished before a resume, on the same input, is taken from its
        ``step_finished`` when its output restores exactly (:mod:`loopwise.core.replay`): it
        is not run again and nothing is logged twice.
        """
        _stop_if_cancelled()
        for pace in self._pacers:
            await pace()
        own, taken = Usage(), [0]
        # The library's steps check their names when declared; a user's own may not.
        check_name(step.name, what="step")
        child = self._derived(
            path=(*self.path, step.name),
            idempotency_key=None,
            scopes=(*self.scopes, own),
            _taken=(*self._taken, taken),
        )
        n, key = entered(self.journal, child.step_path)
        done = recall(step, input, self.journal, child.step_path, n)
        if done is not None:
            self._count_again(done.record)
            return done.output
        started = self.clock()
        if key not in self.journal:
            # A resumed run re-enters its steps to replay them; the log says so only once.
            child.emit(
                EventType.STEP_STARTED,
                {"input": jsonable(input), "key": key, "kind": str(kind_of(step))},
            )
        output = await step.run(input, child)
        own.wall_seconds = self.clock() - started
        data = {"output": jsonable(output), "usage": own.to_dict()}
        if self.sinks:  # a log kept nowhere is never resumed: no replay record to check
            record(
                step, output, data, journal=self.journal, path=child.step_path, n=n, steps=taken[0]
            )
        child.emit(EventType.STEP_FINISHED, data)
        return output

    def _count_again(self, finished: JSONObject) -> None:
        """Count a replayed step's usage and steps in the run and each enclosing step
        (what it took counts against the run's budget and ``max_steps`` once more, so a
        record that cannot say it stops the resume: :func:`~loopwise.core.journal.damaged`)."""
        key = str(finished.get("key"))
        spent, steps = finished.get("usage"), finished.get("steps")
        try:
            usage = Usage.from_dict(spent) if isinstance(spent, dict) else None
        except (TypeError, ValueError):  # a count that is no number
            usage = None
        if usage is None or type(steps) is not int or steps < 0:
            raise damaged(self.run_id, key, f"usage {spent!r:.60} and steps {steps!r:.20}")
        for scope in (self.usage, *self.scopes):
            scope.add(usage)
        for cell in (self.steps, *self._taken):
            cell[0] += steps
        self.journal.advance(finished.get("counters"), run_id=self.run_id, record=key)


def _stop_if_cancelled() -> None:
    """End a cancelled run before it starts a step or a model call.

    A sync tool with an effect is seen through when its run is cancelled (a thread cannot
    be stopped: :func:`loopwise.tools.threads.to_the_end`), which holds the ``CancelledError``
    off; the task's cancellation is still requested, and is raised here so the run does
    not go on as if it had never been cancelled.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def check_step(target: object) -> Step:
    """``target`` as a :class:`Step`; :class:`ConfigError` when it is not one."""
    # What isinstance(target, Step) checks, without the runtime Protocol machinery,
    # which inspects every member of the protocol on each call (getattr: this is the
    # check of the contract itself, on whatever the user passed).
    if not (hasattr(target, "name") and callable(getattr(target, "run", None))):
        raise ConfigError(
            f"{target!r} is not a step: it needs a `name` and `async run(input, ctx)` "
            "(decorate a function with @loopwise.step)",
            name=name_of(target),
        )
    check_name(target.name, what="step")
    # cast: it has a `name` and a callable `run` (checked above), all a runtime
    # isinstance(target, Step) would check.
    return cast("Step", target)


def needs_model(step: object) -> bool:
    """Whether running ``step`` needs a model: its own ``needs_model`` says, and a plain
    function step declares it needs none (so the CLI does not demand one for it)."""
    return bool(step_member(step, "needs_model"))
