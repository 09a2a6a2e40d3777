"""The agent loop and its guardrails (DESIGN §6).

An :class:`Agent` is a dataclass of settings and a :class:`~loopwise.step.Step`; running
is :meth:`Agent.run`, one loop split by decision::

    call model → interpret turn → Answer | CallTools | Retry | Stop
                                   CallTools → run tools (concurrently) → check guards

Every guardrail ends the run with a :class:`~loopwise.step.Status` (raised as
:class:`~loopwise.step.Halt` with everything gathered so far as its output):

* ``step_limit`` — more than ``max_steps`` model turns (``ctx.max_steps`` overrides);
* ``budget_exceeded`` — checked by ``ctx.call_model`` before and after every call;
* ``tool_failed`` — one tool failed ``failure_cap`` times (invented names share a count);
* ``invalid_output`` — the final answer failed validation ``failure_cap`` times;
* ``stuck`` — the same turn repeated, or two turns ping-ponging (:class:`LoopDetection`);
* ``refused`` — the model declined (or its answer was filtered).

Errors are results: a raising tool, an invented name, non-JSON or invalid arguments, a
timeout — each goes back as the call's ``tool`` message starting ``ERROR:`` and saying
exactly what was wrong, and the loop goes on.

**Structured answers.** With a pydantic ``output_type`` the agent offers one more tool,
``final_answer``, whose strict schema is the output model; calling it with valid
arguments ends the run. A plain-text answer that is JSON valid for the model is accepted
too (so servers and scripted models without tool calling still work); an invalid answer
goes back to the model with the validation errors. No ``response_format`` is sent, so
any OpenAI-compatible server that supports tools works.

**Effects and journaling.** Each call is executed by :meth:`Agent._execute_call`, whose
authorization seam is :func:`_authorize` (gates, taint and durable pause plug in there).
Tool results are journaled under a key stable across resumes (step path, turn, call id);
a key present in ``ctx.replay`` returns the recorded result without running the tool.
``write``/``irreversible`` tools run with ``ctx.idempotency_key = f"{run_id}:{call_id}"``
(a nested agent's call id prefixed with its path).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic
from pydantic import BaseModel

from loopwise.errors import ConfigError, ToolError
from loopwise.gates import (
    Denied,
    Edited,
    Pending,
    authorize,
    denial_message,
    pause,
    recheck_edited,
)
from loopwise.port import Message, ModelRequest, ToolCall, Turn, message_chars
from loopwise.shape import Kind, Limits, Shape
from loopwise.step import Context, EventType, Halt, Status, concurrently, jsonable
from loopwise.structured import _strip_fence
from loopwise.tools import Effect, Tool, ToolArgumentsError, tool
from loopwise.usage import Budget

__all__ = [
    "FINAL_ANSWER",
    "Agent",
    "Answer",
    "CallTools",
    "ContextPolicy",
    "LoopDetection",
    "Retry",
    "Stop",
    "ToolOutcome",
]

FINAL_ANSWER = "final_answer"
"""The name of the tool a structured agent answers with."""

_UNKNOWN_TOOL = "(unknown tool)"


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopDetection:
    """When the agent is stuck: one turn repeated, or two turns alternating."""

    repeats: int = 3
    """The same turn (same calls, same arguments) this many times in a row (0: off)."""
    ping_pong: int = 2
    """Two different turns alternating this many times each, A,B,A,B (0: off)."""

    def __post_init__(self) -> None:
        for name in ("repeats", "ping_pong"):
            value = getattr(self, name)
            if not isinstance(value, int) or value == 1 or value < 0:
                # 1 would call any single call (or any two different calls) a loop.
                raise ConfigError(
                    f"LoopDetection.{name} must be 0 (off) or at least 2, not {value!r}",
                    name=name,
                )


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextPolicy:
    """Compact old tool results so tokens per step stop growing.

    The instructions, the input and every assistant turn stay whole; only tool results
    older than the last ``keep_last`` are shortened, and only in what is sent (the
    agent's own transcript keeps them).
    """

    keep_last: int = 3
    """Tool results kept whole (the most recent ones)."""
    preview_chars: int = 120
    """Characters of a compacted result kept as a preview."""

    def __post_init__(self) -> None:
        for name in ("keep_last", "preview_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(
                    f"ContextPolicy.{name} must be a whole number >= 0, not {value!r}", name=name
                )

    def apply(self, messages: list[Message]) -> list[Message]:
        """``messages`` with old tool results compacted."""
        return _CompactedView(self).update(messages)

    def _compact(self, message: Message) -> Message:
        content = str(message.get("content") or "")
        if len(content) <= self.preview_chars:
            return message
        preview = content[: self.preview_chars]
        note = f"{preview}… [compacted: {len(content)} characters, older result]"
        return {**message, "content": note}


class _CompactedView:
    """What a policy sends, kept up to date as an append-only transcript grows: each
    message is looked at once and each old result compacted once, so a turn costs the
    same early and late in a long run (re-applying the policy to the whole transcript
    every turn made long runs quadratic)."""

    def __init__(self, policy: ContextPolicy) -> None:
        self._policy = policy
        self._sent: list[Message] = []
        self._whole: deque[int] = deque()  # positions of the results not yet compacted
        self.chars = 0
        """The size of what is sent, as the prompt-size estimate counts it."""

    def update(self, messages: list[Message]) -> list[Message]:
        """The compacted ``messages`` (a fresh list); ``messages`` only grew since the
        last call."""
        if len(messages) < len(self._sent):
            self._sent, self._whole, self.chars = [], deque(), 0
        for message in messages[len(self._sent) :]:
            if message.get("role") == "tool":
                self._whole.append(len(self._sent))
            self._sent.append(message)
            self.chars += message_chars(message)
        while len(self._whole) > self._policy.keep_last:
            old = self._whole.popleft()
            whole, self._sent[old] = self._sent[old], self._policy._compact(self._sent[old])
            self.chars += message_chars(self._sent[old]) - message_chars(whole)
        return list(self._sent)


@dataclass(frozen=True, slots=True)
class Answer:
    """The model answered: the run's output."""

    output: Any


@dataclass(frozen=True, slots=True)
class CallTools:
    """The model asked for these calls (run concurrently, results in this order)."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class Retry:
    """The answer was invalid: tell the model ``feedback`` and take another turn."""

    feedback: str


@dataclass(frozen=True, slots=True)
class Stop:
    """A guardrail ends the run."""

    status: Status
    detail: str


Decision = Answer | CallTools | Retry | Stop


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolOutcome:
    """The result of one tool call, as the model will read it."""

    call: ToolCall
    """The call it answers."""
    content: str
    """The ``tool`` message content (starts with ``ERROR:`` for errors)."""
    is_error: bool
    """Whether the call failed."""
    counts_as: str
    """The failure counter an error counts toward (the tool, or one for invented names)."""
    value: Any = None
    """The tool's return value (for ``final_answer``: the validated answer)."""
    pending: Pending | None = None
    """Set when a gate waits for a person: the call did not run, the run pauses."""


@dataclass(frozen=True, slots=True)
class _Proceed:
    """Authorization verdict: run the tool with ``args`` (possibly edited by a gate)."""

    args: BaseModel


@dataclass(frozen=True, slots=True)
class _Block:
    """Authorization verdict: do not run; answer the call with ``reason`` as an error."""

    reason: str


@dataclass(frozen=True, slots=True)
class _Wait:
    """Authorization verdict: a person must decide first; the run pauses after this turn."""

    pending: Pending


async def _authorize(
    tool: Tool, args: BaseModel, call: ToolCall, ctx: Context, untrusted: Sequence[str]
) -> _Proceed | _Block | _Wait:
    """THE AUTHORIZATION SEAM: decide whether one validated call may run.

    The tool's gate and taint (``untrusted`` names the untrusted outputs already read,
    ``tool (call id)``) decide through :func:`loopwise.gates.authorize`; a denial becomes
    an error result, edited arguments are validated again, and an undecided human gate
    makes the turn pause once its other calls are done.
    """
    verdict = await authorize(
        ctx,
        tool=tool.name,
        effect=str(tool.effect),
        args=args,
        call_id=_scoped_id(ctx, call.id),
        gate=tool.gate,
        tainted_by=untrusted[0] if untrusted else None,
    )
    if isinstance(verdict, Pending):
        return _Wait(verdict)
    if isinstance(verdict, Denied):
        return _Block(denial_message(tool.name, verdict))
    if isinstance(verdict, Edited):
        try:
            edited = tool.parse(verdict.args)
        except ToolArgumentsError as e:
            return _Block(f"the edited arguments were rejected: {e}")
        refused = await recheck_edited(tool.gate, tool.name, edited)
        if refused is not None:
            return _Block(f"the edited arguments were rejected by the policy: {refused.reason}")
        return _Proceed(edited)
    return _Proceed(args)


@dataclass(kw_only=True)
class _Transcript:
    """What one run of an agent has gathered so far."""

    messages: list[Message]
    turns: int = 0
    last_text: str | None = None
    failures: Counter[str] = field(default_factory=Counter)
    signatures: list[tuple[tuple[str, str], ...]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    untrusted: list[str] = field(default_factory=list)
    call_ids: set[str] = field(default_factory=set)
    invocation: int = 1
    compacted: _CompactedView | None = None

    def gathered(self) -> dict[str, Any]:
        """Everything gathered so far: the output of a run a guardrail ended."""
        return {"answer": None, "last_text": self.last_text, "tool_results": self.results}


@dataclass(kw_only=True)
class Agent:
    """An agent: model + tools + a guarded loop. A step, so it nests anywhere.

    Raises :class:`~loopwise.errors.ToolError` at construction for an ``irreversible``
    tool without a gate, duplicate tool names, or a step given where a tool is expected;
    :class:`~loopwise.errors.ConfigError` (``.name`` the setting) for a bad name, limit or
    budget.
    """

    name: str
    """The step name."""
    instructions: str = ""
    """The system message."""
    tools: Sequence[Tool | Callable[..., Any]] = ()
    """Tools (plain functions are wrapped with :func:`~loopwise.tools.tool`, effect read)."""
    max_steps: int = 10
    """Model turns allowed before ``step_limit`` (``ctx.max_steps`` overrides)."""
    budget: Budget = field(default_factory=Budget)
    """The run budget when this agent is the run's target."""
    output_type: Any = str
    """``str`` (or ``None``) for a text answer; a pydantic model for a validated one."""
    input_type: Any = str
    """What the agent takes (a question by default); used by graph checks and as_tool."""
    failure_cap: int = 3
    """Failures of one tool (or invalid answers) that end the run."""
    loop_detection: LoopDetection = field(default_factory=LoopDetection)
    """When the run counts as ``stuck``."""
    context_policy: ContextPolicy | None = None
    """Optional compaction of old tool results."""
    max_tool_output_chars: int = 8000
    """Longer tool results are truncated with a note."""
    temperature: float | None = None
    """Sampling temperature (``None``: the server's default)."""
    _tools: dict[str, Tool] = field(init=False, repr=False, default_factory=dict)
    _schemas: list[dict[str, Any]] = field(init=False, repr=False, default_factory=list)
    _output_model: type[BaseModel] | None = field(init=False, repr=False, default=None)
    _output_schema: dict[str, Any] | None = field(init=False, repr=False, default=None)

    needs_model = True
    """The CLI must give this step a model."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ConfigError(
                f"agent name {self.name!r} must be non-empty, without '/'", name="name"
            )
        for limit in ("max_steps", "failure_cap"):
            value = getattr(self, limit)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"agent {self.name!r}: {limit} must be a whole number >= 1, not {value!r}",
                    name=limit,
                )
        if not isinstance(self.budget, Budget):
            raise ConfigError(
                f"agent {self.name!r}: budget must be a loopwise.Budget, not "
                f"{type(self.budget).__name__}",
                name="budget",
            )
        for item in self.tools:
            self._add_tool(_as_tool(item, self.name))
        if self.output_type is not None and self.output_type is not str:
            self._output_model = _output_model(self.output_type, self.name)
            self._add_tool(_final_answer_tool(self._output_model))
        self._schemas = [t.schema for t in self._tools.values()]
        self._output_schema = _schema_of(self._output_model)

    def _add_tool(self, item: Tool) -> None:
        if item.name in self._tools:
            raise ToolError(
                f"agent {self.name!r}: two tools are named {item.name!r}; names must be unique",
                tool=item.name,
            )
        if item.effect is Effect.IRREVERSIBLE and item.gate is None:
            raise ToolError(
                f"agent {self.name!r}: tool {item.name!r} is irreversible and has no gate; "
                f"give it one (@tool(effect='irreversible', gate=...)), declare a smaller "
                "effect if it can be undone, or use a hybrid so the agent only proposes it",
                tool=item.name,
                code="ungated-irreversible",
            )
        self._tools[item.name] = item

    @property
    def tool_map(self) -> dict[str, Tool]:
        """The agent's tools by name (``final_answer`` included for structured agents)."""
        return dict(self._tools)

    def describe(self) -> Shape:
        """A loop over its tools (its answer tool is its output, not the user's to review)."""
        tools = tuple(t.describe() for name, t in self._tools.items() if name != FINAL_ANSWER)
        limits = Limits(max_steps=self.max_steps, budget=self.budget)
        return Shape(kind=Kind.AGENT, name=self.name, tools=tools, limits=limits)

    async def run(self, input: Any, ctx: Context) -> Any:
        """Run the loop on ``input`` (a question, or anything JSON-able)."""
        state = _Transcript(messages=self._first_messages(input))
        if self.context_policy is not None:
            state.compacted = _CompactedView(self.context_policy)
        # Which run of this agent at this path: a second run's calls get ids of their own.
        state.invocation = int(ctx.next_key("agent").rsplit(":", 1)[1])
        limit = ctx.max_steps or self.max_steps
        try:
            while True:
                if state.turns >= limit:
                    raise Halt(
                        Status.STEP_LIMIT,
                        f"agent {self.name!r} took {limit} steps without a final answer",
                    )
                decision = await self._take_turn(state, ctx)
                if isinstance(decision, Answer):
                    return decision.output
                if isinstance(decision, Stop):
                    raise Halt(decision.status, decision.detail)
                if isinstance(decision, Retry):
                    state.messages.append({"role": "user", "content": decision.feedback})
        except Halt as halt:
            if halt.output is None:
                halt.output = state.gathered()
            raise

    async def _take_turn(self, state: _Transcript, ctx: Context) -> Answer | Retry | Stop | None:
        """One step: call the model, interpret its turn, run its tools, check the guards."""
        decision = self._interpret(await self._call_model(state, ctx), state)
        if isinstance(decision, CallTools):
            outcomes = await self._run_tools(decision.calls, state, ctx)
            return self._check_guards(outcomes, state)
        return decision

    def _first_messages(self, input: Any) -> list[Message]:
        text = input if isinstance(input, str) else json.dumps(jsonable(input))
        messages: list[Message] = []
        if self.instructions:
            messages.append({"role": "system", "content": self.instructions})
        messages.append({"role": "user", "content": text})
        return messages

    async def _call_model(self, state: _Transcript, ctx: Context) -> Turn:
        """One turn: the transcript (compacted by the policy) and the tool schemas."""
        known = None
        if state.compacted is None:
            messages = list(state.messages)
        else:
            messages = state.compacted.update(state.messages)
            known = state.compacted.chars  # compaction rewrites old messages: not re-measured
        request = ModelRequest(
            messages=messages,
            tools=self._schemas or None,
            output_schema=self._output_schema,
            temperature=self.temperature,
            known_chars=known,
        )
        state.turns += 1
        ctx.count_step()
        turn: Turn = _own_ids(await ctx.call_model(request), state)
        state.messages.append(turn.to_message())
        if turn.text:
            state.last_text = turn.text
        return turn

    def _interpret(self, turn: Turn, state: _Transcript) -> Decision:
        """Decide what the turn means: a refusal, tool calls (unless looping), or an answer."""
        if turn.refusal or turn.finish_reason == "content_filter":
            return Stop(Status.REFUSED, turn.refusal or "the answer was filtered by the server")
        if turn.tool_calls:
            state.signatures.append(tuple(_signature(c) for c in turn.tool_calls))
            looping = _loop_detected(state.signatures, self.loop_detection)
            if looping is not None:
                return Stop(Status.STUCK, looping)
            return CallTools(tuple(turn.tool_calls))
        return self._text_answer(turn.text or "", state)

    def _text_answer(self, text: str, state: _Transcript) -> Decision:
        if self._output_model is None:
            return Answer(text)
        try:
            return Answer(self._output_model.model_validate_json(_strip_fence(text)))
        except pydantic.ValidationError as e:
            feedback = (
                f"Your answer is not valid: {_errors(e)}. Answer by calling {FINAL_ANSWER} "
                "with arguments that match its schema."
            )
        state.failures[FINAL_ANSWER] += 1
        if state.failures[FINAL_ANSWER] >= self.failure_cap:
            return Stop(Status.INVALID_OUTPUT, f"final answer still invalid: {feedback}")
        return Retry(feedback)

    async def _run_tools(
        self, calls: Sequence[ToolCall], state: _Transcript, ctx: Context
    ) -> list[ToolOutcome]:
        """Run every call of one turn concurrently; append results in call order."""
        turn = state.turns
        # A call that ends the run (a Halt) cancels its siblings: no effect after the end.
        outcomes = await concurrently([self._execute_call(c, turn, state, ctx) for c in calls])
        waiting = [o.pending for o in outcomes if o.pending is not None]
        if waiting:
            # Every gate of the turn is pending together; the other calls ran and are journaled.
            raise pause(waiting)
        for outcome in outcomes:
            state.messages.append(
                {"role": "tool", "tool_call_id": outcome.call.id, "content": outcome.content}
            )
            state.results.append(
                {
                    "tool": outcome.call.name,
                    "args": _args_for_log(outcome.call.arguments),
                    "content": outcome.content,
                    "is_error": outcome.is_error,
                }
            )
        return list(outcomes)

    def _check_guards(
        self, outcomes: Sequence[ToolOutcome], state: _Transcript
    ) -> Answer | Stop | None:
        """After a turn's tools ran: an answer, a failure cap reached, or ``None`` (go on)."""
        for outcome in outcomes:
            if outcome.call.name == FINAL_ANSWER and not outcome.is_error:
                return Answer(outcome.value)
        for outcome in outcomes:
            if not outcome.is_error:
                continue
            state.failures[outcome.counts_as] += 1
            if state.failures[outcome.counts_as] >= self.failure_cap:
                final = outcome.counts_as == FINAL_ANSWER
                return Stop(
                    Status.INVALID_OUTPUT if final else Status.TOOL_FAILED,
                    f"{outcome.counts_as} failed {self.failure_cap} times; last error: "
                    f"{outcome.content.removeprefix('ERROR: ')}",
                )
        return None

    async def _execute_call(
        self, call: ToolCall, turn: int, state: _Transcript, ctx: Context
    ) -> ToolOutcome:
        """Execute ONE tool call: journal → resolve → validate → authorize → invoke → record."""
        key = f"{ctx.step_path}:tool:{turn}:{call.id}"
        if call.name != FINAL_ANSWER:
            # The final answer is how a structured result arrives, not a tool use.
            ctx.count_tool_call()
        found = self._tools.get(call.name)
        recorded = ctx.replay.get(key)
        if recorded is not None and call.name != FINAL_ANSWER:
            _restore_counters(ctx, recorded)
            return _replayed(call, recorded, found, state)
        if f"{key}:call" not in ctx.replay:
            # A call logged before a pause or a crash is not logged twice on resume.
            ctx.emit(
                EventType.TOOL_CALL,
                {
                    "tool": call.name,
                    "call_id": call.id,
                    "args": _args_for_log(call.arguments),
                    "effect": str(found.effect) if found else None,
                    "key": f"{key}:call",
                },
            )
        outcome = await self._outcome(found, call, state, ctx)
        if outcome.pending is not None:
            return outcome
        ctx.emit(
            EventType.TOOL_RESULT,
            {
                "tool": call.name,
                "call_id": call.id,
                "is_error": outcome.is_error,
                "content": outcome.content,
                "key": key,
                # Taint is read from the run's log (gates.run_taint), nested steps included.
                "untrusted": bool(found and found.untrusted_output and not outcome.is_error),
                "counters": _nested_counters(ctx, call.name),
            },
        )
        return outcome

    async def _outcome(
        self, found: Tool | None, call: ToolCall, state: _Transcript, ctx: Context
    ) -> ToolOutcome:
        if found is None:
            names = ", ".join(sorted(self._tools)) or "(none)"
            return _error(
                call, f"there is no tool named {call.name!r}; the tools are: {names}", _UNKNOWN_TOOL
            )
        try:
            args = found.parse(call.arguments)
        except ToolArgumentsError as e:
            return _error(call, str(e), found.name)
        verdict = await _authorize(found, args, call, ctx, tuple(state.untrusted))
        if isinstance(verdict, _Wait):
            return ToolOutcome(
                call=call, content="", is_error=False, counts_as=found.name, pending=verdict.pending
            )
        if isinstance(verdict, _Block):
            return _error(call, verdict.reason, found.name)
        try:
            value = await found.invoke(verdict.args, _tool_context(found, call, ctx))
        except Halt:
            raise
        except TimeoutError as e:
            return _error(call, str(e) or f"tool {found.name!r} timed out", found.name)
        except Exception as e:
            return _error(call, f"tool {found.name!r} raised {type(e).__name__}: {e}", found.name)
        if found.untrusted_output:
            state.untrusted.append(f"{found.name} ({call.id})")
        content = _truncate(_render(value), self.max_tool_output_chars)
        return ToolOutcome(
            call=call, content=content, is_error=False, counts_as=found.name, value=value
        )


def _nested_counters(ctx: Context, tool: str) -> dict[str, int]:
    """The journal-key counters a nested step (a tool made with ``as_tool``) advanced.

    Recorded with the call's result: a resumed run replays the result without running the
    nested step, and must still count its keys, or the next run of that step (a later
    call) would take this one's keys and replay its recorded turns and effects.
    """
    prefix = f"{ctx.step_path}/{tool}"
    # Context keeps the counters private; they are exactly what must survive here.
    counters = ctx._counters
    return {
        base: n for base, n in counters.items() if base.startswith((f"{prefix}/", f"{prefix}:"))
    }


def _restore_counters(ctx: Context, recorded: dict[str, Any]) -> None:
    counters = ctx._counters
    for base, n in (recorded.get("counters") or {}).items():
        counters[base] = max(counters.get(base, 0), int(n))


def _own_ids(turn: Turn, state: _Transcript) -> Turn:
    """``turn`` with call ids no earlier call of this run of the agent used.

    Approvals, journal keys and idempotency keys are bound to call ids, so a server that
    numbers calls per turn (``call_0`` every time) must not make a later call inherit an
    earlier one's approval or recorded result. Renaming is a function of the transcript
    (and of which run of the agent at this path it is), so a resumed run renames alike.
    """
    if not turn.tool_calls:
        return turn
    renamed = False
    suffix = "" if state.invocation == 1 else f"@{state.invocation}"
    calls = []
    for c in turn.tool_calls:
        chosen, n = f"{c.id}{suffix}", 1
        while chosen in state.call_ids:
            n += 1
            chosen = f"{c.id}{suffix}~{state.turns}" + ("" if n == 2 else f".{n}")
        state.call_ids.add(chosen)
        renamed = renamed or chosen != c.id
        calls.append(c if chosen == c.id else dataclasses.replace(c, id=chosen))
    # A copy: a scripted model may hand out the same Turn object again.
    return dataclasses.replace(turn, tool_calls=calls) if renamed else turn


def _as_tool(item: Any, agent: str) -> Tool:
    if isinstance(item, Tool):
        return item
    if hasattr(item, "run") and hasattr(item, "name"):
        raise ToolError(
            f"agent {agent!r}: {item.name!r} is a step, not a tool; wrap it with "
            "as_tool(step, description=...) so the model knows when to call it",
            tool=str(item.name),
        )
    if callable(item):
        return tool(item)
    raise ToolError(f"agent {agent!r}: {item!r} is not a tool", tool=repr(item))


def _output_model(output_type: Any, agent: str) -> type[BaseModel]:
    if isinstance(output_type, type) and issubclass(output_type, BaseModel):
        return output_type
    raise ToolError(
        f"agent {agent!r}: output_type must be str or a pydantic model class, not {output_type!r}",
        tool=agent,
    )


def _final_answer_tool(model: type[BaseModel]) -> Tool:
    async def final_answer(args: BaseModel, ctx: Context | None) -> BaseModel:
        return args

    return Tool(
        final_answer,
        name=FINAL_ANSWER,
        description=(
            "Give your final answer. Call this once, when you have investigated enough; "
            "the arguments are the answer."
        ),
        args_model=model,
    )


def _schema_of(model: type[BaseModel] | None) -> dict[str, Any] | None:
    return None if model is None else model.model_json_schema()


# json.dumps(..., sort_keys=True) with the encoder built once (dumps builds one per call).
_CANONICAL = json.JSONEncoder(sort_keys=True)


def _signature(call: ToolCall) -> tuple[str, str]:
    """A call as (name, canonical arguments), so key order and spacing do not matter."""
    try:
        canonical = _CANONICAL.encode(json.loads(call.arguments or "{}"))
    except json.JSONDecodeError:
        canonical = call.arguments.strip()
    return (call.name, canonical)


def _loop_detected(
    signatures: list[tuple[tuple[str, str], ...]], settings: LoopDetection
) -> str | None:
    """Why the recent turns look like a loop, or ``None``."""
    n = settings.repeats
    if n and len(signatures) >= n and len(set(signatures[-n:])) == 1:
        return f"the same call was made {n} times in a row: {_describe(signatures[-1])}"
    k = settings.ping_pong
    if k and len(signatures) >= 2 * k:
        tail = signatures[-2 * k :]
        a, b = tail[0], tail[1]
        if a != b and all(s == (a if i % 2 == 0 else b) for i, s in enumerate(tail)):
            return f"two calls ping-ponged {k} times: {_describe(a)} ⇄ {_describe(b)}"
    return None


def _describe(signature: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{name}({args})" for name, args in signature)


def _args_for_log(raw: str) -> Any:
    try:
        return json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return raw


def _error(call: ToolCall, message: str, counts_as: str) -> ToolOutcome:
    return ToolOutcome(call=call, content=f"ERROR: {message}", is_error=True, counts_as=counts_as)


def _replayed(
    call: ToolCall, recorded: dict[str, Any], found: Tool | None, state: _Transcript
) -> ToolOutcome:
    is_error = bool(recorded.get("is_error"))
    if found is not None and found.untrusted_output and not is_error:
        state.untrusted.append(f"{found.name} ({call.id})")
    return ToolOutcome(
        call=call,
        content=str(recorded.get("content", "")),
        is_error=is_error,
        counts_as=found.name if found else _UNKNOWN_TOOL,
    )


def _tool_context(found: Tool, call: ToolCall, ctx: Context) -> Context:
    child = ctx.child(found.name)
    if found.effect is not Effect.READ:
        # Lets an effect interrupted between doing and recording be made safe on resume.
        child.idempotency_key = f"{ctx.run_id}:{_scoped_id(ctx, call.id)}"
    return child


def _scoped_id(ctx: Context, call_id: str) -> str:
    """The id that binds a call's approval and idempotency key, unique in the run.

    The run's target agent uses the model's call id as is; a nested agent prefixes its
    path, as two agents' models may both say ``call_0`` (its approval would otherwise be
    the other's, and its effect deduplicated into the other's).
    """
    return call_id if len(ctx.path) <= 1 else f"{ctx.step_path}/{call_id}"


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return "done (the tool returned nothing)"
    return json.dumps(jsonable(value), default=str)


def _truncate(content: str, limit: int) -> str:
    if len(content) <= limit:
        return content
    return f"{content[:limit]}\n[truncated: showing {limit} of {len(content)} characters]"


def _errors(error: pydantic.ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "(answer)"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
