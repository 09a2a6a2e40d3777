"""The loopwise side of each benchmark: the same tasks as :mod:`raw_loop`."""

from __future__ import annotations

import json
from typing import Any

import bench_script
import raw_loop

import loopwise
from loopwise import ModelRequest, ToolCall, Turn
from loopwise.architectures.agent import Agent, LoopDetection
from loopwise.architectures.history import ContextPolicy
from loopwise.architectures.structured import Structured


def make_agent(max_steps: int = 20, **settings: Any) -> Agent:
    """The benchmark agent: ``lookup_order`` and ``wait`` as loopwise tools."""
    return Agent(
        name="bench_agent",
        instructions=raw_loop.SYSTEM,
        tools=[raw_loop.lookup_order, raw_loop.wait],
        max_steps=max_steps,
        **settings,
    )


def make_triage() -> Structured[raw_loop.Ticket]:
    """The benchmark triage: one structured call."""
    return Structured(
        "bench_triage",
        raw_loop.Ticket,
        raw_loop.TRIAGE_SYSTEM,
        prompt=lambda t: f"Subject: {t['subject']}\n\n{t['body']}",
    )


def make_judge() -> loopwise.Judge[Any]:
    """The benchmark judge: one choice question (``category``, as the raw call names it),
    asked through the Decisions API."""
    return loopwise.Judge(
        "category",
        list(raw_loop.CATEGORIES),
        question=raw_loop.JUDGE_QUESTION,
        instructions=raw_loop.JUDGE_SYSTEM,
        prompt=lambda t: f"Subject: {t['subject']}\n\n{t['body']}",
    )


def openai_model(name: str, client: Any, api: str = "chat") -> loopwise.OpenAIModel:
    """loopwise's model port over the same ``AsyncOpenAI`` client the raw loop uses."""
    return loopwise.OpenAIModel(name, client=client, api=api)


async def run(step: Any, input: Any, model: Any, **options: Any) -> loopwise.RunResult:
    """One loopwise run, with the store off unless ``options`` pass one."""
    return await loopwise.arun(step, input, model=model, **{"store": None, **options})


async def watch(step: Any, input: Any, model: Any, **options: Any) -> loopwise.RunResult:
    """One loopwise run consumed through ``astream`` (every event handed to the loop)."""
    stream = loopwise.astream(step, input, model=model, **{"store": None, **options})
    async for _ in stream:
        pass
    assert stream.result is not None
    return stream.result


def otel_sink() -> Any:
    """An OTel sink on an SDK provider whose exporter drops every span (the SDK's span
    work is measured, no export)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from loopwise.integrations.otel import OTelSink

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    return OTelSink(provider)


class InstantModel:
    """An in-process model answering the benchmark script at once from prebuilt turns,
    so that timing a run measures loopwise alone."""

    name = "bench-model"

    def __init__(self) -> None:
        ticket = json.dumps(bench_script.TICKET)
        self._ticket = Turn(text=ticket, input_tokens=100, output_tokens=20)
        self._answer = Turn(text=bench_script.ANSWER, input_tokens=100, output_tokens=20)
        self._calls = [
            Turn(
                tool_calls=[
                    ToolCall(id=f"c{i}", name="lookup_order", arguments=f'{{"order_id": "A-{i}"}}')
                ],
                finish_reason="tool_calls",
                input_tokens=100,
                output_tokens=20,
            )
            for i in range(5)
        ]

    async def complete(self, request: ModelRequest) -> Turn:
        """The next turn of the benchmark script."""
        if request.response_format is not None or not request.tools:
            return self._ticket
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        return self._calls[done] if done < 5 else self._answer


async def tokens_per_step(steps: int) -> tuple[list[int], list[int]]:
    """Input tokens of each model call of a ``steps``-step run whose tool returns ~2 KB,
    with a context policy (keep the last 3 results whole) and without one."""
    # Imported here: the memory probe imports this module, and loopwise alone does not
    # load its testing fakes.
    from loopwise.testing import ScriptedModel, call, reply

    def script(request: ModelRequest) -> Turn:
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        if done >= steps - 1:
            return reply("done")
        return call("fetch_page", {"page": done + 1})

    async def fetch_page(page: int) -> str:
        """Fetch one page of the order history.

        Args:
            page: The page number.
        """
        return f"page {page}: " + "order O-1001 failed, card declined; " * 60

    out: list[list[int]] = []
    for policy in (ContextPolicy(keep_last=3), None):
        agent = Agent(
            name="long_agent",
            instructions=raw_loop.SYSTEM,
            tools=[fetch_page],
            max_steps=steps + 1,
            context_policy=policy,
            loop_detection=LoopDetection(repeats=0, ping_pong=0),
        )
        result = await run(agent, "Read the whole history.", ScriptedModel(script))
        if result.status != "completed":
            raise RuntimeError(f"context-policy run ended {result.status}: {result.detail}")
        out.append([e.data["input_tokens"] for e in result.events if e.type == "model_call"])
    return out[0], out[1]
