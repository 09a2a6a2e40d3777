"""The model port's contract: the :class:`Model` protocol and the values that cross it.

A model is anything with ``name`` and ``async complete(request) -> Turn``. This module
holds only that contract (no SDK import), so the scripted model, the cassette and the
core can build requests and turns without loading the ``openai`` client;
:mod:`loopwise.models.openai` adapts it to Chat Completions.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, cast, get_args, overload, runtime_checkable

from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue

__all__ = [
    "APIS",
    "DECISION_BACKENDS",
    "STRUCTURED_MODES",
    "DecisionBackend",
    "Message",
    "Model",
    "ModelDefaults",
    "ModelMember",
    "ModelRequest",
    "StructuredMode",
    "ToolCall",
    "ToolResult",
    "Turn",
    "arguments_text",
    "decision_backends",
    "message_chars",
    "model_member",
    "model_name",
    "server_calls",
    "server_ids",
    "wire_messages",
]

Message = dict[str, Any]
"""A Chat Completions message (``{"role": ..., "content": ...}``)."""

StructuredMode = Literal["json_schema", "json_object_schema", "json_object", "tool", "prompt"]
"""A rung of the structured-output ladder (see :mod:`loopwise.architectures.structured`)."""

STRUCTURED_MODES: tuple[StructuredMode, ...] = (
    "json_schema",
    "json_object_schema",
    "json_object",
    "tool",
    "prompt",
)
"""The structured-output modes, strongest first: the ladder a structured call walks down."""


APIS: tuple[str, ...] = ("chat", "responses")
"""The OpenAI APIs a model speaks: Chat Completions (the default) and Responses."""

DecisionBackend = Literal["decisions", "logprobs", "structured"]
"""How a judge (:mod:`loopwise.architectures.judge`) gets its probabilities from a model:
the Decisions API, Chat Completions log-probabilities, or a structured answer whose
confidence is unknown."""

DECISION_BACKENDS: tuple[DecisionBackend, ...] = ("decisions", "logprobs", "structured")
"""The decision backends, the ones that give probabilities first."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """One tool call the model asked for, arguments still raw."""

    id: str
    """The call id a ``tool`` message must answer."""
    name: str
    """The tool name as the model wrote it (it may not exist)."""
    arguments: str
    """The raw argument string (it may not be JSON)."""
    server_id: str | None = None
    """The id the server gave this call when ``id`` is loopwise's own (the server's
    repeated, was missing its place in a turn, or could not key a journal): requests
    send this one back, as the server knows no other. ``None``: ``id`` is the server's."""

    @property
    def wire_id(self) -> str:
        """The id a request names this call by: the server's."""
        return self.server_id or self.id


@dataclass(kw_only=True, slots=True)
class Turn:
    """One assistant turn: text or tool calls, plus why it stopped and what it cost."""

    text: str | None = None
    """The assistant's text, if any."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Tool calls, in the order the model gave them."""
    refusal: str | None = None
    """The model's refusal message, when it declined."""
    finish_reason: str = "stop"
    """``stop``, ``tool_calls``, ``length``, ``content_filter``..."""
    input_tokens: int = 0
    """Prompt tokens of this call."""
    output_tokens: int = 0
    """Completion tokens of this call."""
    model: str = ""
    """The model name that answered."""
    reasoning: list[JSONObject] = field(default_factory=list)
    """The reasoning items a Responses model gave with this turn, as the server sent them
    (opaque, encrypted when nothing is stored server-side): sent back before the turn's
    output on every later call, so the model keeps its reasoning across turns."""
    response_id: str | None = None
    """The Responses API's id of this turn (what ``previous_response_id`` chains to)."""
    stored: bool | None = None
    """Whether the server keeps this turn (it was sent with ``store=True``), so a later call
    may chain to it; ``None``: unknown (a turn journaled before loopwise recorded it)."""
    resent: str | None = None
    """Why this call sent the whole transcript where it would have chained to a stored
    response (the server refused it, or never stored the earlier turns); ``None`` when it
    did not have to. Journaled with the turn (``model_call.data.turn.resent``)."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those the model spent reasoning."""
    cached_tokens: int = 0
    """Of ``input_tokens``, those the server read from its prompt cache."""
    service_tier: str | None = None
    """The tier the server says it served the call on (``flex``, ``default``...), when
    it says: what the call is priced at."""
    decision: list[JSONObject] | None = None
    """A Decisions API answer: its ``answers`` in question order, as the wire has them."""
    logprobs: list[dict[str, float]] | None = None
    """Per output token (in order), the log-probability of each top alternative, when
    the request asked for them (``top_logprobs``) and the server sent them."""

    @property
    def cut_off(self) -> str | None:
        """What went wrong when the server stopped this turn at its output-token limit
        (Chat Completions' ``finish_reason="length"``, a Responses answer ``incomplete``
        for ``max_output_tokens``): its text or call is cut short, so it is no answer.
        ``None`` for any other stop."""
        if self.finish_reason != "length":
            return None
        # At a length stop the tokens written are the tokens allowed.
        allowed = f"{self.output_tokens:,} tokens" if self.output_tokens else "the server's limit"
        what = "a tool call" if self.tool_calls else "the answer"
        return (
            f"{what} was cut off at the output-token limit ({allowed} allowed, reasoning "
            "included) and is not taken: allow the model more output tokens"
        )

    def to_message(self) -> Message:
        """This turn as the assistant message to append to a transcript."""
        # `content` is always a string: OpenAI accepts "" beside tool calls (content is
        # "required unless tool_calls is specified", a string or null), while
        # llama-cpp-python's chat templates fail on a missing or null content (HTTP 500).
        message: Message = {"role": "assistant", "content": self.text or ""}
        if self.tool_calls:
            message["tool_calls"] = [_call_message(call) for call in self.tool_calls]
        if self.refusal:
            message["refusal"] = self.refusal
        if self.reasoning:
            message["reasoning_items"] = self.reasoning
        if self.response_id and self.stored is not False:
            # Only a turn the server keeps can be chained to (see ``stored``).
            message["response_id"] = self.response_id
        return message

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what the store journals for replay)."""
        return {
            "text": self.text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments}
                | ({"server_id": c.server_id} if c.server_id else {})
                for c in self.tool_calls
            ],
            "refusal": self.refusal,
            "finish_reason": self.finish_reason,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model": self.model,
            # Only what a Responses turn has: a Chat Completions journal stays as it was.
            **({"reasoning": self.reasoning} if self.reasoning else {}),
            **({"response_id": self.response_id} if self.response_id else {}),
            **({"stored": self.stored} if self.response_id and self.stored is not None else {}),
            **({"resent": self.resent} if self.resent else {}),
            **({"reasoning_tokens": self.reasoning_tokens} if self.reasoning_tokens else {}),
            **({"cached_tokens": self.cached_tokens} if self.cached_tokens else {}),
            **({"service_tier": self.service_tier} if self.service_tier else {}),
            **({"decision": self.decision} if self.decision is not None else {}),
            **({"logprobs": self.logprobs} if self.logprobs is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        """The inverse of :meth:`to_dict`."""
        return cls(
            text=data.get("text"),
            tool_calls=[ToolCall(**c) for c in data.get("tool_calls", [])],
            refusal=data.get("refusal"),
            finish_reason=data.get("finish_reason", "stop"),
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            model=data.get("model", ""),
            reasoning=list(data.get("reasoning") or []),
            response_id=data.get("response_id"),
            stored=data.get("stored"),
            resent=data.get("resent"),
            reasoning_tokens=int(data.get("reasoning_tokens", 0)),
            cached_tokens=int(data.get("cached_tokens", 0)),
            service_tier=data.get("service_tier"),
            decision=data.get("decision"),
            logprobs=data.get("logprobs"),
        )


def _call_message(call: ToolCall) -> JSONObject:
    """A tool call as a transcript holds it: loopwise's id, and the server's beside it
    when they differ (see :func:`wire_messages`)."""
    said: JSONObject = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if call.server_id:
        said["server_id"] = call.server_id
    return said


def server_ids(message: Message) -> dict[str, str]:
    """An assistant message's calls renamed by loopwise: loopwise's id → the server's."""
    return {c["id"]: c["server_id"] for c in message.get("tool_calls") or () if c.get("server_id")}


def wire_messages(messages: list[Message]) -> list[Message]:
    """``messages`` as a server must read them: every call and every tool result under the
    id the server gave the call (kept as ``server_id`` where loopwise renamed it), never a
    renamed one. The same list when nothing was renamed (the common case costs a scan)."""
    if not any("server_id" in c for m in messages for c in m.get("tool_calls") or ()):
        return messages
    wired: list[Message] = []
    renamed: dict[str, str] = {}
    for message in messages:
        if message.get("tool_calls"):
            renamed = server_ids(message)
            calls = [
                {k: v for k, v in c.items() if k != "server_id"}
                | ({"id": c["server_id"]} if c.get("server_id") else {})
                for c in message["tool_calls"]
            ]
            wired.append({**message, "tool_calls": calls})
        elif message.get("role") == "tool" and message.get("tool_call_id") in renamed:
            wired.append({**message, "tool_call_id": renamed[message["tool_call_id"]]})
        else:
            wired.append(message)
    return wired


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    """One tool call of a transcript and what came back (:meth:`ModelRequest.tool_results`)."""

    call_id: str
    """The call's id."""
    name: str
    """The tool the model called."""
    args: JSONObject
    """Its arguments (``{}`` when the model's argument string was not a JSON object)."""
    content: str
    """What the model read back: the tool's result as text, or ``ERROR: ...``."""

    @property
    def is_error(self) -> bool:
        """Whether the call failed (invalid arguments, the tool raised, denied, ...)."""
        return self.content.startswith("ERROR")

    @property
    def value(self) -> Any:
        """The result parsed as JSON when it is JSON (a tool's dict or list), else the text."""
        try:
            return json.loads(self.content)
        except ValueError:
            return self.content


def _matches(given: JSONMapping, wanted: Mapping[str, object]) -> bool:
    return all(k in given and given[k] == v for k, v in wanted.items())


def _json_args(raw: str) -> JSONObject:
    try:
        args: JSONValue = json.loads(raw or "{}")
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


@dataclass(kw_only=True, slots=True)
class ModelRequest:
    """What one model call sends."""

    messages: list[Message]
    """The transcript so far."""
    tools: list[dict[str, Any]] | None = None
    """Tool schemas in Chat Completions form."""
    tool_choice: str | dict[str, Any] | None = None
    """``auto``, ``required``, ``none`` or a forced function."""
    response_format: JSONObject | None = None
    """A ``json_schema`` or ``json_object`` response format."""
    output_schema: JSONObject | None = None
    """The JSON schema the answer must satisfy, whatever the mode (scripted models use it)."""
    temperature: float | None = None
    """Sampling temperature; ``None`` leaves the server's default."""
    max_output_tokens: int | None = None
    """A cap on completion tokens for this call."""
    top_logprobs: int | None = None
    """Ask for the log-probabilities of this many alternatives per output token
    (``logprobs``/``top_logprobs``); a judge reads them off its one-token answer."""
    decision: dict[str, Any] | None = None
    """A Decisions API request (``input`` and ``questions``, without ``model``): sent to
    ``/decisions`` instead of Chat Completions; the answer is :attr:`Turn.decision`."""
    labels: dict[str, str] | None = None
    """For a log-probability question: answer token → the label it stands for. Not sent
    (the prompt lists them); scripted models use it to answer with probabilities."""
    on_text: Callable[[str], None] | None = None
    """Stream the answer: called with each piece of its text as it arrives. Not sent; the
    turn is the same as without it, and a model that cannot stream ignores it."""
    known_chars: int | None = None
    """The messages' size (:func:`message_chars` summed) when the sender keeps it up to
    date already (an agent under a context policy does); ``None``: measured here."""
    safety_identifier: str | None = None
    """The run's end user, as the caller named them (``loopwise.run(...,
    safety_identifier=...)``): sent as OpenAI's ``safety_identifier``, never derived from
    the content."""
    deps: Any = None
    """The run's dependencies (``ctx.deps``), for in-process models such as an offline
    ``ScriptedModel`` responder; in a run without deps, reading from them ends the run
    ``error`` saying how to give them. Never sent."""

    def user_text(self) -> str:
        """The text of the latest user message (``""`` when there is none): the input of
        an agent, a structured call or a planner, for an offline model to answer from."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return str(message.get("content") or "")
        return ""

    def tool_results(self, name: str | None = None) -> list[ToolResult]:
        """Every answered tool call in the transcript, oldest first (only ``name``'s when
        given): each call's tool, arguments and the text the model read back."""
        asked = {call_id: (tool, args) for call_id, tool, args in self._calls()}
        found = []
        for m in self.messages:
            if m.get("role") != "tool" or m.get("tool_call_id") not in asked:
                continue
            tool, args = asked[m["tool_call_id"]]
            if name is None or tool == name:
                content = str(m.get("content") or "")
                found.append(
                    ToolResult(call_id=m["tool_call_id"], name=tool, args=args, content=content)
                )
        return found

    def last_result(self, name: str, **args: object) -> ToolResult | None:
        """The latest answered call of tool ``name`` (with these arguments, when given), or
        ``None`` when there is none: ``request.last_result("get_order").value``."""
        for result in reversed(self.tool_results(name)):
            if _matches(result.args, args):
                return result
        return None

    def called(self, name: str, **args: object) -> bool:
        """Whether the model has called tool ``name`` (with these arguments, when given)
        in this transcript, answered or not."""
        return any(tool == name and _matches(given, args) for _, tool, given in self._calls())

    def _calls(self) -> Iterator[tuple[str, str, JSONObject]]:
        """``(call id, tool, arguments)`` of every call the model asked for, in order."""
        for message in self.messages:
            for c in message.get("tool_calls") or ():
                fn = c["function"]
                yield c["id"], fn["name"], _json_args(fn.get("arguments") or "")

    def prompt_chars(self) -> int:
        """Characters in the messages and tool schemas (for a cheap token estimate).

        Incremental: a run's requests share their transcript's message objects, so the
        size of the longest prefix already measured is reused (checked by identity, at
        C speed) and only the new messages are measured.
        """
        known = self.known_chars
        size = _SIZES.messages(self.messages) if known is None else known
        if self.tools:
            size += _SIZES.tools(self.tools)
        return size


def arguments_text(arguments: object) -> str:
    """Tool arguments as the raw string the port promises; some servers send a JSON object."""
    if arguments is None:
        return ""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def server_calls(raw: list[tuple[str | None, str, str]]) -> list[ToolCall]:
    """A turn's calls from the server's ``(id, name, arguments)``, each id as sent except
    a missing or repeated one, which gets a fresh id (the server's kept as
    :attr:`ToolCall.server_id`).

    Some compatible servers send no ids or the same one for every call of a turn; results
    are bound to calls (and journaled, and gated) by id, so each must be unique. The turn
    is journaled with these ids, so a resumed run sees the same ones.
    """
    seen: set[str] = set()
    calls = []
    for given, name, arguments in raw:
        chosen = given if given and given not in seen else f"call_{uuid.uuid4().hex[:16]}"
        seen.add(chosen)
        server = given if given and given != chosen else None
        calls.append(ToolCall(id=chosen, name=name, arguments=arguments, server_id=server))
    return calls


def message_chars(message: Message) -> int:
    """The characters of ``message`` that the prompt-size estimate counts."""
    size = len(str(message.get("content") or ""))
    for call in message.get("tool_calls") or ():
        size += len(call["function"]["arguments"]) + len(call["function"]["name"])
    return size


_Kept = TypeVar("_Kept")


class _PromptSizes:
    """Remembered prompt sizes, so a long run measures each message once, not every call.

    Keyed by the identity of a transcript's first message (one per run) and of a tool
    list; each entry keeps the objects it measured, so an identity cannot be reused
    while it is remembered. Bounded: the oldest entries go first.
    """

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._prefixes: dict[int, tuple[list[Message], int]] = {}
        self._tools: dict[int, tuple[list[dict[str, Any]], int]] = {}

    def messages(self, messages: list[Message]) -> int:
        if not messages:
            return 0
        key = id(messages[0])
        known = self._prefixes.get(key)
        start, size = 0, 0
        if known is not None:
            prefix, prefix_size = known
            # Identical objects compare equal without a look inside: a C-speed check.
            k = len(prefix)
            if k <= len(messages) and prefix[0] is messages[0] and messages[:k] == prefix:
                start, size = k, prefix_size
        size += sum(message_chars(m) for m in messages[start:])
        self._remember(self._prefixes, key, (list(messages), size))
        return size

    def tools(self, tools: list[dict[str, Any]]) -> int:
        known = self._tools.get(id(tools))
        if known is not None and known[0] is tools:
            return known[1]
        size = len(json.dumps(tools))
        self._remember(self._tools, id(tools), (tools, size))
        return size

    def _remember(self, table: dict[int, _Kept], key: int, value: _Kept) -> None:
        # The fake server prices turns on its own thread: evicting must not race an insert.
        with self._lock:
            table.pop(key, None)
            table[key] = value
            if len(table) > self.limit:
                del table[next(iter(table))]


_SIZES = _PromptSizes()


def decision_backends(model: object) -> tuple[DecisionBackend, ...]:
    """The decision backends ``model`` offers, best first (its ``decision_backends``).

    A model that does not say offers only ``structured``: an answer with no
    probabilities, whose confidence a cascade treats as unknown — never as sure.
    """
    declared = model_member(model, "decision_backends")
    if not declared:
        return ("structured",)
    return tuple(b for b in declared if b in DECISION_BACKENDS)


@runtime_checkable
class Model(Protocol):
    """The model port: ``name`` and one async call."""

    name: str

    async def complete(self, request: ModelRequest) -> Turn:
        """Send ``request``; return the assistant turn. Raises :class:`ModelAPIError`."""
        ...


ModelMember = Literal[
    "endpoint", "structured_mode", "structured_modes", "decision_backends", "aclose", "speaks"
]
"""The optional members of a model (what :func:`model_member` reads)."""


class ModelDefaults:
    """The optional members of :class:`Model`, declared with their defaults.

    A base class, not part of the protocol: the library's models inherit it (and override
    what they have), and any object with ``name`` and ``async complete`` is still a model
    (:func:`model_member` gives it these defaults).
    """

    __slots__ = ()

    structured_mode: StructuredMode | None = None
    """The structured-output rung every call starts at (``None``: the top of the ladder)."""
    structured_modes: dict[tuple[str, str], StructuredMode] | None = None
    """The rung each endpoint was found to take (``None``: a structured call adds it)."""
    decision_backends: tuple[DecisionBackend, ...] = ()
    """The ways a judge may ask for probabilities (none: a structured answer only)."""

    @property
    def endpoint(self) -> tuple[str, str] | None:
        """``(base URL, model name)``, the key of what is remembered per server (``None``:
        the model's name alone)."""
        return None

    @property
    def speaks(self) -> JSONObject | None:
        """What a run records of how this model talks to its server, so a resume talks the
        same way: ``{"api": "responses", "api_store": True}`` (``None``: one way only)."""
        return None

    async def aclose(self) -> None:
        """Release the model's connections (it reopens them on its next use)."""


def model_name(model: object) -> str | None:
    """The name of a run's model object (``name`` is the port's one required attribute);
    ``None`` when there is none, or the model is still a name for ``resolve_model``."""
    return None if model is None or isinstance(model, str) else str(cast("Model", model).name)


# getattr: the defaults, read once from the one place they are declared.
_DEFAULTS: dict[str, object] = {
    name: getattr(ModelDefaults(), name) for name in get_args(ModelMember)
}


@overload
def model_member(model: object, name: Literal["endpoint"]) -> tuple[str, str] | None: ...
@overload
def model_member(model: object, name: Literal["structured_mode"]) -> StructuredMode | None: ...
@overload
def model_member(
    model: object, name: Literal["structured_modes"]
) -> dict[tuple[str, str], StructuredMode] | None: ...
@overload
def model_member(
    model: object, name: Literal["decision_backends"]
) -> tuple[DecisionBackend, ...]: ...
@overload
def model_member(model: object, name: Literal["aclose"]) -> Callable[[], Awaitable[None]]: ...
@overload
def model_member(model: object, name: Literal["speaks"]) -> JSONObject | None: ...
def model_member(model: object, name: ModelMember) -> object:
    """``model``'s optional member ``name``, or its declared default (:class:`ModelDefaults`)
    when the model does not have it (a user's own model)."""
    # getattr: the one read of a member a model may lack; what it stands for when it is
    # missing is declared once, on ModelDefaults.
    return getattr(model, name, _DEFAULTS[name])
