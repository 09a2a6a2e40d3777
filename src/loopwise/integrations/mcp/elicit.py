"""A server's questions in the middle of a call (MCP elicitation) as loopwise's durable pause.

On the 2026-07-28 protocol a tool that needs input answers its call with an
``InputRequiredResult``: its questions (``elicitation/create``, each a message and a JSON
schema) and an opaque state; the client retries the call with the answers. loopwise
asks a person each question as an approval of the run (:func:`answers`):

* the run pauses ``awaiting_approval``; the ask's reason is the server's question, its
  ``answer_schema`` the schema and its arguments (``{}``) what the person edits into the
  answer — ``loopwise approve RUN --approval ID --args '{...}'``, the inbox's "Approve
  edited", or an in-code handler's ``Edited(args=...)``; the answer is validated against
  the schema when it is given (:func:`loopwise.running.approvals.decide`);
* a denial declines the question (the server decides what a declined question means);
* resumed — in any process — the call is made again (with its idempotency key, when it
  has an effect), the server asks again, and the recorded answer is sent: the questions
  are keyed by the call and the server's own key for the question.

A server on an older protocol asks in a request of its own while the call is open; that
cannot wait for a person across a pause, so loopwise declines it (:func:`push_declined`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loopwise.core.jsontypes import JSONMapping
from loopwise.tools.gates import Ask, authorize_all, pause, policy_then_human
from loopwise.tools.verdicts import Approved, Denied, Edited, Escalate, Pending, Verdict

if TYPE_CHECKING:
    from mcp.client.session import ClientRequestContext
    from mcp.types import (
        ElicitRequestFormParams,
        ElicitRequestParams,
        ElicitResult,
        InputRequests,
        InputResponses,
    )

    from loopwise.core.step import Context

__all__ = ["AskedCall", "answers", "push_declined"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class AskedCall:
    """The call a server asks questions in."""

    server: str
    """The server's name."""
    tool: str
    """The tool called."""
    effect: str
    """Its effect (the asks are gated like it: a person answers)."""
    key: str
    """What identifies the call in its run (its idempotency key, else its arguments)."""


async def answers(ctx: Context, call: AskedCall, requests: InputRequests) -> InputResponses:
    """The answers (``ElicitResult`` by the server's key) to the server's ``requests`` from
    the run's decisions; raises the run's pause when a person has not answered yet. The
    same question of the same call gets the same approval after a resume."""
    from mcp.types import ElicitRequest, ElicitRequestFormParams

    asks: list[Ask] = []
    for key, request in requests.items():
        params = request.params if isinstance(request, ElicitRequest) else None
        if not isinstance(params, ElicitRequestFormParams):
            raise _Unanswerable(
                f"MCP server {call.server!r} asked {call.tool!r} for input loopwise does not "
                f"give ({type(request).__name__}): only form elicitation is answered"
            )
        asks.append(_ask(ctx, call, key, params))
    verdicts = await authorize_all(asks)
    waiting = [v for v in verdicts if isinstance(v, Pending)]
    if waiting:
        raise pause(waiting)
    answered: InputResponses = {
        key: _answered(verdict, a.answer_schema)
        for key, a, verdict in zip(requests, asks, verdicts, strict=True)
    }
    return answered


def _ask(ctx: Context, call: AskedCall, key: str, params: ElicitRequestFormParams) -> Ask:
    question = str(params.message)
    schema = params.requested_schema
    schema = schema if isinstance(schema, dict) else schema.model_dump(by_alias=True)
    made = hashlib.sha256(call.key.encode()).hexdigest()[:10]
    asked = f"{_UNSAFE.sub('_', key)[:40]}-{hashlib.sha256(key.encode()).hexdigest()[:6]}"
    reason = f"MCP server {call.server!r} asks, during {call.tool}: {question}"
    return Ask(
        ctx=ctx,
        tool=call.tool,
        effect=call.effect,
        args={},
        call_id=f"{call.tool}.ask.{made}.{asked}",
        gate=policy_then_human(lambda args: Escalate(reason)),
        note=(
            "Answer with the edited arguments: a JSON object matching "
            f"{json.dumps(schema, sort_keys=True)[:1_000]}; deny to decline the question."
        ),
        answer_schema=schema,
    )


def _answered(verdict: Verdict | Pending, schema: JSONMapping | None) -> ElicitResult:
    """The server's answer (an ``ElicitResult``): accepted with the person's answer, or
    declined."""
    from jsonschema import Draft202012Validator
    from mcp.types import ElicitResult

    if isinstance(verdict, Denied):
        return ElicitResult(action="decline")
    assert isinstance(verdict, Approved | Edited)
    answer = dict(verdict.args) if isinstance(verdict, Edited) else {}
    # `decide` checked answers given through the CLI or the inbox; an in-code handler's
    # is checked here, before it reaches the server.
    wrong = next(iter(Draft202012Validator(schema or {}).iter_errors(answer)), None)
    if wrong is not None:
        raise _Unanswerable(f"the answer does not match the question's schema: {wrong.message}")
    return ElicitResult(action="accept", content=answer)


class _Unanswerable(Exception):
    """The server asked for input loopwise does not give (the message says what)."""


async def push_declined(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """An elicitation sent as a request of its own mid-call (an older protocol): declined,
    since it cannot wait for a person across a pause."""
    from mcp.types import ElicitResult

    return ElicitResult(action="decline")
