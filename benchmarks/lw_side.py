"""The loopwise side of each benchmark: the same tasks as :mod:`raw_loop`.

Parts of loopwise that have not landed yet are replaced by the smallest stand-in
built on the core (``ctx.call_model``), and :data:`FLAVOUR` says which was used.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import raw_loop

import loopwise
from loopwise.model import ModelRequest
from loopwise.step import Context, EventType

FLAVOUR: dict[str, str] = {}


class _CoreAgent:
    """A stand-in agent on the core contracts until ``loopwise.agent`` lands."""

    name = "bench_agent"

    def __init__(self, tools: dict[str, Any], schemas: list[dict[str, Any]]) -> None:
        self.tools = tools
        self.schemas = schemas

    async def run(self, input: str, ctx: Context) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": raw_loop.SYSTEM},
            {"role": "user", "content": input},
        ]
        for _ in range(20):
            ctx.count_step()
            turn = await ctx.call_model(ModelRequest(messages=messages, tools=self.schemas))
            if not turn.tool_calls:
                return turn.text or ""
            messages.append(turn.to_message())
            messages.extend(await asyncio.gather(*(self._call(c, ctx) for c in turn.tool_calls)))
        return "step limit"

    async def _call(self, call: Any, ctx: Context) -> dict[str, Any]:
        ctx.emit(
            EventType.TOOL_CALL, {"tool": call.name, "call_id": call.id, "args": call.arguments}
        )
        content = await self.tools[call.name](**json.loads(call.arguments))
        ctx.emit(EventType.TOOL_RESULT, {"tool": call.name, "call_id": call.id, "content": content})
        return {"role": "tool", "tool_call_id": call.id, "content": content}


def make_agent() -> Any:
    """The benchmark agent: ``lookup_order`` and ``wait`` as loopwise tools."""
    FLAVOUR["agent"] = "core stand-in (loopwise.agent not landed)"
    return _CoreAgent(raw_loop.TOOLS, raw_loop.TOOL_SCHEMAS)


class _CoreTriage:
    name = "bench_triage"

    async def run(self, input: dict[str, str], ctx: Context) -> raw_loop.Ticket:
        turn = await ctx.call_model(
            ModelRequest(
                messages=[
                    {"role": "system", "content": raw_loop.TRIAGE_SYSTEM},
                    {"role": "user", "content": f"Subject: {input['subject']}\n\n{input['body']}"},
                ],
                response_format=raw_loop.TICKET_FORMAT,
            )
        )
        return raw_loop.Ticket.model_validate_json(turn.text or "")


def make_triage() -> Any:
    """The benchmark triage: one structured call."""
    FLAVOUR["triage"] = "core stand-in (loopwise.structured not landed)"
    return _CoreTriage()


async def run(step: Any, input: Any, model: Any, **options: Any) -> loopwise.RunResult:
    """One loopwise run with the store off (unless ``options`` turn it on)."""
    return await loopwise.arun(step, input, model=model, **options)


def openai_model(name: str, client: Any) -> Any:
    """loopwise's model port over the same ``AsyncOpenAI`` client the raw loop uses."""
    return loopwise.OpenAIModel(name, client=client)


def store_options() -> dict[str, Any] | None:
    """Run options that turn the SQLite store on, or ``None`` before the store lands."""
    return None


async def tokens_per_step(steps: int) -> tuple[list[int], list[int]] | None:
    """Input tokens per model call of a ``steps``-step run, with and without a context
    policy; ``None`` before the agent's context policy lands."""
    return None
