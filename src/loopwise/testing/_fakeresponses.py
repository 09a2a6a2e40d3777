"""The fake server's Responses API: ``POST /v1/responses`` answered from the same script.

:class:`FakeResponses` turns a Responses body back into the :class:`ModelRequest` a
script sees (input items as Chat Completions messages, so one script answers both APIs
alike), and the scripted turn into a ``Response`` (or its server-sent events, with
``stream: true``).

Like a reasoning model, every answer carries a reasoning item before its output: with
``include: ["reasoning.encrypted_content"]`` (and ``store: false``) its encrypted content
is the only copy, so a client must send the item back with the turn it belongs to. The
server checks that it does: a request that sends an earlier turn's output (its tool calls
or text) without that turn's reasoning item is refused with a 400 naming both, and
recorded in :attr:`FakeResponses.missing`; the items it got back are in
:attr:`FakeResponses.received`. With ``store: true`` it keeps each response, so
``previous_response_id`` continues from it (and the reasoning is the server's own);
:meth:`FakeResponses.forget` drops stored responses, as expiry or another project would.

It refuses what OpenAI refuses, with OpenAI's status and error body: an unknown
``previous_response_id`` (404, ``previous_response_not_found``), a
``function_call_output`` whose call is not in the conversation (400), a reasoning item
it never issued, whose encrypted content is not the one it sealed, or that is not
followed by the output it came with (400). Call ids a request names that the server
never issued (a client renamed them) are recorded in :attr:`IssuedCallIds.foreign`.

A ``background: true`` request is answered ``queued``; ``GET /v1/responses/{id}`` answers
``in_progress`` for :attr:`FakeResponses.background_polls` polls, then the response; a
``POST /v1/responses/{id}/cancel`` before that cancels it (:attr:`FakeResponses.cancelled`).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from loopwise.core.jsontypes import JSONObject, JSONValue, json_list
from loopwise.models.port import ModelRequest, Turn
from loopwise.models.responses import ENCRYPTED_REASONING
from loopwise.models.scripted import (
    Fault,
    ScriptAnswer,
    ScriptEntry,
    as_turn,
    auto_respond,
    pieces,
    priced,
)
from loopwise.testing._fakehttp import json_body, media, objects
from loopwise.testing._responsesinput import chat_form, text_of, to_request
from loopwise.testing._serverprofiles import features_of

__all__ = ["FakeResponses", "IssuedCallIds"]

_KEEP = 256
"""Reasoning items remembered per output key (the oldest are forgotten first)."""

Reply = Callable[..., bytes]
"""The server's HTTP writer: ``(status, body, headers=None, *, media=...) -> bytes``."""


class IssuedCallIds:
    """The call ids a fake server gave out (bounded: the most recent ones), and the ids
    requests named that it never gave (:attr:`foreign`): what a renaming client sends."""

    def __init__(self, keep: int = 1 << 16) -> None:
        self.keep = keep
        self.foreign: list[str] = []
        """Call ids requests named that this server never issued, in arrival order."""
        self._issued: dict[str, None] = {}

    def issue(self, call_id: str) -> None:
        self._issued.pop(call_id, None)
        self._issued[call_id] = None
        if len(self._issued) > self.keep:
            del self._issued[next(iter(self._issued))]

    def check(self, named: Iterable[object]) -> None:
        """Record the ids of ``named`` this server never issued."""
        for call_id in named:
            if call_id not in self._issued and call_id not in self.foreign:
                self.foreign.append(str(call_id))


class _Host(Protocol):
    """What the endpoint uses of the server it is part of."""

    requests: list[JSONObject]
    errors: list[str]
    call_ids: IssuedCallIds

    def script_entry(self, request: ModelRequest) -> ScriptEntry: ...

    def crash(self) -> None: ...


@dataclass(slots=True)
class _Held:
    """A background response: its final document, and the polls left before it is done."""

    final: JSONObject
    left: int


class FakeResponses:
    """The ``/v1/responses`` endpoint of :class:`~loopwise.testing.FakeChatServer`.

    ``reject`` names the request features it refuses with a 400 naming ``text.format`` or
    ``tool_choice`` (the same names as the server's). ``require_reasoning`` (on by
    default) refuses a request that leaves out an earlier turn's reasoning item.
    """

    def __init__(self, *, reject: Collection[str] = (), require_reasoning: bool = True) -> None:
        self.reject = frozenset(reject)
        self.require_reasoning = require_reasoning
        self.received: list[str] = []
        """The ids of the reasoning items clients sent back, in arrival order."""
        self.missing: list[str] = []
        """Why a request was refused for leaving out a reasoning item."""
        self.background_polls = 1
        """How many polls of a background response answer ``in_progress`` before it is done."""
        self.cancelled: list[str] = []
        """The background responses a client cancelled, in order."""
        self._held: dict[str, _Held] = {}  # by the background response's id
        self._ids = itertools.count(1)
        # Output key -> the reasoning items issued with it (id -> encrypted content): a
        # script may give many runs the same call ids or text, each run its own reasoning.
        self._issued: dict[str, dict[str, str | None]] = {}
        self._stored: dict[str, list[JSONObject]] = {}  # response id -> its conversation
        # Reasoning id -> (its encrypted content, the keys of the outputs it came with).
        self._reasonings: dict[str, tuple[str | None, set[str]]] = {}

    async def answer(self, body: bytes, host: _Host, reply: Reply) -> bytes | None:
        """The HTTP response to one ``POST /v1/responses`` body."""
        payload = json_body(body)
        if isinstance(payload, str):
            return _error(reply, 400, payload)
        host.requests.append(payload)
        host.call_ids.check(_named_calls(payload.get("input")))
        items = self._conversation(payload)
        if items is None:
            previous = payload.get("previous_response_id")
            why = f"Previous response with id {previous!r} not found."
            return _error(reply, 404, why, "previous_response_id", "previous_response_not_found")
        refusal = self._refusal(payload, items)
        if refusal is not None:
            return _error(reply, 400, refusal[0], refusal[1], refusal[2])
        request = to_request(payload, items)
        try:
            entry = host.script_entry(request)
        except Exception as e:
            host.errors.append(f"{type(e).__name__}: {e}")
            return _error(reply, 500, f"FakeChatServer script failed: {type(e).__name__}: {e}")
        if isinstance(entry, Fault):
            return await self._fault(entry, request, (payload, items), host, reply)
        doc = self._response(entry, request, payload, items, host.call_ids)
        if payload.get("background"):
            return reply(200, self._hold(json.loads(doc)))
        return reply(200, doc, media=media(payload))

    def _hold(self, final: JSONObject) -> bytes:
        """A background response: kept to be polled, answered ``queued`` now."""
        self._held[str(final["id"])] = _Held(final, self.background_polls)
        queued = {**final, "status": "queued", "output": [], "usage": None}
        return json.dumps({**queued, "incomplete_details": None}).encode()

    def held(self, method: str, route: str, reply: Reply) -> bytes | None:
        """``GET /v1/responses/{id}`` (a poll) and ``POST /v1/responses/{id}/cancel`` of a
        background response; ``None`` for any other route."""
        parts = route.split("/responses/", 1)
        if len(parts) != 2 or not parts[1]:
            return None
        rid, _, action = parts[1].partition("/")
        if (method, action) not in {("GET", ""), ("POST", "cancel")}:
            return None
        kept = self._held.get(rid)
        if kept is None:
            return _error(reply, 404, f"Response with id {rid!r} not found.", "response_id")
        if action == "cancel":
            if kept.left > 0:
                self.cancelled.append(rid)
                kept.final = {**kept.final, "status": "cancelled", "output": []}
                kept.left = 0
            return reply(200, json.dumps(kept.final).encode())
        if kept.left > 0:
            kept.left -= 1
            polled = {**kept.final, "status": "in_progress", "output": []}
            return reply(200, json.dumps(polled).encode())
        return reply(200, json.dumps(kept.final).encode())

    def _conversation(self, payload: JSONObject) -> list[JSONObject] | None:
        """The whole input: a stored response's conversation first when one is chained."""
        given = payload.get("input")
        items: list[JSONObject] = (
            [{"role": "user", "content": given}] if isinstance(given, str) else objects(given)
        )
        previous = payload.get("previous_response_id")
        if previous is None:
            return items
        if not isinstance(previous, str) or previous not in self._stored:
            return None
        return [*self._stored[previous], *items]

    def forget(self, *response_ids: str) -> None:
        """Drop these stored responses (every one when none is named), as a server does
        when a response expires or the request goes to another project or region."""
        for rid in response_ids or list(self._stored):
            self._stored.pop(rid, None)

    def _refusal(
        self, payload: JSONObject, items: list[JSONObject]
    ) -> tuple[str, str, str | None] | None:
        """Why the request is refused (message, param, code), or ``None``."""
        refused = sorted(features_of(chat_form(payload)) & self.reject)
        if refused:
            return (*_plain_refusal(refused[0]), None)
        wrong = _orphan_output(items) or self._foreign_reasoning(objects(payload.get("input")))
        if wrong is not None:
            return wrong
        if payload.get("store") or not self.require_reasoning:
            return None
        left_out = self._reasoning_left_out(items)
        return None if left_out is None else (*left_out, None)

    def _foreign_reasoning(self, items: list[JSONObject]) -> tuple[str, str, str | None] | None:
        """A reasoning item this server did not issue, whose sealed content is not its
        own, or that is not followed by an output it came with (what OpenAI refuses)."""
        for n, item in enumerate(items):
            if item.get("type") != "reasoning":
                continue
            rid = str(item.get("id"))
            known = self._reasonings.get(rid)
            if known is None:
                return f"Item with id {rid!r} not found.", "input", None
            sealed, follows = known
            if item.get("encrypted_content") not in (None, sealed):
                why = f"The encrypted content for item {rid} could not be verified."
                return why, "input", "invalid_encrypted_content"
            after: JSONObject = items[n + 1] if n + 1 < len(items) else {}
            if _output_key(after) not in follows:
                why = (
                    f"Item {rid!r} of type 'reasoning' was provided without its required "
                    "following item."
                )
                return why, "input", None
        return None

    def _reasoning_left_out(self, items: list[JSONObject]) -> tuple[str, str] | None:
        sent = {
            str(i.get("id")): i.get("encrypted_content")
            for i in items
            if i.get("type") == "reasoning"
        }
        checked: set[str] = set()
        counted: set[str] = set()
        for item in items:
            key = _output_key(item)
            owed = self._issued.get(key)
            if owed is None or key in checked:
                continue
            checked.add(key)
            back = [rs for rs, sealed in owed.items() if rs in sent and sent[rs] == sealed]
            if not back:
                why = (
                    f"Item {key!r} was provided without its reasoning item "
                    f"{next(reversed(owed))!r} (its encrypted content): send back the "
                    "reasoning items of earlier turns when store is false"
                )
                self.missing.append(why)
                return why, "input"
            if back[0] not in counted:  # parallel calls share one reasoning item
                counted.add(back[0])
                self.received.append(back[0])
        return None

    def _issue(self, key: str, reasoning: str, sealed: str | None) -> None:
        """Remember that the reasoning item ``reasoning`` (its encrypted content ``sealed``)
        came with the output ``key`` (bounded: a long benchmark gives the same keys over and
        over)."""
        owed = self._issued.pop(key, {})
        owed[reasoning] = sealed
        if len(owed) > _KEEP:
            del owed[next(iter(owed))]
        self._issued[key] = owed
        if len(self._issued) > _KEEP * 16:
            del self._issued[next(iter(self._issued))]

    def _response(
        self,
        entry: ScriptAnswer,
        request: ModelRequest,
        payload: JSONObject,
        items: list[JSONObject],
        host_ids: IssuedCallIds,
        *,
        empty: bool = False,
    ) -> bytes:
        turn: Turn = priced(as_turn(entry), request, "")
        rid = f"resp_fake_{next(self._ids)}"
        reasoning, sealed = f"rs_{rid}", self._sealed(rid, payload)
        made = [] if empty else _output_items(turn, rid)
        item: JSONObject = {"id": reasoning, "type": "reasoning", "summary": []}
        item["encrypted_content"] = sealed
        output = [] if empty else [item, *made]
        if not empty:
            for made_item in made:
                self._issue(_output_key(made_item), reasoning, sealed)
            follows = {_output_key(made_item) for made_item in made}
            self._reasonings[reasoning] = (sealed, follows)
            if len(self._reasonings) > _KEEP * 64:
                del self._reasonings[next(iter(self._reasonings))]
            for call in turn.tool_calls:
                host_ids.issue(call.id)
        if payload.get("store"):
            self._stored[rid] = [*items, *output]
        doc = _document(turn, rid, payload, output)
        if payload.get("stream"):
            return _event_stream(doc, output)
        return json.dumps(doc).encode()

    def _sealed(self, rid: str, payload: JSONObject) -> str | None:
        """The encrypted content of the response's reasoning item, when the request asks
        for it (``include``), else ``None``."""
        if ENCRYPTED_REASONING in json_list(payload.get("include")):
            seal = hashlib.sha256(f"fake-reasoning:{rid}".encode()).hexdigest()[:24]
            return f"gAAAA-fake-{seal}"
        return None

    async def _fault(
        self,
        fault: Fault,
        request: ModelRequest,
        body: tuple[JSONObject, list[JSONObject]],
        host: _Host,
        reply: Reply,
    ) -> bytes | None:
        """What a :class:`Fault` script entry makes the endpoint answer (``body``: the
        request's payload and its whole input)."""
        payload, items = body
        if fault.delay:
            await asyncio.sleep(fault.delay)
        if fault.crash:
            host.crash()
            return None
        if fault.disconnect:
            return None
        if fault.body is not None:
            raw = fault.body
            text = (
                raw
                if isinstance(raw, bytes)
                else (raw if isinstance(raw, str) else json.dumps(raw))
            )
            return reply(
                fault.status, text if isinstance(text, bytes) else text.encode(), fault.headers
            )
        if fault.status >= 400:
            return _error(reply, fault.status, f"FakeChatServer fault: HTTP {fault.status}")
        answer = fault.answer if fault.answer is not None else auto_respond(request)
        doc = self._response(
            answer, request, payload, items, host.call_ids, empty=fault.empty_choices
        )
        if fault.truncated_json:
            doc = doc[: len(doc) // 2]
        return reply(fault.status, doc, fault.headers, media=media(payload))


def _named_calls(given: JSONValue) -> list[JSONValue]:
    """The call ids an input's calls and call outputs name."""
    if not isinstance(given, list):
        return []
    kinds = ("function_call", "function_call_output")
    return [i.get("call_id") for i in given if isinstance(i, dict) and i.get("type") in kinds]


def _orphan_output(items: list[JSONObject]) -> tuple[str, str, str | None] | None:
    """A ``function_call_output`` whose call is not earlier in the conversation (OpenAI's
    400): with ``previous_response_id``, the stored turns count as earlier."""
    called: set[object] = set()
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            called.add(item.get("call_id"))
        elif kind == "function_call_output" and item.get("call_id") not in called:
            why = f"No tool call found for function call output with call_id {item.get('call_id')}."
            return why, "input", None
    return None


def _output_key(item: JSONObject) -> str:
    """What identifies an output item a client sends back: a call's id, a text's text."""
    if item.get("type") == "function_call":
        return f"call:{item.get('call_id')}"
    if item.get("role") == "assistant":
        return f"text:{text_of(item.get('content'))}"
    return ""


def _output_items(turn: Turn, rid: str) -> list[JSONObject]:
    items: list[JSONObject] = []
    parts: list[JSONValue] = []
    if turn.text is not None:
        parts.append({"type": "output_text", "text": turn.text, "annotations": []})
    if turn.refusal is not None:
        parts.append({"type": "refusal", "refusal": turn.refusal})
    if parts:
        items.append(
            {
                "id": f"msg_{rid}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": parts,
            }
        )
    for n, call in enumerate(turn.tool_calls):
        items.append(
            {
                "id": f"fc_{rid}_{n}",
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    return items


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _document(turn: Turn, rid: str, payload: JSONObject, output: list[JSONObject]) -> JSONObject:
    reason = _INCOMPLETE.get(turn.finish_reason)
    items: list[JSONValue] = [*output]
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if reason else "completed",
        "incomplete_details": {"reason": reason} if reason else None,
        "error": None,
        "model": turn.model or str(payload.get("model", "fake-model")),
        "output": items,
        "parallel_tool_calls": True,
        "tool_choice": payload.get("tool_choice", "auto"),
        "tools": payload.get("tools") or [],
        "store": bool(payload.get("store")),
        "service_tier": turn.service_tier or payload.get("service_tier") or "default",
        "usage": {
            "input_tokens": turn.input_tokens,
            "input_tokens_details": {"cached_tokens": turn.cached_tokens},
            "output_tokens": turn.output_tokens,
            "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
            "total_tokens": turn.input_tokens + turn.output_tokens,
        },
    }


def _event_stream(doc: JSONObject, output: list[JSONObject]) -> bytes:
    """A response as the events of ``stream: true``: created, each item added, its text
    or arguments in deltas, the item done, then completed (or incomplete)."""
    events: list[JSONObject] = []
    events.append(
        {"type": "response.created", "response": {**doc, "output": [], "status": "in_progress"}}
    )
    for index, item in enumerate(output):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events += _item_deltas(item, index)
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    final = "response.incomplete" if doc["status"] == "incomplete" else "response.completed"
    events.append({"type": final, "response": doc})
    lines = []
    for n, event in enumerate(events):
        event["sequence_number"] = n
        lines.append(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n")
    return "".join(lines).encode()


def _item_deltas(item: JSONObject, index: int) -> list[JSONObject]:
    where: JSONObject = {"item_id": item["id"], "output_index": index}
    if item["type"] == "function_call":
        return [
            {"type": "response.function_call_arguments.delta", **where, "delta": piece}
            for piece in pieces(str(item["arguments"]))
        ]
    deltas: list[JSONObject] = []
    for n, part in enumerate(objects(item.get("content"))):
        if part["type"] == "output_text":
            deltas += [
                {
                    "type": "response.output_text.delta",
                    **where,
                    "content_index": n,
                    "delta": piece,
                    "logprobs": [],
                }
                for piece in pieces(str(part["text"]))
            ]
    return deltas


def _plain_refusal(feature: str) -> tuple[str, str]:
    if feature.startswith("tool_choice"):
        return (
            "Invalid parameter: this server does not support a forced 'tool_choice'.",
            "tool_choice",
        )
    if feature == "strict":
        return "Invalid parameter: 'strict' is not supported by this server.", "strict"
    kind = "json_object" if feature == "json_object_schema" else feature
    return (
        f"Invalid parameter: 'text.format' of type '{kind}' is not supported by this server.",
        "text.format",
    )


def _error(
    reply: Reply, status: int, message: str, param: str | None = None, code: str | None = None
) -> bytes:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    error = {"message": message, "type": kind, "param": param, "code": code}
    body: bytes = reply(status, json.dumps({"error": error}).encode())
    return body
