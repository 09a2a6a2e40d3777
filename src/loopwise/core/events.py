"""The audit log's vocabulary: a run's :class:`Status`, the :class:`EventType` s, the
:class:`Event` itself, the streamed :class:`TextDelta` and the :class:`EventSink` that
receives them, with the timestamp and JSON helpers every event is built with: one to
write a value as JSON (:func:`jsonable`), one to read text a model or a person sent as JSON
(:func:`json_value`, with :func:`nests_deeper_than` to bound it). No pydantic, no SDK: the
CLI's ``--input`` is read through them before anything heavy is loaded.

Plain data, no event loop: the store and the CLI's store verbs read events through this
module without loading the run machinery (:mod:`loopwise.core.step`).
"""

from __future__ import annotations

import enum
import json
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, Literal, NoReturn, Protocol, overload

from loopwise.core.jsontypes import JSONObject, JSONRecord, JSONValue

__all__ = [
    "LIVE",
    "Event",
    "EventSink",
    "EventType",
    "SinkDefaults",
    "SinkMember",
    "Status",
    "TextDelta",
    "json_value",
    "jsonable",
    "nests_deeper_than",
    "now_iso",
    "sink_member",
    "sink_methods",
]


class Status(enum.StrEnum):
    """How a run ended: one closed set for every architecture."""

    COMPLETED = "completed"
    STEP_LIMIT = "step_limit"
    BUDGET_EXCEEDED = "budget_exceeded"
    TOOL_FAILED = "tool_failed"
    STUCK = "stuck"
    INVALID_OUTPUT = "invalid_output"
    REFUSED = "refused"
    AWAITING_APPROVAL = "awaiting_approval"
    DENIED = "denied"
    ERROR = "error"
    CANCELLED = "cancelled"


class EventType(enum.StrEnum):
    """The event types of the audit log (DESIGN §11)."""

    RUN_STARTED = "run_started"
    STEP_STARTED = "step_started"
    STEP_FINISHED = "step_finished"
    MODEL_CALL = "model_call"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    GATE_REQUESTED = "gate_requested"
    GATE_DECIDED = "gate_decided"
    RUN_PAUSED = "run_paused"
    RUN_RESUMED = "run_resumed"
    RUN_FINISHED = "run_finished"


LIVE = "live"
"""The key of a ``step_finished`` event's data that makes it a live case: a shadow's pair
of outputs or a person's decision as a label, kept by the run store
(:class:`~loopwise.store.base.LiveCase`) once per run and journal key."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """One entry of a run's ordered event log."""

    seq: int
    """Position in the run, from 1, gap-free."""
    type: EventType
    """What happened."""
    step: str
    """The path of the step it happened in (``triage/classify``)."""
    at: str
    """ISO-8601 UTC timestamp."""
    data: JSONRecord
    """Type-specific fields, as JSON (the fields of each type: the table in
    ``docs/guides/watching.md#the-events``). Typed for reading as the guides do
    (``event.data["output"]["side"]``): what a step returned or a tool was called with
    has the shape of the user's own values, which no one type names."""

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict."""
        return {
            "seq": self.seq,
            "type": str(self.type),
            "step": self.step,
            "at": self.at,
            "data": self.data,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    """A piece of a model's answer as it streams in (a run with ``stream=True``).

    Ephemeral: handed to sinks that have a ``text`` method and yielded by
    ``loopwise.astream``, never stored, so it has no ``seq``. The ``model_call`` event
    that follows holds the whole answer, the same as without streaming.
    """

    type: ClassVar[str] = "text_delta"
    step: str
    """The path of the step whose model call it belongs to."""
    key: str
    """The journal key of that model call (its ``model_call`` event's ``key``)."""
    text: str
    """The new piece of text."""


class EventSink(Protocol):
    """Receives every event of a run as it happens (the store, a tracer, a test).

    A sink may also have ``text(run_id, delta)``: it then receives each
    :class:`TextDelta` of a streamed run (``stream=True``) as well; and ``async pace()``,
    which the run awaits before each step and model call: a sink that cannot keep up
    (``loopwise.astream``'s slow consumer) holds the run there until it can; and
    ``async before_effect()``, awaited before each ``write``/``irreversible`` tool starts:
    a stream holds the run there until its consumer has dealt with every event before it.
    """

    def record(self, run_id: str, event: Event) -> None:
        """Persist or forward ``event``; raise only when the event is lost."""
        ...


class SinkDefaults:
    """The optional members of :class:`EventSink`, declared with their defaults (``None``:
    the sink does not take part). A base class, not part of the protocol: the library's
    sinks inherit it and override what they do; a user's sink with ``record()`` alone is
    still a sink, and :func:`sink_member` gives it these defaults.

    - ``record_many(run_id, events)``: a batch of events written at once (else ``record``
      per event);
    - ``text(run_id, delta)``: each :class:`TextDelta` of a streamed run;
    - ``async pace()``: awaited before each step and model call (back-pressure);
    - ``async before_effect()``: awaited before each ``write``/``irreversible`` tool starts.
    """

    __slots__ = ()

    record_many: Callable[[str, list[Event]], None] | None = None
    text: Callable[[str, TextDelta], None] | None = None
    pace: Callable[[], Awaitable[None]] | None = None
    before_effect: Callable[[], Awaitable[None]] | None = None


SinkMember = Literal["record_many", "text", "pace", "before_effect"]
"""The optional members of an event sink (what :func:`sink_member` reads)."""


@overload
def sink_member(
    sink: object, name: Literal["record_many"]
) -> Callable[[str, list[Event]], None] | None: ...
@overload
def sink_member(sink: object, name: Literal["text"]) -> Callable[[str, TextDelta], None] | None: ...
@overload
def sink_member(
    sink: object, name: Literal["pace", "before_effect"]
) -> Callable[[], Awaitable[None]] | None: ...
def sink_member(sink: object, name: SinkMember) -> Callable[..., object] | None:
    """``sink``'s optional member ``name`` when it has one that can be called, else ``None``
    (:class:`SinkDefaults`, which declares each one's signature): the one place the library
    looks up a member a sink may lack."""
    # getattr: a sink is the user's own object; these members are optional (SinkDefaults).
    member = getattr(sink, name, None)
    return member if callable(member) else None


def sink_methods(
    sinks: Sequence[EventSink], name: Literal["pace", "before_effect"]
) -> tuple[Callable[[], Awaitable[None]], ...]:
    """The sinks' ``name`` methods, for those that have one (:func:`sink_member`)."""
    return tuple(m for s in sinks if (m := sink_member(s, name)) is not None)


_STAMP: list[tuple[int, str]] = [(-1, "")]


def now_iso() -> str:
    """What ``datetime.now(UTC).isoformat()`` gives; every event takes one.

    The date and time to the second are formatted once per second, not once per event;
    the microseconds are appended (omitted when zero, as ``isoformat`` does).
    """
    second, nanos = divmod(time.time_ns(), 1_000_000_000)
    cached, prefix = _STAMP[0]
    if second != cached:
        prefix = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _STAMP[0] = (second, prefix)  # one tuple: a reader in another thread sees a pair
    micros = nanos // 1000
    return f"{prefix}.{micros:06d}+00:00" if micros else f"{prefix}+00:00"


class _Dumps(Protocol):
    """A pydantic model, as :func:`jsonable` sees it (core loads without pydantic): its
    ``model_dump`` gives a dict, as pydantic types it."""

    def model_dump(self, *, mode: str) -> dict[str, object]: ...


@overload
def jsonable(value: dict[str, object] | JSONObject | _Dumps) -> JSONObject: ...
@overload
def jsonable(value: object) -> JSONValue: ...
def jsonable(value: object) -> JSONValue:
    """``value`` in a JSON-ready form (pydantic models dumped, the rest by ``str``); a dict
    comes back a JSON object."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    # getattr: a pydantic model, known by its method, so that core loads without pydantic.
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        dumped: JSONValue = dump(mode="json")  # what model_dump(mode="json") promises
        return dumped
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        member: object = value.value
        return jsonable(member)
    return str(value)


def json_value(text: str) -> JSONValue:
    """``text`` read as JSON as RFC 8259 defines it, for text a model or a person sent.

    Python's parser also reads ``NaN``, ``Infinity`` and numbers too large for a float
    (``1e999``) as non-finite floats; those slip past checks such as ``amount > 100`` (a
    NaN compares false both ways) and make a stored log that is no longer JSON. Raises
    ``json.JSONDecodeError`` for them as for any other text that is not JSON.
    """

    def refuse(token: str) -> NoReturn:
        message = f"{token} is not a finite number"
        raise json.JSONDecodeError(message, text, max(text.find(token), 0))

    def finite(token: str) -> float:
        value = float(token)
        return value if math.isfinite(value) else refuse(token)

    parsed: JSONValue = json.loads(text, parse_constant=refuse, parse_float=finite)
    return parsed


def nests_deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` holds an object or array more than ``limit`` levels deep, found
    without recursion (so any depth is safe to ask about)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children: Iterable[object]
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if level > limit:
            return True
        stack.extend((child, level + 1) for child in children)
    return False
