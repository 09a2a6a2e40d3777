"""The agent loop and its guardrails (DESIGN §6).

An :class:`Agent` is a dataclass of settings and a :class:`~loopwise.core.step.Step`; running
is :meth:`Agent.run`, one loop split by decision::

    call model → interpret turn → Answer | CallTools | Retry | Stop
                                   CallTools → run tools (concurrently) → check guards

Every guardrail ends the run with a :class:`~loopwise.core.step.Status` (raised as
:class:`~loopwise.core.step.Halt` with everything gathered so far as its output):

* ``step_limit`` — more than ``max_steps`` model turns (``ctx.max_steps`` overrides);
* ``budget_exceeded`` — checked by ``ctx.call_model`` before and after every call;
* ``tool_failed`` — one tool failed ``failure_cap`` times (invented names share a count);
* ``invalid_output`` — the final answer failed validation (or, for a text answer, was
  empty or only whitespace) ``failure_cap`` times;
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

**Effects and journaling.** The agent decides which calls a turn makes; the tool-call
executor (:mod:`loopwise.tools.calls`) makes them: validation, taint, gates, idempotency keys,
replay and recording happen there, the same for every architecture. Results are
journaled under a key stable across resumes (step path, turn, call id). At most
``max_tool_calls`` calls of one turn run; the others are answered with ``ERROR:``
results. Call ids bind approvals and idempotency keys (a nested agent's prefixed with
its path).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pydantic
from pydantic import BaseModel
from typing_extensions import TypeForm

from loopwise.architectures.history import (
    CompactedView,
    ContextPolicy,
    History,
    SummarizingPolicy,
    own_ids,
    user_text,
)
from loopwise.architectures.structured import strip_fence
from loopwise.core.events import Status
from loopwise.core.journal import Journal
from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.core.members import StepDefaults
from loopwise.core.names import check_name
from loopwise.core.result import Halt
from loopwise.core.shape import Kind, Limits, Shape
from loopwise.core.step import Context, Step
from loopwise.core.usage import Budget
from loopwise.errors import ConfigError, ToolError
from loopwise.models.port import Message, ModelRequest, ToolCall, Turn
from loopwise.tools.call_text import readable_args
from loopwise.tools.call_values import Call, CallSettings, Outcome
from loopwise.tools.calls import execute
from loopwise.tools.gates import pause
from loopwise.tools.source import ToolSource, spread
from loopwise.tools.tool import Tool, require_gate, tool
from loopwise.tools.verdicts import Pending

__all__ = [
    "FINAL_ANSWER",
    "Agent",
    "Answer",
    "CallTools",
    "LoopDetection",
    "Retry",
    "Stop",
    "ToolOutcome",
]

FINAL_ANSWER = "final_answer"
"""The name of the tool a structured agent answers with."""

_UNKNOWN_TOOL = "(unknown tool)"
_TOO_MANY = "(too many calls in one turn)"


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopDetection:
    """When the agent is stuck: one turn repeated, or two turns alternating."""

    repeats: int = 3
    """The same turn (same calls, same arguments) this many times in a row (0: off)."""
    ping_pong: int = 2
    """Two different turns alternating this many times each, A,B,A,B (0: off)."""

    def __post_init__(self) -> None:
        for name, value in (("repeats", self.repeats), ("ping_pong", self.ping_pong)):
            if not isinstance(value, int) or value == 1 or value < 0:
                # 1 would call any single call (or any two different calls) a loop.
                raise ConfigError(
                    f"LoopDetection.{name} must be 0 (off) or at least 2, not {value!r}",
                    name=name,
                )


@dataclass(frozen=True, slots=True)
class Answer:
    """The model answered: the run's output."""

    output: object


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
    value: object = None
    """The tool's return value (for ``final_answer``: the validated answer)."""
    pending: Pending | None = None
    """Set when a gate waits for a person: the call did not run, the run pauses."""


@dataclass(kw_only=True)
class _Transcript:
    """What one run of an agent has gathered so far."""

    messages: list[Message]
    turns: int = 0
    last_text: str | None = None
    failures: Counter[str] = field(default_factory=Counter)
    signatures: list[tuple[tuple[str, str], ...]] = field(default_factory=list)
    results: list[JSONValue] = field(default_factory=list)
    """Each call's result as a JSON object: ``tool``, ``args``, ``content``, ``is_error``."""
    call_ids: set[str] = field(default_factory=set)
    invocation: int = 1
    compacted: CompactedView | None = None

    def gathered(self) -> JSONObject:
        """Everything gathered so far: the output of a run a guardrail ended."""
        return {"answer": None, "last_text": self.last_text, "tool_results": self.results}


@dataclass(kw_only=True)
class Agent(StepDefaults):
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
    tools: Sequence[Tool | ToolSource | Callable[..., object]] = ()
    """Tools (plain functions are wrapped with :func:`~loopwise.tools.tool.tool`, effect
    read), and sources of tools (an MCP server's), listed again when a run starts if their
    list changed."""
    max_steps: int = 10
    """Model turns allowed before ``step_limit`` (``ctx.max_steps`` overrides)."""
    budget: Budget = field(default_factory=Budget)
    """The run budget when this agent is the run's target."""
    output_type: TypeForm[object] = str
    """``str`` (or ``None``) for a text answer; a pydantic model for a validated one."""
    input_type: TypeForm[object] = str
    """What the agent takes (a question by default); used by graph checks and as_tool."""
    failure_cap: int = 3
    """Failures of one tool (or invalid answers) that end the run."""
    loop_detection: LoopDetection = field(default_factory=LoopDetection)
    """When the run counts as ``stuck``."""
    context_policy: ContextPolicy | SummarizingPolicy | None = None
    """What of the transcript is sent: compaction of old tool results, or (in a
    conversation) a summary of the older runs (see :mod:`loopwise.architectures.history`)."""
    max_tool_output_chars: int = 8000
    """Longer tool results are truncated with a note."""
    max_tool_calls: int = 16
    """Tool calls of one model turn that run; the rest are answered with ``ERROR:``
    results saying so (and count as one failure toward ``failure_cap``)."""
    temperature: float | None = None
    """Sampling temperature (``None``: the server's default)."""
    _tools: dict[str, Tool] = field(init=False, repr=False, default_factory=dict)
    _sources: tuple[ToolSource, ...] = field(init=False, repr=False, default=())
    _schemas: list[JSONObject] = field(init=False, repr=False, default_factory=list)
    _output_model: type[BaseModel] | None = field(init=False, repr=False, default=None)
    _output_schema: JSONObject | None = field(init=False, repr=False, default=None)

    needs_model = True
    """The CLI must give this step a model."""

    def __post_init__(self) -> None:
        check_name(self.name, what="agent")
        for limit, value in (
            ("max_steps", self.max_steps),
            ("failure_cap", self.failure_cap),
            ("max_tool_calls", self.max_tool_calls),
        ):
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
        if self.output_type is not None and self.output_type is not str:
            self._output_model = _output_model(self.output_type, self.name)
        self._sources = tuple(t for t in self.tools if isinstance(t, ToolSource))
        self._tools = self._tool_map()
        self._schemas = [t.schema for t in self._tools.values()]
        self._output_schema = _schema_of(self._output_model)

    def _tool_map(self) -> dict[str, Tool]:
        """The tools by name: each given, each of each source's, the answer tool."""
        tools: dict[str, Tool] = {}
        for item in spread(self.tools):
            self._add_tool(tools, _as_tool(item, self.name))
        if self._output_model is not None:
            self._add_tool(tools, _final_answer_tool(self._output_model))
        return tools

    async def _refreshed(self) -> None:
        """A run starts: list again the sources whose list changed, and take their tools."""
        changed = [await source.refresh() for source in self._sources]
        if any(changed):
            tools = self._tool_map()  # checked whole (names, gates) before it is used
            self._tools, self._schemas = tools, [t.schema for t in tools.values()]

    def _add_tool(self, tools: dict[str, Tool], item: Tool) -> None:
        if item.name in tools:
            raise ToolError(
                f"agent {self.name!r}: two tools are named {item.name!r}; names must be unique",
                tool=item.name,
            )
        require_gate(
            item,
            holder=f"agent {self.name!r}: ",
            fix="give it one (@tool(effect='irreversible', gate=...)), declare a smaller "
            "effect if it can be undone, or use a hybrid so the agent only proposes it",
        )
        tools[item.name] = item

    @property
    def tool_map(self) -> dict[str, Tool]:
        """The agent's tools by name (``final_answer`` included for structured agents)."""
        return dict(self._tools)

    def describe(self) -> Shape:
        """A loop over its tools (its answer tool is its output, not the user's to review)."""
        tools = tuple(t.describe() for name, t in self._tools.items() if name != FINAL_ANSWER)
        limits = Limits(max_steps=self.max_steps, budget=self.budget)
        return Shape(kind=Kind.AGENT, name=self.name, tools=tools, limits=limits)

    async def run(self, input: object, ctx: Context) -> object:
        """Run the loop on ``input`` (a question, or anything JSON-able)."""
        if self._sources:
            await self._refreshed()
        state = _Transcript(messages=await self._first_messages(input, ctx))
        compaction = self.context_policy
        if isinstance(compaction, SummarizingPolicy):
            compaction = compaction.compact
        if compaction is not None:
            state.compacted = CompactedView(compaction)
        # Which run of this agent at this path: a second run's calls get ids of their own.
        state.invocation = ctx.journal.counted(ctx.step_path, "agent")
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

    async def _first_messages(self, input: object, ctx: Context) -> list[Message]:
        """The instructions, the earlier messages of the run's conversation (as the
        context policy sends them) and ``input`` as the user message."""
        messages: list[Message] = []
        if self.instructions:
            messages.append({"role": "system", "content": self.instructions})
        history = ctx.history if len(ctx.path) == 1 else None
        if isinstance(history, History):
            # Only the run's target continues its conversation: a nested agent's run is new.
            messages += await self._earlier(history, ctx)
        messages.append({"role": "user", "content": user_text(input)})
        return messages

    async def _earlier(self, history: History, ctx: Context) -> list[Message]:
        if isinstance(self.context_policy, SummarizingPolicy):
            return await self.context_policy.earlier(history, ctx.step_path, ctx)
        return history.messages(ctx.step_path)

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
        turn: Turn = own_ids(
            await ctx.call_model(request), state.call_ids, state.turns, state.invocation
        )
        state.messages.append(turn.to_message())
        if turn.text:
            state.last_text = turn.text
        return turn

    def _interpret(self, turn: Turn, state: _Transcript) -> Decision:
        """Decide what the turn means: a refusal, a cut-off, tool calls (unless looping), or
        an answer."""
        if turn.refusal or turn.finish_reason == "content_filter":
            return Stop(Status.REFUSED, turn.refusal or "the answer was filtered by the server")
        cut_off = turn.cut_off
        if cut_off is not None:
            # Half an answer is not an answer, and a half-written call must not run.
            return Stop(Status.INVALID_OUTPUT, cut_off)
        if turn.tool_calls and all(c.name == FINAL_ANSWER for c in turn.tool_calls):
            # Answer attempts are bounded by failure_cap: the same invalid answer given
            # again ends `invalid_output` (what went wrong), not `stuck`.
            return CallTools(tuple(turn.tool_calls))
        if turn.tool_calls:
            state.signatures.append(tuple(_signature(c) for c in turn.tool_calls))
            looping = _loop_detected(state.signatures, self.loop_detection)
            if looping is not None:
                return Stop(Status.STUCK, looping)
            return CallTools(tuple(turn.tool_calls))
        return self._text_answer(turn.text or "", state)

    def _text_answer(self, text: str, state: _Transcript) -> Decision:
        if self._output_model is None:
            if text.strip():
                return Answer(text)
            # No text and no call is no answer: sent back, then `invalid_output`.
            feedback = "Your answer was empty. Answer the question in text."
        else:
            try:
                return Answer(self._output_model.model_validate_json(strip_fence(text)))
            except pydantic.ValidationError as e:
                feedback = (
                    f"Your answer is not valid: {_errors(e)}. Answer by calling "
                    f"{FINAL_ANSWER} with arguments that match its schema."
                )
        state.failures[FINAL_ANSWER] += 1
        if state.failures[FINAL_ANSWER] >= self.failure_cap:
            return Stop(Status.INVALID_OUTPUT, f"final answer still invalid: {feedback}")
        return Retry(feedback)

    async def _run_tools(
        self, calls: Sequence[ToolCall], state: _Transcript, ctx: Context
    ) -> list[ToolOutcome]:
        """Make the turn's calls through the executor; append results in call order."""
        path = ctx.step_path
        batch = [
            Call(
                name=c.name,
                arguments=c.arguments,
                call_id=c.id,
                bind_id=_scoped_id(ctx, c.id),
                key=Journal.key(path, "tool", state.turns, c.id),
                # The final answer is how a structured result arrives, not a tool use.
                counted=c.name != FINAL_ANSWER,
                # A model that asks for the same effect twice (in one turn or a later
                # one) gets it once: this run of this agent is the scope.
                once_in=Journal.key(path, "agent", state.invocation),
            )
            for c in calls
        ]
        settings = CallSettings(
            max_calls=self.max_tool_calls, max_output_chars=self.max_tool_output_chars
        )
        made = await execute(ctx, batch, self._tools, settings)
        waiting = [o.pending for o in made if o.pending is not None]
        if waiting:
            # Every gate of the turn is pending together; the other calls ran and are journaled.
            raise pause(waiting)
        outcomes = [self._outcome(call, o) for call, o in zip(calls, made, strict=True)]
        for outcome in outcomes:
            state.messages.append(
                {"role": "tool", "tool_call_id": outcome.call.id, "content": outcome.content}
            )
            state.results.append(
                {
                    "tool": outcome.call.name,
                    "args": readable_args(outcome.call.arguments),
                    "content": outcome.content,
                    "is_error": outcome.is_error,
                }
            )
        return outcomes

    def _outcome(self, call: ToolCall, made: Outcome) -> ToolOutcome:
        """The executor's outcome as the loop reads it (which failure count it feeds)."""
        value = made.value
        if call.name == FINAL_ANSWER and not made.is_error and value is None:
            # A replayed final answer: the answer is its (validated) arguments.
            value = self._tools[FINAL_ANSWER].parse(call.arguments)
        counts_as = call.name
        if made.status == "unknown":
            counts_as = _UNKNOWN_TOOL
        elif made.status == "excess":
            counts_as = _TOO_MANY
        return ToolOutcome(
            call=call,
            content=made.content,
            is_error=made.is_error,
            counts_as=counts_as,
            value=value,
        )

    def _check_guards(
        self, outcomes: Sequence[ToolOutcome], state: _Transcript
    ) -> Answer | Stop | None:
        """After a turn's tools ran: an answer, a failure cap reached, or ``None`` (go on).

        Failures count per turn: a tool that failed in several parallel calls of one turn
        failed once (the model asked once), so ``failure_cap`` counts turns that failed.
        """
        for outcome in outcomes:
            if outcome.call.name == FINAL_ANSWER and not outcome.is_error:
                return Answer(outcome.value)
        last_error = {o.counts_as: o for o in outcomes if o.is_error}
        for counts_as, outcome in last_error.items():
            state.failures[counts_as] += 1
            if state.failures[counts_as] >= self.failure_cap:
                final = counts_as == FINAL_ANSWER
                return Stop(
                    Status.INVALID_OUTPUT if final else Status.TOOL_FAILED,
                    f"{counts_as} failed {self.failure_cap} times; last error: "
                    f"{outcome.content.removeprefix('ERROR: ')}",
                )
        return None


def _as_tool(item: object, agent: str) -> Tool:
    if isinstance(item, Tool):
        return item
    if isinstance(item, Step):
        raise ToolError(
            f"agent {agent!r}: {item.name!r} is a step, not a tool; wrap it with "
            "as_tool(step, description=...) so the model knows when to call it",
            tool=str(item.name),
        )
    if callable(item):
        return tool(item)
    raise ToolError(f"agent {agent!r}: {item!r} is not a tool", tool=repr(item))


def _output_model(output_type: object, agent: str) -> type[BaseModel]:
    if isinstance(output_type, type) and issubclass(output_type, BaseModel):
        return output_type
    raise ToolError(
        f"agent {agent!r}: output_type must be str or a pydantic model class, not {output_type!r}",
        tool=agent,
    )


def _final_answer_tool(model: type[BaseModel]) -> Tool:
    async def final_answer(args: BaseModel, ctx: Context | None) -> BaseModel:
        return args

    answer = Tool(
        final_answer,
        name=FINAL_ANSWER,
        description=(
            "Give your final answer. Call this once, when you have investigated enough; "
            "the arguments are the answer."
        ),
        args_model=model,
    )
    answer.in_process = True
    return answer


def _schema_of(model: type[BaseModel] | None) -> JSONObject | None:
    return None if model is None else model.model_json_schema()


# json.dumps(..., sort_keys=True) with the encoder built once (dumps builds one per call).
_CANONICAL = json.JSONEncoder(sort_keys=True)


def _signature(call: ToolCall) -> tuple[str, str]:
    """A call as (name, canonical arguments), so key order and spacing do not matter."""
    return (call.name, _CANONICAL.encode(readable_args(call.arguments)))


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


def _scoped_id(ctx: Context, call_id: str) -> str:
    """The id that binds a call's approval and idempotency key, unique in the run.

    The run's target agent uses the model's call id (escaped: :meth:`Journal.bound`); a
    nested agent prefixes its path, as two agents' models may both say ``call_0`` (its
    approval would otherwise be the other's, and its effect deduplicated into the other's).
    """
    return Journal.bound("" if len(ctx.path) <= 1 else ctx.step_path, call_id)


def _errors(error: pydantic.ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "(answer)"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
