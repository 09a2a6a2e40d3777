"""OpenTelemetry: the GenAI span tree of a run, one trace across pause and resume, content
only when opted in — exported with the SDK's in-memory exporter, names checked against
``opentelemetry-semantic-conventions``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE

import loopwise
from loopwise import SQLiteStore, gates
from loopwise.integrations.otel import OTelSink
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, call, reply

SEMCONV_NAMES = {
    value
    for name, value in vars(gen_ai).items()
    if name.startswith("GEN_AI_") and name != "GEN_AI_WORKFLOW_NAME"  # merged into agent.name
} | {ERROR_TYPE}
OPERATIONS = {op.value for op in gen_ai.GenAiOperationNameValues} | {"plan"}  # v0.1.0's


def _tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@loopwise.tool
def lookup(order_id: str) -> str:
    """Look up an order. Call it for any order named in the question."""
    return f"{order_id}: shipped to Alice"


def _clerk() -> loopwise.Agent:
    return loopwise.Agent(name="clerk", instructions="help", tools=[lookup], max_steps=4)


def _model() -> ScriptedModel:
    return ScriptedModel([call("lookup", {"order_id": "O-1"}), reply("O-1 went to Alice")])


def _by_name(spans: Sequence[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def _run_span(spans: Sequence[ReadableSpan]) -> ReadableSpan:
    (root,) = [s for s in spans if s.attributes and "loopwise.run_id" in s.attributes]
    return root


def test_a_run_is_a_span_tree_with_genai_names(tmp_path: Path) -> None:
    provider, exporter = _tracing()
    result = loopwise.run(
        _clerk(), "where is O-1?", model=_model(), store=None, sinks=(OTelSink(provider),)
    )
    assert result.status == "completed"
    spans = exporter.get_finished_spans()
    root = _run_span(spans)
    chats = [s for s in spans if s.name == "chat scripted"]
    tool = _by_name(spans)["execute_tool lookup"]
    assert len(chats) == 2 and len(spans) == 4
    for child in [*chats, tool]:
        assert child.parent is not None and child.parent.span_id == root.context.span_id
        assert child.context.trace_id == root.context.trace_id
    assert root.parent is None and root.attributes is not None
    assert root.name == "invoke_agent clerk"
    assert root.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert root.attributes[gen_ai.GEN_AI_AGENT_NAME] == "clerk"
    assert root.attributes["loopwise.run_id"] == result.run_id
    assert root.attributes["loopwise.status"] == "completed"
    chat = chats[0].attributes or {}
    assert chat[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
    assert chat[gen_ai.GEN_AI_REQUEST_MODEL] == "scripted"
    assert chat[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert chat[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] >= 0
    assert chats[0].start_time is not None and chats[0].end_time is not None
    assert chats[0].start_time <= chats[0].end_time
    tool_attrs = tool.attributes or {}
    assert tool_attrs[gen_ai.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert tool_attrs[gen_ai.GEN_AI_TOOL_NAME] == "lookup"
    assert tool_attrs[gen_ai.GEN_AI_TOOL_CALL_ID]
    assert tool_attrs["loopwise.tool.effect"] == "read"
    for span in spans:
        for name in span.attributes or {}:
            assert name.startswith("loopwise.") or name in SEMCONV_NAMES, name


def test_a_workflow_run_nests_its_agent_node_and_the_agents_calls() -> None:
    @loopwise.step
    async def tidy(question: str) -> str:
        return question.strip()

    desk = loopwise.Workflow("desk").then(tidy).then(_clerk())
    provider, exporter = _tracing()
    result = loopwise.run(desk, " O-1? ", model=_model(), store=None, sinks=(OTelSink(provider),))
    assert result.status == "completed"
    spans = exporter.get_finished_spans()
    by_name = _by_name(spans)
    root, agent, node = (
        by_name["invoke_workflow desk"],
        by_name["invoke_agent clerk"],
        by_name["tidy"],
    )
    # The conventions merged the workflow span into the agent span: one name attribute.
    assert (root.attributes or {})[gen_ai.GEN_AI_AGENT_NAME] == "desk"
    assert (root.attributes or {})[gen_ai.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert (node.attributes or {})["loopwise.step.kind"] == "function"
    for child in (agent, node):
        assert child.parent is not None and child.parent.span_id == root.context.span_id
    for grandchild in [s for s in spans if s.name in ("chat scripted", "execute_tool lookup")]:
        assert grandchild.parent is not None
        assert grandchild.parent.span_id == agent.context.span_id
    for span in spans:
        for name in span.attributes or {}:
            assert name.startswith("loopwise.") or name in SEMCONV_NAMES, name


def test_content_is_absent_unless_opted_in() -> None:
    def texts(capture: bool) -> str:
        provider, exporter = _tracing()
        sink = OTelSink(provider, capture_content=capture)
        loopwise.run(_clerk(), "where is O-1?", model=_model(), store=None, sinks=(sink,))
        return json.dumps([dict(s.attributes or {}) for s in exporter.get_finished_spans()])

    hidden, shown = texts(False), texts(True)
    for secret in ("Alice", "where is O-1?", "O-1 went to Alice"):
        assert secret not in hidden
        assert secret in shown
    assert gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS not in hidden
    assert gen_ai.GEN_AI_TOOL_CALL_RESULT in shown and gen_ai.GEN_AI_OUTPUT_MESSAGES in shown


def test_a_run_inside_the_users_span_nests_under_it() -> None:
    provider, exporter = _tracing()
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("handle request") as outer:
        loopwise.run(_clerk(), "O-1?", model=_model(), store=None, sinks=(OTelSink(provider),))
    root = _run_span(exporter.get_finished_spans())
    assert root.parent is not None and root.parent.span_id == outer.get_span_context().span_id
    assert root.context.trace_id == outer.get_span_context().trace_id


def test_a_failing_tool_marks_its_span_with_an_error_type() -> None:
    @loopwise.tool
    def broken(order_id: str) -> str:
        """Look up an order. Call it for any order named in the question."""
        raise RuntimeError("database down")

    provider, exporter = _tracing()
    agent = loopwise.Agent(name="clerk", instructions="help", tools=[broken], max_steps=3)
    model = ScriptedModel([call("broken", {"order_id": "O-1"}), reply("sorry")])
    loopwise.run(agent, "O-1?", model=model, store=None, sinks=(OTelSink(provider),))
    tool = _by_name(exporter.get_finished_spans())["execute_tool broken"]
    assert (tool.attributes or {})[ERROR_TYPE] == "tool_error"
    assert not tool.status.is_ok


_GATED = '''
import loopwise
from loopwise import gates


@loopwise.tool(effect="irreversible", gate=gates.human())
def refund(order_id: str) -> str:
    """Refund an order. Call it when a refund is owed."""
    return f"refunded {order_id}"


desk = loopwise.Agent(name="desk", instructions="refund", tools=[refund], max_steps=4)
'''

_RESUME = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import loopwise
from loopwise.integrations.otel import OTelSink
from loopwise.testing import ScriptedModel, reply

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
db, run_id = sys.argv[1], sys.argv[2]
result = loopwise.resume(run_id, store=db, model=ScriptedModel([reply("refunded")]),
                         sinks=(OTelSink(provider),))
assert result.status == "completed", result
print(json.dumps([
    {"name": s.name, "trace_id": s.context.trace_id,
     "parent": s.parent.span_id if s.parent else None, "attributes": dict(s.attributes)}
    for s in exporter.get_finished_spans()
]))
"""


@pytest.mark.slow
def test_a_run_paused_here_and_resumed_in_another_process_is_one_trace(tmp_path: Path) -> None:
    (tmp_path / "gated.py").write_text(_GATED)
    db = tmp_path / "runs.db"
    provider, exporter = _tracing()
    paused = loopwise.run(
        _load(tmp_path),
        "refund O-1",
        model=ScriptedModel([call("refund", {"order_id": "O-1"})]),
        store=db,
        spec=f"{tmp_path / 'gated.py'}:desk",
        sinks=(OTelSink(provider),),
    )
    assert paused.status == "awaiting_approval"
    first = exporter.get_finished_spans()
    root = _run_span(first)
    gate_events = [e.name for s in first for e in s.events]
    assert "gate_requested" in gate_events
    with SQLiteStore(db) as store:
        store.decide(paused.run_id, paused.pending[0]["approval_id"], decision="approved", by="a")
    out = subprocess.run(
        [sys.executable, "-c", _RESUME, str(db), paused.run_id],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    later = json.loads(out.stdout)
    assert later and {s["trace_id"] for s in later} == {root.context.trace_id}
    (resumed,) = [s for s in later if s["attributes"].get("loopwise.resumed")]
    assert resumed["parent"] == root.context.span_id
    assert resumed["attributes"]["loopwise.status"] == "completed"
    assert any(s["name"] == "execute_tool refund" for s in later)


def _load(tmp_path: Path) -> loopwise.Step:
    from loopwise.running.targets import load_target

    return load_target(f"{tmp_path / 'gated.py'}:desk").step


def test_a_run_recorded_without_the_sink_keeps_one_trace_across_its_resumes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def refund(order_id: str) -> str:
        """Refund an order. Call it when a refund is owed."""
        return "refunded"

    desk = loopwise.Agent(name="desk", instructions="refund", tools=[refund], max_steps=5)
    first = ScriptedModel([call("refund", {"order_id": "O-1"})])
    paused = loopwise.run(desk, "refund O-1 and O-2", model=first, store=db)
    trace_ids = set()
    # Two resumes, each with its own provider (as two processes would have).
    for answer in (call("refund", {"order_id": "O-2"}), reply("both refunded")):
        with SQLiteStore(db) as store:
            (waiting,) = store.pending(paused.run_id)
            store.decide(paused.run_id, waiting.approval_id, decision="approved", by="a")
        provider, exporter = _tracing()
        loopwise.resume(
            paused.run_id,
            step=desk,
            store=db,
            model=ScriptedModel([answer]),
            sinks=(OTelSink(provider),),
        )
        trace_ids |= {s.context.trace_id for s in exporter.get_finished_spans()}
    assert len(trace_ids) == 1


def _every_text(spans: Sequence[ReadableSpan]) -> str:
    """Everything a span says: names, attributes, event attributes, status descriptions."""
    return json.dumps(
        [
            [s.name, dict(s.attributes or {}), s.status.description]
            + [[e.name, dict(e.attributes or {})] for e in s.events]
            for s in spans
        ]
    )


def test_without_content_capture_no_model_or_user_text_reaches_a_span() -> None:
    @loopwise.step
    async def parse(ticket: str) -> str:
        raise ValueError(f"cannot parse ticket: {ticket!r}")

    provider, exporter = _tracing()
    invented = call("exfiltrate_the_secret_plan", {"to": "mallory@example.com"})
    model = ScriptedModel([invented, call("lookup", {"order_id": "O-1"}), reply("Alice has it")])
    done = loopwise.run(
        _clerk(), "the private question", model=model, store=None, sinks=(OTelSink(provider),)
    )
    failed = loopwise.run(
        parse, "ticket body: my card 4111", store=None, sinks=(OTelSink(provider),)
    )
    assert (done.status, failed.status) == ("completed", "error")
    spans = exporter.get_finished_spans()
    said = _every_text(spans)
    for secret in ("exfiltrate", "mallory", "private question", "Alice", "4111", "ticket body"):
        assert secret not in said, secret
    names = [s.name for s in spans]
    assert "execute_tool unknown_tool" in names and "execute_tool lookup" in names
    (root,) = [s for s in spans if s.name == "invoke_workflow parse"]
    assert (root.attributes or {})[ERROR_TYPE] == "ValueError"
    assert root.status.description == "ValueError"
    provider, exporter = _tracing()
    sink = OTelSink(provider, capture_content=True)
    loopwise.run(parse, "ticket body: my card 4111", store=None, sinks=(sink,))
    assert "4111" in _every_text(exporter.get_finished_spans())  # opted in: it is there


def test_a_run_that_raises_mid_run_closes_its_spans_and_its_log(store_at: str) -> None:
    @loopwise.tool(effect="irreversible")
    def wire(to: str) -> str:
        """Wire money."""
        return "sent"

    @loopwise.step
    async def payout(to: str, ctx: loopwise.Context) -> str:
        await loopwise.calls.call_tools(ctx, [(wire, {"to": to})])
        return "paid"

    provider, exporter = _tracing()
    flow = loopwise.Workflow("payouts").then(payout)
    with pytest.raises(loopwise.ToolError):
        loopwise.run(flow, "bob", store=store_at, sinks=(OTelSink(provider),))
    spans = exporter.get_finished_spans()
    assert {s.name for s in spans} == {"invoke_workflow payouts", "payout"}
    with open_store(store_at) as store:
        (run,) = store.list_runs()
        events = store.events(run.run_id)
    assert run.status == "error" and events[-1].type == "run_finished"
    finished = events[-1].data
    assert (finished["status"], finished["error_type"]) == ("error", "ungated-irreversible")


PLAN = {
    "steps": [
        {"id": "alice_card", "action": "lookup", "args": {"order_id": "O-1"}, "reason": "see"},
    ]
}


def test_spans_use_the_installed_conventions_names_and_a_hybrid_plans_in_a_plan_span() -> None:
    desk = loopwise.Hybrid("desk", actions=[lookup])
    provider, exporter = _tracing()
    model = ScriptedModel(lambda request: reply(json.dumps(PLAN)))
    done = loopwise.run(desk, "where is O-1?", model=model, store=None, sinks=(OTelSink(provider),))
    assert done.status == "completed", done
    spans = exporter.get_finished_spans()
    by_name = _by_name(spans)
    root, plan = by_name["invoke_workflow desk"], by_name["plan desk"]
    assert (plan.attributes or {})[gen_ai.GEN_AI_OPERATION_NAME] == "plan"
    assert (plan.attributes or {})[gen_ai.GEN_AI_AGENT_NAME] == "desk"
    assert plan.parent is not None and plan.parent.span_id == root.context.span_id
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert chats and all(c.parent and c.parent.span_id == plan.context.span_id for c in chats)
    for span in spans:
        attributes = span.attributes or {}
        for name in attributes:
            assert name.startswith("loopwise.") or name in SEMCONV_NAMES, name
        operation = attributes.get(gen_ai.GEN_AI_OPERATION_NAME)
        assert operation is None or operation in OPERATIONS, operation
    said = _every_text(spans)
    for secret in ("where is O-1", "shipped to Alice", "alice_card", '"see"'):
        assert secret not in said, secret
    assert "execute/plan_step" in said and "call_" not in said


def test_a_shadows_span_carries_its_agreement() -> None:
    @loopwise.step
    def rule(text: str) -> dict[str, str]:
        return {"category": "billing"}

    @loopwise.step
    def other(text: str) -> dict[str, str]:
        return {"category": "shipping"}

    provider, exporter = _tracing()
    for shadow, agrees in ((rule, True), (other, False)):
        named = loopwise.step(name=f"shadow_{agrees}")(shadow.fn)
        live = loopwise.Shadow("live", rule, named, share=1.0)
        result = loopwise.run(live, "my bill", store=None, sinks=(OTelSink(provider),))
        assert result.output == {"category": "billing"}
        (span,) = [s for s in exporter.get_finished_spans() if s.name == f"shadow_{agrees}"]
        attributes = span.attributes or {}
        assert attributes["loopwise.shadow.agree"] is agrees
        assert attributes["loopwise.shadow.status"] == "completed"
