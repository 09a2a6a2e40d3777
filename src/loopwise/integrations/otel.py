"""OpenTelemetry spans for runs, following the GenAI semantic conventions.

``OTelSink`` is an event sink (``sinks=(OTelSink(),)``) that turns a run's events into
spans as they happen (the optional extra ``loopwise[otel]``: the API, the SDK, the
semantic-conventions package and the OTLP/HTTP exporter). Names follow the GenAI
conventions as their standalone release (semconv-genai v0.1.0) names them, taken from the
installed ``opentelemetry-semantic-conventions`` constants where it has them:

* one span per run: ``invoke_agent {name}`` for an agent, ``invoke_workflow {name}``
  otherwise, both with ``gen_ai.agent.name`` (the workflow span is the agent span; there
  is no ``gen_ai.workflow.name``), status, usage and cost; the target step is this span;
* one span per nested step (``invoke_agent``/``invoke_workflow`` by the step's kind, else
  the step's name), ``plan {hybrid}`` for each planning attempt of a hybrid (operation
  ``plan``, which the installed constants may not have yet), one ``chat {model}`` span
  per model call (provider, request and response model, token usage, finish reasons; cost
  as ``loopwise.cost_usd``), one ``execute_tool {tool}`` span per tool call (tool name,
  call id, effect, ``error.type``);
* gate requests and decisions as span events on the tool's span (or the step's).

**Content stays out** unless ``capture_content=True``: no input, output, message,
argument, result, reason or approver name, and nothing else the model or a user wrote — a
tool name the model invented (one the step does not declare) is :data:`UNKNOWN_TOOL`, a
hybrid's plan step (its id is the planner's) :data:`PLAN_STEP`, a call's or approval's id
a digest of it, and
a run that ends ``error`` carries its error's code (``error.type``, the status
description), not its message, which may quote the input. With it, chat spans carry the
model's output (``gen_ai.output.messages``); the events do not keep what was sent, so
``gen_ai.input.messages`` is not set.

**Every run closes its spans**: the run's last event (``run_finished``, also when a
mistake raises mid-run, or ``run_paused``) ends every span still open.

**One trace per run**, across pause and resume: a run started inside an active span
(the user's own) nests under it, else it starts a trace of its own. The run span's
context is recorded in the run's ``run_started`` event (``data["trace"]``, a W3C
``traceparent``; the sink is called before the store, so the store keeps it), and a
resume — in any process — continues that trace under it. A run first recorded without
this sink gets a trace id derived from its run id, the same in every process.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from importlib import metadata

from loopwise.errors import missing_extra

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
    from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
    from opentelemetry.trace import (
        Link,
        NonRecordingSpan,
        Span,
        SpanContext,
        SpanKind,
        StatusCode,
        TraceFlags,
        Tracer,
        TracerProvider,
    )
    from opentelemetry.util.types import AttributeValue
except ImportError as e:
    raise missing_extra("otel", e, needed_by="loopwise.otel") from e

from loopwise.core.events import Event, EventType
from loopwise.core.jsontypes import JSONMapping, JSONValue, json_list, json_number, json_object

__all__ = ["CONVENTIONS", "PLAN_STEP", "UNKNOWN_TOOL", "OTelSink"]

CONVENTIONS = "semconv-genai v0.1.0"
"""The GenAI semantic conventions these spans follow."""

PLAN_STEP = "plan_step"
"""What a hybrid's plan step (its id is the planner's text) is called in span names and
``loopwise.step`` without content capture."""
_PLAN_ENDS = frozenset({"start", "results"})
"""The plan-execution workflow's own nodes (not plan steps)."""

UNKNOWN_TOOL = "unknown_tool"
"""What a tool name the step does not declare (the model's own text) is called in span
names and ``gen_ai.tool.name`` without content capture."""

_OP = gen_ai.GenAiOperationNameValues
_INVOKE_AGENT = _OP.INVOKE_AGENT.value
_INVOKE_WORKFLOW = _OP.INVOKE_WORKFLOW.value
_CHAT = _OP.CHAT.value
_EXECUTE_TOOL = _OP.EXECUTE_TOOL.value
# semconv-genai v0.1.0 added `plan`; semantic-conventions 0.66b2 has no constant for it yet.
_PLAN = _OP.__members__["PLAN"].value if "PLAN" in _OP.__members__ else "plan"
_OPENAI = gen_ai.GenAiProviderNameValues.OPENAI.value

_AGENT_KINDS = frozenset({"agent"})
_WORKFLOW_KINDS = frozenset({"workflow", "hybrid"})
_HYBRID = "hybrid"


@dataclass
class _Run:
    """The open spans of one run in this process."""

    span: Span
    name: str
    started_ns: int
    steps: dict[str, list[Span]] = field(default_factory=dict)
    tools: dict[tuple[str, str], Span] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    """Each step path's kind, as its ``step_started`` said."""
    known_tools: set[str] = field(default_factory=set)
    """Tool names the run's steps declare (seen with an effect, or gated)."""


class OTelSink:
    """Maps a run's events to OpenTelemetry GenAI spans (see the module docs).

    ``tracer_provider`` defaults to the global one (``opentelemetry.trace``), so with no
    SDK configured every span is a no-op. ``capture_content=True`` adds inputs, outputs,
    tool arguments and results and the model's answers to the spans.
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, capture_content: bool = False
    ) -> None:
        self._tracer: Tracer = trace.get_tracer(
            "loopwise", _version(), tracer_provider=tracer_provider
        )
        self.capture_content = capture_content
        self._runs: dict[str, _Run] = {}
        self._handlers = {
            EventType.RUN_STARTED: self._run_started,
            EventType.RUN_RESUMED: self._run_resumed,
            EventType.STEP_STARTED: self._step_started,
            EventType.STEP_FINISHED: self._step_finished,
            EventType.MODEL_CALL: self._model_call,
            EventType.TOOL_CALL: self._tool_call,
            EventType.TOOL_RESULT: self._tool_result,
            EventType.GATE_REQUESTED: self._gate,
            EventType.GATE_DECIDED: self._gate,
            EventType.RUN_PAUSED: self._run_ended,
            EventType.RUN_FINISHED: self._run_ended,
        }

    def record(self, run_id: str, event: Event) -> None:
        """Open, annotate or end the spans ``event`` stands for."""
        handle = self._handlers.get(event.type)
        if handle is not None:
            handle(run_id, event)

    def _run_started(self, run_id: str, event: Event) -> None:
        name = str(event.data.get("target", ""))
        attributes: dict[str, AttributeValue] = {"loopwise.run_id": run_id}
        if self.capture_content:
            attributes["loopwise.input"] = _text(event.data.get("input"))
        run = self._open_run(run_id, name, otel_context.get_current(), attributes, [])
        event.data["trace"] = {"traceparent": _traceparent(run.span.get_span_context())}

    def _run_resumed(self, run_id: str, event: Event) -> None:
        stored = json_object(event.data.get("trace"))
        parent = _parse_traceparent(stored.get("traceparent")) or _derived(run_id)
        active = trace.get_current_span().get_span_context()
        links = [Link(active)] if active.is_valid else []
        attributes: dict[str, AttributeValue] = {
            "loopwise.run_id": run_id,
            "loopwise.resumed": True,
            "loopwise.resumed_from": str(event.data.get("from_status", "")),
        }
        ctx = trace.set_span_in_context(NonRecordingSpan(parent))
        run = self._open_run(run_id, str(event.data.get("target", "")), ctx, attributes, links)
        # Gates ask only about declared tools: their names are no model's invention.
        decisions = json_list(event.data.get("decisions"))
        run.known_tools.update(str(json_object(d).get("tool")) for d in decisions)

    def _open_run(
        self,
        run_id: str,
        name: str,
        parent: otel_context.Context,
        attributes: dict[str, AttributeValue],
        links: list[Link],
    ) -> _Run:
        # Named as a workflow until the target's step_started says it is an agent.
        span = self._tracer.start_span(
            f"{_INVOKE_WORKFLOW} {name}".rstrip(),
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: _INVOKE_WORKFLOW,
                gen_ai.GEN_AI_AGENT_NAME: name,
                **attributes,
            },
            links=links,
        )
        run = _Run(span=span, name=name, started_ns=time.time_ns())
        self._runs[run_id] = run
        return run

    def _step_started(self, run_id: str, event: Event) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        kind = str(event.data.get("kind", ""))
        run.kinds[event.step] = kind
        if "/" not in event.step:
            # The target itself: the run's span stands for it.
            self._name_run(run, event.step, kind)
            return
        parent_path, _, name = event.step.rpartition("/")
        shown = self._path(run, event.step)
        attributes: dict[str, AttributeValue] = {"loopwise.step": shown}
        if kind:
            attributes["loopwise.step.kind"] = kind
        span_name = shown.rpartition("/")[2]
        operation = _operation(kind)
        if run.kinds.get(parent_path) == _HYBRID and _is_planning(name):
            # The hybrid's planner runs as its step `plan` (a retry: `plan_{round}_{try}`).
            operation, name = _PLAN, parent_path.rpartition("/")[2]
        if operation is not None:
            span_name = f"{operation} {name}"
            attributes[gen_ai.GEN_AI_OPERATION_NAME] = operation
            attributes[gen_ai.GEN_AI_AGENT_NAME] = name
        if self.capture_content:
            attributes["loopwise.input"] = _text(event.data.get("input"))
        span = self._tracer.start_span(
            span_name,
            context=trace.set_span_in_context(self._parent(run, event.step)),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        run.steps.setdefault(event.step, []).append(span)

    def _path(self, run: _Run, path: str) -> str:
        """``path`` as spans show it: without content capture, a hybrid's plan steps (ids
        the planner wrote: ``desk/execute/refund_alice``) are :data:`PLAN_STEP`."""
        if self.capture_content:
            return path
        parts = path.split("/")
        for i in range(2, len(parts)):
            executing = run.kinds.get("/".join(parts[: i - 1])) == _HYBRID
            if executing and _is_execution(parts[i - 1]) and parts[i] not in _PLAN_ENDS:
                parts[i] = PLAN_STEP
        return "/".join(parts)

    def _id(self, value: JSONValue) -> str:
        """An id a model, a server or a plan chose (a call's, an approval's): as it is with
        content capture, else a digest of it (the same id, the same digest)."""
        text = str(value or "")
        if self.capture_content or not text:
            return text
        return "id-" + hashlib.sha256(text.encode()).hexdigest()[:12]

    def _name_run(self, run: _Run, name: str, kind: str) -> None:
        if kind in _AGENT_KINDS:
            run.span.update_name(f"{_INVOKE_AGENT} {name}")
            run.span.set_attribute(gen_ai.GEN_AI_OPERATION_NAME, _INVOKE_AGENT)
            run.span.set_attribute(gen_ai.GEN_AI_AGENT_NAME, name)
        if kind:
            run.span.set_attribute("loopwise.step.kind", kind)

    def _step_finished(self, run_id: str, event: Event) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        stack = run.steps.get(event.step)
        span = stack.pop() if stack else None
        if span is None:
            if self.capture_content and "/" not in event.step:
                run.span.set_attribute("loopwise.output", _text(event.data.get("output")))
            return
        if self.capture_content:
            span.set_attribute("loopwise.output", _text(event.data.get("output")))
        _usage_attributes(span, json_object(event.data.get("usage")))
        _shadow_attributes(span, event.data.get("shadow"))
        span.end()

    def _model_call(self, run_id: str, event: Event) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        data = event.data
        end = time.time_ns()
        start = end - int(json_number(data.get("duration_seconds")) * 1e9)
        requested = str(data.get("request_model") or data.get("model") or "")
        attributes: dict[str, AttributeValue] = {
            gen_ai.GEN_AI_OPERATION_NAME: _CHAT,
            # Every server is spoken to through the OpenAI protocols.
            gen_ai.GEN_AI_PROVIDER_NAME: _OPENAI,
            gen_ai.GEN_AI_REQUEST_MODEL: requested,
            gen_ai.GEN_AI_RESPONSE_MODEL: str(data.get("model") or ""),
            gen_ai.GEN_AI_USAGE_INPUT_TOKENS: int(json_number(data.get("input_tokens"))),
            gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: int(json_number(data.get("output_tokens"))),
            gen_ai.GEN_AI_RESPONSE_FINISH_REASONS: [str(data.get("finish_reason") or "")],
        }
        if data.get("cost_usd") is not None:
            attributes["loopwise.cost_usd"] = json_number(data["cost_usd"])
        if self.capture_content and data.get("turn"):
            attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _output_messages(json_object(data["turn"]))
        span = self._tracer.start_span(
            f"{_CHAT} {requested}".rstrip(),
            context=trace.set_span_in_context(self._parent(run, event.step, own=True)),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=start,
        )
        span.end(end_time=end)

    def _tool_call(self, run_id: str, event: Event) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        data = event.data
        span = run.tools.get((event.step, str(data.get("call_id", ""))))
        if span is None or not data.get("edit_of"):
            span = self._open_tool(run, event.step, data)
        elif self.capture_content:  # a person's edit of the call this span shows: as it runs
            span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS, _text(data.get("args")))
        if self.capture_content and data.get("edited_by"):
            span.set_attribute("loopwise.tool.edited_by", _text(data["edited_by"]))

    def _open_tool(self, run: _Run, step: str, data: JSONMapping) -> Span:
        if data.get("effect") is not None:  # a declared tool (an invented one has none)
            run.known_tools.add(str(data.get("tool", "")))
        tool = self._tool_name(run, data)
        attributes: dict[str, AttributeValue] = {
            gen_ai.GEN_AI_OPERATION_NAME: _EXECUTE_TOOL,
            gen_ai.GEN_AI_TOOL_NAME: tool,
            gen_ai.GEN_AI_TOOL_CALL_ID: self._id(data.get("call_id")),
            gen_ai.GEN_AI_TOOL_TYPE: "function",
        }
        if data.get("effect") is not None:
            attributes["loopwise.tool.effect"] = str(data["effect"])
        if self.capture_content and "args" in data:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _text(data["args"])
        span = self._tracer.start_span(
            f"{_EXECUTE_TOOL} {tool}",
            context=trace.set_span_in_context(self._parent(run, step, own=True)),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        run.tools[(step, str(data.get("call_id", "")))] = span
        return span

    def _tool_result(self, run_id: str, event: Event) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        data = event.data
        key = (event.step, str(data.get("call_id", "")))
        # A call logged before a pause has its span in the earlier process.
        span = run.tools.pop(key, None) or self._open_tool(run, event.step, data)
        run.tools.pop(key, None)
        if data.get("is_error"):
            span.set_attribute(ERROR_TYPE, "tool_error")
            span.set_status(StatusCode.ERROR)
        if self.capture_content:
            span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_RESULT, _text(data.get("content")))
        span.end()

    def _tool_name(self, run: _Run, data: JSONMapping) -> str:
        tool = str(data.get("tool", ""))
        return tool if self.capture_content or tool in run.known_tools else UNKNOWN_TOOL

    def _gate(self, run_id: str, event: Event) -> None:
        run = self._runs.get(run_id)
        if run is None:
            return
        data = event.data
        span = run.tools.get((event.step, str(data.get("call_id", "")))) or self._parent(
            run, event.step, own=True
        )
        run.known_tools.add(str(data.get("tool", "")))  # gates ask about declared tools only
        attributes: dict[str, AttributeValue] = {
            "loopwise.approval_id": self._id(data.get("approval_id")),
            gen_ai.GEN_AI_TOOL_NAME: str(data.get("tool", "")),
        }
        for name in ("effect", "decision", "tainted_by"):
            if data.get(name) is not None:
                attributes[f"loopwise.{name}"] = str(data[name])
        if self.capture_content:
            for name in ("args", "reason", "by"):
                if data.get(name) is not None:
                    attributes[f"loopwise.{name}"] = _text(data[name])
        span.add_event(str(event.type), attributes)

    def _run_ended(self, run_id: str, event: Event) -> None:
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        status = str(event.data.get("status", ""))
        for span in run.tools.values():
            span.end()
        for stack in run.steps.values():
            for span in reversed(stack):
                span.end()
        span = run.span
        span.set_attribute("loopwise.status", status)
        _usage_attributes(span, json_object(event.data.get("usage")))
        if status in ("error", "cancelled"):
            code = str(event.data.get("error_type") or status)
            span.set_attribute(ERROR_TYPE, code)
            # The detail may quote the input (`cannot parse ticket: '...'`): content.
            detail = event.data.get("detail") if self.capture_content else None
            span.set_status(StatusCode.ERROR, str(detail or code))
        if self.capture_content and event.data.get("output") is not None:
            span.set_attribute("loopwise.output", _text(event.data["output"]))
        span.end()

    def _parent(self, run: _Run, step: str, *, own: bool = False) -> Span:
        """The span an event at ``step`` belongs under: ``step``'s own (``own``), else its
        parent step's; the run's span for the target or when none is open here."""
        path = step if own else step.rpartition("/")[0]
        while path:
            stack = run.steps.get(path)
            if stack:
                return stack[-1]
            path = path.rpartition("/")[0]
        return run.span


def _operation(kind: str) -> str | None:
    if kind in _AGENT_KINDS:
        return _INVOKE_AGENT
    if kind in _WORKFLOW_KINDS:
        return _INVOKE_WORKFLOW
    return None


def _is_execution(name: str) -> bool:
    """Whether a hybrid's child step ``name`` runs a plan (``execute``, ``execute_2``)."""
    head, _, rest = name.partition("_")
    return head == "execute" and (not rest or rest.isdigit())


def _is_planning(name: str) -> bool:
    """Whether a hybrid's child step ``name`` is a planning attempt (the names
    :class:`~loopwise.architectures.hybrid.Hybrid` gives them: ``plan``, ``plan_2_1``)."""
    head, _, rest = name.partition("_")
    return head == "plan" and (not rest or rest.replace("_", "").isdigit())


def _usage_attributes(span: Span, usage: JSONMapping) -> None:
    span.set_attribute(
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS, int(json_number(usage.get("input_tokens")))
    )
    span.set_attribute(
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, int(json_number(usage.get("output_tokens")))
    )
    if usage.get("cost_usd") is not None:
        span.set_attribute("loopwise.cost_usd", json_number(usage["cost_usd"]))


def _shadow_attributes(span: Span, shadow: JSONValue) -> None:
    """A shadow's span (:class:`~loopwise.evidence.live.shadow.Shadow`): how it ended,
    what it used and whether it agreed with the primary, for a team's alerting to watch."""
    if not isinstance(shadow, dict):
        return
    span.set_attribute("loopwise.shadow.status", str(shadow.get("status")))
    if shadow.get("agree") is not None:
        span.set_attribute("loopwise.shadow.agree", bool(shadow["agree"]))
    _usage_attributes(span, json_object(shadow.get("usage")))


def _text(value: JSONValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _output_messages(turn: JSONMapping) -> str:
    """The turn in the GenAI output-messages shape (a JSON string)."""
    parts: list[JSONValue] = []
    if turn.get("text"):
        parts.append({"type": "text", "content": turn["text"]})
    for call in map(json_object, json_list(turn.get("tool_calls"))):
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": call.get("name"),
                "arguments": call.get("arguments"),
            }
        )
    message = {
        "role": "assistant",
        "parts": parts,
        "finish_reason": turn.get("finish_reason", "stop"),
    }
    return json.dumps([message])


def _traceparent(span_context: SpanContext) -> str:
    return (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
        f"{int(span_context.trace_flags):02x}"
    )


def _parse_traceparent(value: JSONValue) -> SpanContext | None:
    try:
        version, trace_id, span_id, flags = str(value).split("-")
        parsed = SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(int(flags, 16)),
        )
    except ValueError:
        return None
    return parsed if version == "00" and parsed.is_valid else None


def _derived(run_id: str) -> SpanContext:
    """A span context made from the run id alone: the same trace in every process."""
    digest = hashlib.sha256(f"loopwise-run:{run_id}".encode()).digest()
    return SpanContext(
        trace_id=int.from_bytes(digest[:16]) or 1,
        span_id=int.from_bytes(digest[16:24]) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def _version() -> str:
    # From the installed distribution, not the package root: the root face imports this
    # module (for typing), so a module here importing the root would close a circle.
    try:
        return metadata.version("loopwise")
    except metadata.PackageNotFoundError:
        return "0+unknown"
