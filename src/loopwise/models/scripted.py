"""The scripted model: an in-process model that answers from a script, and its auto-answers.

* :class:`ScriptedModel` answers from a list of turns (consumed in order, for unit tests)
  or from a function of the request (pure, so a resumed run replays the same answers).
  Asked to stream (``request.on_text``), it hands over its answer's text in pieces first.
  With no script it is the offline ``--model scripted``: schema-valid JSON for structured
  calls, one plausible call of the first tool when tools are offered (:func:`auto_respond`).
* :func:`reply`, :func:`call`, :func:`calls`, :func:`refuse` build turns tersely.
* :class:`Fault` as a script entry injects a failure instead of an answer (here it raises
  the error the port would; :class:`~loopwise.testing.FakeChatServer` sends it over HTTP).

This is a core module: model resolution (``"scripted"``), :mod:`loopwise.testing` and
the fake server import it, and it imports only the port's contract. Token counts of
scripted turns are estimated at ~4 characters per token, so budgets behave as they would
against a real model.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue, json_list, json_object
from loopwise.errors import ModelAPIError
from loopwise.models.decided import decision_turn, is_decision
from loopwise.models.port import DecisionBackend, ModelDefaults, ModelRequest, ToolCall, Turn

__all__ = [
    "Fault",
    "ScriptEntry",
    "ScriptExhausted",
    "ScriptedModel",
    "as_turn",
    "auto_respond",
    "call",
    "calls",
    "example_from_schema",
    "pieces",
    "priced",
    "refuse",
    "reply",
    "schema_of",
]

_ids = itertools.count(1)


class ScriptExhausted(AssertionError):
    """A list script ran out of turns: the code under test called the model more than planned."""


def reply(text: object) -> Turn:
    """An answer turn; anything but a string (a dict, a list) is sent as its JSON text."""
    body = text if isinstance(text, str) else json.dumps(text)
    return Turn(text=body, finish_reason="stop")


def call(name: str, args: object = None, *, id: str | None = None) -> Turn:
    """A turn calling one tool; ``args`` as a dict (sent as JSON), or a raw (possibly
    broken) string."""
    return calls((name, args, id))


def calls(*specs: tuple[str, object] | tuple[str, object, str | None]) -> Turn:
    """A turn calling several tools at once: ``calls(("a", {...}), ("b", {...}))``."""
    tool_calls = []
    for spec in specs:
        name, args = spec[0], spec[1]
        call_id = spec[2] if len(spec) > 2 and spec[2] else f"call_{next(_ids)}"
        raw = args if isinstance(args, str) else json.dumps(args or {})
        tool_calls.append(ToolCall(id=str(call_id), name=name, arguments=raw))
    return Turn(tool_calls=tool_calls, finish_reason="tool_calls")


def refuse(message: str = "I can't help with that.") -> Turn:
    """A refusal turn."""
    return Turn(refusal=message, finish_reason="stop")


@dataclass(frozen=True, kw_only=True)
class Fault:
    """A failure the server answers with instead of the next scripted turn.

    Applied in order: wait ``delay`` seconds; ``crash`` kills the server; ``disconnect``
    closes the connection with no response; ``body`` (str, bytes or a JSON-able value)
    is sent as is with ``status``; a ``status`` >= 400 sends an OpenAI-style error body;
    otherwise a normal completion of ``answer`` (default: the offline auto answer),
    broken by ``empty_choices`` and/or ``truncated_json`` when set.
    """

    status: int = 200
    """The HTTP status code."""
    delay: float = 0.0
    """Seconds to wait before answering (client timeouts, slow servers)."""
    truncated_json: bool = False
    """Send only the first half of the completion's JSON."""
    empty_choices: bool = False
    """Send a completion with ``choices: []``."""
    disconnect: bool = False
    """Close the connection without answering."""
    crash: bool = False
    """Die: close the connection and every other one and stop accepting new ones (a
    server process that exited mid-request)."""
    body: bytes | JSONValue = None
    """A raw body to send instead of anything built here."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers (``retry-after-ms``, ``x-should-retry``...)."""
    answer: ScriptAnswer | None = None
    """The turn (``Turn``, str or dict) a non-error fault answers with."""

    async def in_process(self, request: ModelRequest) -> ScriptAnswer:
        """What a :class:`ScriptedModel` does with this fault: raise the
        :class:`~loopwise.errors.ModelAPIError` the port would (there are no SDK retries
        in-process), or return the answer after the delay."""
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.disconnect or self.crash:
            raise ModelAPIError("server unreachable (scripted disconnect)")
        if self.status >= 400:
            raise ModelAPIError(
                f"model API error: HTTP {self.status} (scripted fault)", status_code=self.status
            )
        if self.empty_choices:
            raise ModelAPIError("the model returned no choices (scripted fault)")
        if self.truncated_json or self.body is not None:
            raise ModelAPIError("model API returned malformed JSON (scripted fault)")
        return self.answer if self.answer is not None else auto_respond(request)


ScriptAnswer = Turn | str | dict[str, Any] | list[Any]
"""An answer a script gives: a turn, or text, or a dict or list sent as its JSON text."""
ScriptEntry = ScriptAnswer | Fault
"""One entry of a script: an answer, or a :class:`Fault` the server answers with instead."""
Responder = Callable[[ModelRequest], ScriptEntry]
"""A script as a function: the request in, its answer out."""


class ScriptedModel(ModelDefaults):
    """An in-process model that answers from a script; see the module docstring.

    What it was asked stays inspectable without growing with use: :attr:`calls` counts
    every request, :attr:`requests` holds the most recent ``keep`` (oldest first, a
    ``deque``), :attr:`last_request` the latest. A model shared by many runs (an
    example's module-level ``offline_model``) so keeps a bounded record.
    """

    def __init__(
        self,
        script: Iterable[ScriptEntry] | Responder | None = None,
        *,
        name: str = "scripted",
        keep: int = 100,
        decision_backends: tuple[DecisionBackend, ...] = ("decisions", "logprobs"),
    ) -> None:
        self.name = name
        self.decision_backends = decision_backends
        """How a judge asks it for probabilities: a script's dict answers either way
        (:mod:`loopwise.models.decided`)."""
        self.calls = 0
        """Requests answered (or attempted) so far."""
        self.requests: deque[ModelRequest] = deque(maxlen=keep)
        """The most recent ``keep`` requests, oldest first."""
        self._responder: Responder | None = None
        self._turns: list[ScriptEntry] | None = None
        self._used = 0  # list entries consumed, or skipped as replayed
        if callable(script):
            self._responder = script
        elif script is not None:
            self._turns = list(script)

    async def complete(self, request: ModelRequest) -> Turn:
        """Answer ``request`` from the script (recording it in :attr:`requests`); a
        :class:`Fault` entry raises the error the model port would raise."""
        entry = self.script_entry(request)
        if isinstance(entry, Fault):
            entry = await entry.in_process(request)
        if is_decision(request):
            entry = decision_turn(entry, request)
        turn = priced(as_turn(entry), request, self.name)
        if request.on_text is not None and turn.text:
            for piece in pieces(turn.text):
                request.on_text(piece)
        return turn

    @property
    def last_request(self) -> ModelRequest | None:
        """The latest request, or ``None`` before the first."""
        return self.requests[-1] if self.requests else None

    def script_entry(self, request: ModelRequest) -> ScriptEntry:
        """The raw script entry for ``request`` (the fake server also uses it, so that a
        :class:`Fault` entry reaches the server before it becomes a turn)."""
        self.calls += 1
        self.requests.append(request)
        if self._responder is not None:
            return self._responder(request)
        if self._turns is not None:
            if not self._turns:
                raise ScriptExhausted(
                    f"scripted model {self.name!r} has no turn left for call {self.calls}"
                )
            self._used += 1
            return self._turns.pop(0)
        return auto_respond(request)

    def resumed(self, replayed: Sequence[Turn]) -> None:
        """Told by ``loopwise.resume`` which model turns the run's journal replays (they
        were answered before and are never asked again).

        A list script is consumed in order. When a fresh copy of the *whole* script
        resumes the run — a target module's ``offline_model`` imported again by the
        process that resumes — it starts with those turns: they are skipped, so the next
        call gets the entry after them. A list that holds only what comes next (it does
        not start with the replayed turns) and the same object resumed in-process (it
        consumed them already) are used as they are. A responder function needs nothing:
        it answers from the request.
        """
        if self._turns is None or self._used or not replayed:
            return
        head = self._turns[: len(replayed)]
        if len(head) == len(replayed) and all(map(_same_turn, head, replayed)):
            del self._turns[: len(replayed)]
            self._used = len(replayed)


def _same_turn(entry: ScriptEntry, recorded: Turn) -> bool:
    """Whether a script entry is the turn the journal recorded (call ids aside: the agent
    renames them, and ``call()`` numbers them per process)."""
    if isinstance(entry, Fault):
        return False
    mine = as_turn(entry)
    return (mine.text or "", mine.refusal) == (recorded.text or "", recorded.refusal) and [
        (c.name, _canonical(c.arguments)) for c in mine.tool_calls
    ] == [(c.name, _canonical(c.arguments)) for c in recorded.tool_calls]


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments


def as_turn(entry: ScriptAnswer) -> Turn:
    if isinstance(entry, Turn):
        return Turn(
            text=entry.text,
            tool_calls=[
                ToolCall(id=c.id or f"call_{next(_ids)}", name=c.name, arguments=c.arguments)
                for c in entry.tool_calls
            ],
            refusal=entry.refusal,
            finish_reason=entry.finish_reason,
            input_tokens=entry.input_tokens,
            output_tokens=entry.output_tokens,
            model=entry.model,
            reasoning=list(entry.reasoning),
            response_id=entry.response_id,
            reasoning_tokens=entry.reasoning_tokens,
            cached_tokens=entry.cached_tokens,
            service_tier=entry.service_tier,
            decision=entry.decision,
            logprobs=entry.logprobs,
        )
    return reply(entry)


def pieces(text: str, parts: int = 3) -> list[str]:
    """``text`` cut into at most ``parts`` consecutive pieces, as a streamed answer arrives
    (an empty text is one empty piece)."""
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)] or [text]


def priced(turn: Turn, request: ModelRequest, name: str) -> Turn:
    if not turn.input_tokens:
        turn.input_tokens = max(1, request.prompt_chars() // 4)
    if not turn.output_tokens:
        out = len(turn.text or "") + len(turn.refusal or "")
        out += sum(len(c.arguments) + len(c.name) for c in turn.tool_calls)
        turn.output_tokens = max(1, out // 4)
    turn.model = turn.model or name
    if turn.tool_calls and turn.finish_reason == "stop":
        turn.finish_reason = "tool_calls"
    return turn


def auto_respond(request: ModelRequest) -> Turn:
    """The offline model's default answer: schema-valid JSON, or one plausible tool call
    (a judge's question: every label equally likely)."""
    if is_decision(request):
        return decision_turn(None, request)
    schema = request.output_schema or schema_of(request)
    has_results = any(m.get("role") == "tool" for m in request.messages)
    forced = _forced_tool(request)
    if forced is not None:
        tool = next(t for t in request.tools or [] if t["function"]["name"] == forced)
        return call(forced, example_from_schema(tool["function"].get("parameters", {})))
    if request.tools and not has_results and request.tool_choice != "none":
        first = request.tools[0]["function"]
        return call(first["name"], example_from_schema(first.get("parameters", {})))
    if schema is not None:
        return reply(example_from_schema(schema))
    return reply("Done (offline scripted model).")


def _forced_tool(request: ModelRequest) -> str | None:
    choice = request.tool_choice
    if isinstance(choice, dict):
        return str(choice.get("function", {}).get("name"))
    return None


def schema_of(request: ModelRequest) -> JSONObject | None:
    fmt = request.response_format or {}
    if fmt.get("type") == "json_schema":
        schema = json_object(fmt.get("json_schema")).get("schema")
    elif fmt.get("type") == "json_object":  # the schema-carrying form some servers honour
        schema = fmt.get("schema")
    else:
        return None
    return schema if isinstance(schema, dict) else None


def example_from_schema(schema: JSONMapping, root: JSONMapping | None = None) -> JSONValue:
    """A small value that satisfies ``schema`` (first enum value, minimums, required keys).

    A subschema that is no object (JSON Schema's ``true``: any value) is read as ``{}``."""
    root = root if root is not None else schema
    if "$ref" in schema:
        return example_from_schema(_resolve_ref(str(schema["$ref"]), root), root)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            variants = [json_object(s) for s in json_list(schema[key])]
            options = [s for s in variants if s.get("type") != "null"] or variants
            return example_from_schema(options[0], root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return json_list(schema["enum"])[0]
    if "default" in schema:
        return schema["default"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return _example_of_type(kind, schema, root)


def _example_of_type(kind: JSONValue, schema: JSONMapping, root: JSONMapping) -> JSONValue:
    if kind == "object" or "properties" in schema:
        props = json_object(schema.get("properties"))
        return {name: example_from_schema(json_object(sub), root) for name, sub in props.items()}
    if kind == "array":
        count = int(_number(schema, "minItems", 1))
        return [example_from_schema(json_object(schema.get("items")), root) for _ in range(count)]
    if kind == "integer":
        if "minimum" in schema:
            return int(_number(schema, "minimum", 0))
        return int(_number(schema, "exclusiveMinimum", -1) + 1)
    if kind == "number":
        return float(_number(schema, "minimum", 0.0))
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return _example_string(schema)


def _number(schema: JSONMapping, key: str, missing: float) -> float:
    """``schema[key]`` when it is a number, else ``missing``."""
    value = schema.get(key, missing)
    return value if isinstance(value, int | float) else missing


def _example_string(schema: JSONMapping) -> str:
    if "pattern" in schema:
        return _from_pattern(str(schema["pattern"]))
    text = "example"
    return text.ljust(int(_number(schema, "minLength", 0)), "x")[
        : int(_number(schema, "maxLength", 64))
    ]


def _from_pattern(pattern: str) -> str:
    """A string for the simple id patterns allow-lists use (``^C-\\d{4}$``)."""
    body = pattern.removeprefix("^").removesuffix("$")
    out = re.sub(r"\\d\{(\d+)\}", lambda m: "1" * int(m.group(1)), body)
    out = re.sub(r"\\d\+?", "1", out)
    out = out.replace("\\-", "-").replace("\\.", ".")
    return out if re.fullmatch(pattern, out) else "example"


def _resolve_ref(ref: str, root: JSONMapping) -> JSONObject:
    node = root
    for part in ref.removeprefix("#/").split("/"):
        node = json_object(node[part])
    return dict(node)
