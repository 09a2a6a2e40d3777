"""Tokens sent per turn of a conversation, under each context policy (issue 20).

A 20-message conversation with one agent: each message makes the agent read one page of
an order history (~1.5 KB, as a tool result) and answer in a few sentences. Each message
is its own run of one conversation in a fresh SQLite store; what a turn sends is the sum
of the input tokens of its run's model calls — the summary call included when the
policy writes one. The scripted model estimates tokens at ~4 characters each, as the
budget does.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import raw_loop

import loopwise
from loopwise import Agent, ContextPolicy, ModelRequest, SummarizingPolicy, Turn
from loopwise.architectures.agent import LoopDetection

POLICIES: dict[str, ContextPolicy | SummarizingPolicy | None] = {
    "no policy": None,
    "ContextPolicy(keep_last=3)": ContextPolicy(keep_last=3),
    "SummarizingPolicy(keep_runs=2)": SummarizingPolicy(keep_runs=2),
}
_SUMMARY = "Summary: the user asked about orders O-1001..O-10xx; card declines and returns. " * 8


@dataclass(frozen=True)
class Turns:
    """What each message of one conversation sent."""

    policy: str
    sent: list[int]
    """Input tokens of each message's run, in order."""
    summaries: int
    """Summary calls made over the conversation."""


async def fetch_page(page: int) -> str:
    """Fetch one page of the customer's order history.

    Args:
        page: The page number.
    """
    return f"page {page}: " + "order O-1001 failed, card declined; " * 40


def _respond(request: ModelRequest) -> Turn:
    from loopwise.testing import call, reply

    if str(request.messages[0]["content"]).startswith("You keep the memory"):
        return reply(_SUMMARY)
    last = request.messages[-1]
    if last["role"] == "user":
        asked = sum(1 for m in request.messages if m["role"] == "user")
        return call("fetch_page", {"page": asked})
    return reply("Page read: the orders on it failed on card declines; ask for another card.")


async def conversation(turns: int = 20) -> list[Turns]:
    """Input tokens per message of a ``turns``-message conversation, per policy."""
    from loopwise.testing import ScriptedModel

    out = []
    for name, policy in POLICIES.items():
        agent = Agent(
            name="history_agent",
            instructions=raw_loop.SYSTEM,
            tools=[fetch_page],
            max_steps=4,
            context_policy=policy,
            loop_detection=LoopDetection(repeats=0, ping_pong=0),
        )
        model = ScriptedModel(_respond)
        sent, summaries = [], 0
        with tempfile.TemporaryDirectory() as tmp:
            store = loopwise.open_store(str(Path(tmp) / "runs.db"))
            for n in range(turns):
                result = await loopwise.arun(
                    agent, f"Read page {n + 1}.", model=model, store=store, conversation="bench"
                )
                if result.status != "completed":
                    raise RuntimeError(f"conversation run ended {result.status}: {result.detail}")
                sent.append(result.usage.input_tokens)
                summaries += sum(
                    1 for e in result.events if e.type == "model_call" and "summary" in e.step
                )
            store.close()
        out.append(Turns(policy=name, sent=sent, summaries=summaries))
    return out
