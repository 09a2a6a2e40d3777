"""The baseline: a minimal hand-written ``openai`` Chat Completions loop.

Call the model, run the requested tools (concurrently when several come in one turn),
append their results, loop. The triage baseline is one structured call with a strict
JSON-schema response format built once, validated with pydantic. This is what a careful
engineer writes without a framework; loopwise is measured against it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import openai
from pydantic import BaseModel, Field

SYSTEM = "You investigate failed orders. Use the tools, then answer in one sentence."


async def lookup_order(order_id: str) -> str:
    """Look up one order by id; call it for each order in question.

    Args:
        order_id: An order id.
    """
    return json.dumps({"order_id": order_id, "status": "failed", "reason": "card_declined"})


async def wait(ms: int) -> str:
    """Wait a number of milliseconds.

    Args:
        ms: Milliseconds.
    """
    await asyncio.sleep(ms / 1000)
    return f"waited {ms} ms"


TOOLS: dict[str, Any] = {"lookup_order": lookup_order, "wait": wait}
TOOL_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up one order by id; call it for each order in question.",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "An order id."}},
                "required": ["order_id"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "wait",
            "description": "Wait a number of milliseconds.",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"ms": {"type": "integer", "description": "Milliseconds."}},
                "required": ["ms"],
                "additionalProperties": False,
            },
        },
    },
]


async def _run_call(call: Any) -> dict[str, Any]:
    try:
        result = await TOOLS[call.function.name](**json.loads(call.function.arguments))
    except Exception as e:  # an error goes back to the model as the tool's result
        result = f"error: {e}"
    return {"role": "tool", "tool_call_id": call.id, "content": result}


async def agent(client: openai.AsyncOpenAI, model: str, question: str, max_steps: int = 20) -> str:
    """The raw agent loop; returns the final answer."""
    # The same strict schemas loopwise sends, so both sides ask the same of the server.
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    for _ in range(max_steps):
        completion = await client.chat.completions.create(
            model=model, messages=messages, tools=TOOL_SCHEMAS
        )
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        # content as a string, even empty: the form every tested server accepts (llama.cpp's
        # chat templates fail on a missing or null content), and what loopwise sends.
        messages.append({**message.model_dump(exclude_none=True), "content": message.content or ""})
        messages.extend(await asyncio.gather(*(_run_call(c) for c in message.tool_calls)))
    return "step limit"


class Ticket(BaseModel):
    """The triage output."""

    summary: str = Field(description="One sentence.")
    category: Literal["billing", "technical", "account", "shipping", "other"]
    urgency: int = Field(ge=1, le=5)


TICKET_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "Ticket",
        "strict": True,
        "schema": {**Ticket.model_json_schema(), "additionalProperties": False},
    },
}
TRIAGE_SYSTEM = "Summarise the ticket, classify it and rate its urgency from 1 to 5."


CATEGORIES = ("billing", "technical", "account", "shipping", "other")
JUDGE_SYSTEM = "You triage customer support tickets."
JUDGE_QUESTION = "Which area is the ticket about?"


async def judge(
    client: openai.AsyncOpenAI, model: str, ticket: dict[str, str]
) -> tuple[str, float]:
    """The raw decision: one ``client.decisions.create`` call; the likeliest category and
    its probability renormalised over the categories (what a judge's ruling holds)."""
    decided = await client.decisions.create(
        model=model,
        input=[
            {"role": "developer", "content": JUDGE_SYSTEM},
            {"role": "user", "content": f"Subject: {ticket['subject']}\n\n{ticket['body']}"},
        ],
        questions=[
            {
                "type": "choice",
                "name": "category",
                "instructions": JUDGE_QUESTION,
                "choices": [{"value": c} for c in CATEGORIES],
            }
        ],
    )
    answer = decided.answers[0].model_dump(mode="json")
    given = {str(p["value"]): float(p["probability"]) for p in answer["probabilities"]}
    spread = {c: given.get(c, 0.0) for c in CATEGORIES}
    best = max(CATEGORIES, key=lambda c: spread[c])
    return best, spread[best] / sum(spread.values())


async def triage(client: openai.AsyncOpenAI, model: str, ticket: dict[str, str]) -> Ticket:
    """The raw triage call: one structured completion, validated."""
    completion = await client.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": TRIAGE_SYSTEM},
            {"role": "user", "content": f"Subject: {ticket['subject']}\n\n{ticket['body']}"},
        ],
        response_format=TICKET_FORMAT,  # type: ignore[arg-type]
    )
    return Ticket.model_validate_json(completion.choices[0].message.content or "")


RESPONSES_TOOLS = [{"type": "function", **schema["function"]} for schema in TOOL_SCHEMAS]
"""The same tools in the Responses API's flat form."""


async def _run_response_call(call: Any) -> dict[str, Any]:
    try:
        result = await TOOLS[call.name](**json.loads(call.arguments))
    except Exception as e:
        result = f"error: {e}"
    return {"type": "function_call_output", "call_id": call.call_id, "output": result}


async def responses_agent(
    client: openai.AsyncOpenAI, model: str, question: str, max_steps: int = 20
) -> str:
    """The raw agent loop over the Responses API, stateless as OpenAI documents it
    (``store=False``, the encrypted reasoning asked for and passed back with the output
    items); returns the final answer."""
    items: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    for _ in range(max_steps):
        response = await client.responses.create(
            model=model,
            input=items,
            tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
            tool_choice="auto",
            store=False,
            include=["reasoning.encrypted_content"],
        )
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text
        # Reasoning and calls as the server sent them (the documented way to keep context).
        items += [item.model_dump(exclude_none=True) for item in response.output]
        items += await asyncio.gather(*(_run_response_call(c) for c in calls))
    return "step limit"
