"""Finished steps that a resumed run takes from its log instead of running them again.

Resuming continues after the last recorded event (DESIGN §7). Model turns, tool results
and gate decisions replay by their journal keys; a step that *finished* is replayed from
its ``step_finished`` event, when two things hold:

* it is entered again on the same input: the input's JSON is the one its
  ``step_started`` recorded (an output computed from another input is stale);
* its output can be restored exactly. A step that can be (:class:`Replays`) says so when
  it finishes, and only then is its ``step_finished`` given a journal key, with the steps
  and journal counters it took, so that a replay counts them once more.

Plain function steps with a declared return type replay (:class:`Restorer`); so do route
nodes whose key is a function. Anything else is entered again as before: agents,
structured calls, workflows and hybrids replay their model turns, tool results and
decisions inside, and a step that paused (no ``step_finished``) re-enters and replays its
children.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from loopwise.core.events import jsonable
from loopwise.core.journal import Journal, damaged
from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue

if TYPE_CHECKING:
    from pydantic import TypeAdapter
    from typing_extensions import TypeForm

    from loopwise.models.port import Turn

__all__ = [
    "RERUN",
    "Replayed",
    "Replays",
    "Restorer",
    "entered",
    "journaled_turn",
    "recall",
    "record",
    "replays",
    "same_json",
]


class _Rerun:
    """The type of :data:`RERUN`, its one value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RERUN"


RERUN: Final = _Rerun()
"""What :meth:`Replays.restore` answers when the output cannot be restored: run again."""

_STARTED, _FINISHED = "started", "finished"


class Replays(Protocol):
    """A step whose recorded output a resumed run may restore instead of running it
    (looked up with :func:`replays`: a runtime ``isinstance`` would cost every step)."""

    def restorable(self, output: object, recorded: JSONValue) -> bool:
        """Whether :meth:`restore` gives ``output`` back exactly from ``recorded`` (its JSON)."""
        ...

    def restore(self, input: object, recorded: JSONValue) -> object:
        """The output recorded as ``recorded`` (entered on ``input``), or :data:`RERUN`."""
        ...


class Restorer:
    """Values of one declared type, restored from what :func:`jsonable` recorded of them.

    A value restores when the type validates its JSON (pydantic) into a value that turns
    back into the same JSON; it was recorded restorable only when that value also equals
    the one the step returned. So ``Any`` (no annotation), a value ``jsonable`` wrote as
    ``str(...)`` (a dataclass, a datetime inside ``dict[str, Any]``), a tuple declared as
    ``list`` or an ``int`` declared as ``float`` are never replayed: the step runs again.
    """

    def __init__(self, declared: TypeForm[object]) -> None:
        self.declared = declared
        # Built on first use (pydantic loads then); none for Any: it says nothing to restore.
        self._unbuilt = declared is not Any
        self._adapter: TypeAdapter[object] | None = None

    def restore(self, recorded: JSONValue) -> object:
        """The value ``recorded`` stands for, or :data:`RERUN`."""
        if self._unbuilt:
            self._adapter, self._unbuilt = _adapter(self.declared), False
        if self._adapter is None:
            return RERUN
        try:
            value = self._adapter.validate_python(recorded)
            return value if same_json(jsonable(value), recorded) else RERUN
        except Exception:  # a validator that raises proves nothing: rerun
            return RERUN

    def exact(self, value: object, recorded: JSONValue) -> bool:
        """Whether ``recorded`` (``jsonable(value)``) restores to a value equal to ``value``."""
        restored = self.restore(recorded)
        try:
            return restored is not RERUN and bool(restored == value)
        except Exception:  # an == that raises (arrays) proves nothing
            return False


def _adapter(declared: TypeForm[object]) -> TypeAdapter[object] | None:
    """A pydantic ``TypeAdapter`` for ``declared`` (``None`` for a type it cannot build)."""
    from pydantic import TypeAdapter  # on first use: step.py, which imports this, stays light

    try:
        return TypeAdapter(declared)
    except Exception:
        return None


def same_json(a: object, b: object) -> bool:
    """Whether two JSON values are the same text (``1``, ``1.0`` and ``true`` differ; so
    does key order, which only makes a step run again)."""
    return _encode(a) == _encode(b)


# One encoder for every comparison: json.dumps(default=...) builds a new one each call.
_encode = json.JSONEncoder(default=str).encode


def replays(step: object) -> Replays | None:
    """``step`` when it is one that may be replayed (it has the :class:`Replays` methods)."""
    # getattr: being replayable is a capability a step has or not (a protocol's two
    # methods), not a member with a default: a step without them runs again.
    has = callable(getattr(step, "restorable", None)) and callable(getattr(step, "restore", None))
    # cast: it has both methods (checked just above), which is what Replays asks and what a
    # runtime_checkable isinstance would check, at a cost to every step.
    return cast("Replays", step) if has else None


@dataclass(frozen=True, slots=True)
class Replayed:
    """A finished step taken from the log: its output and what it took."""

    output: object
    """The restored output."""
    record: JSONObject
    """Its ``step_finished`` data (``usage``, ``steps``, ``counters``)."""


def entered(journal: Journal, path: str) -> tuple[int, str]:
    """Count one more run of the step at ``path``: its number and its ``step_started`` key."""
    n = journal.counted(path, _STARTED)
    return n, Journal.key(path, _STARTED, n)


def recall(step: object, input: object, journal: Journal, path: str, n: int) -> Replayed | None:
    """The n-th run of ``step`` at ``path`` as recorded, when it finished on this same
    ``input`` and its output restores; ``None``: run it."""
    done = journal.recall(Journal.key(path, _FINISHED, n))
    if done is None or (replayable := replays(step)) is None:
        return None
    started = journal.recall(Journal.key(path, _STARTED, n)) or {}
    if "input" not in started or not same_json(jsonable(input), started["input"]):
        return None
    output = replayable.restore(input, done.get("output"))
    return None if output is RERUN else Replayed(output, done)


def record(
    step: object,
    output: object,
    data: JSONObject,
    *,
    journal: Journal,
    path: str,
    n: int,
    steps: int,
) -> None:
    """Make ``data`` (the n-th ``step_finished`` at ``path``) a record :func:`recall`
    replays, when ``step`` can restore ``output`` from it: its key, the steps taken inside
    and the journal counters of ``path`` (a replay counts them again)."""
    replayable = replays(step)
    if replayable is not None and replayable.restorable(output, data["output"]):
        data["key"] = Journal.key(path, _FINISHED, n)
        data["steps"] = steps
        data["counters"] = journal.counters_under(path)


def journaled_turn(record: JSONMapping, *, run_id: str, key: str) -> Turn:
    """The model turn a journaled ``model_call`` record holds (its ``turn``, as
    :meth:`Turn.to_dict` wrote it), to replay on resume.

    A record that holds anything else there (a log changed or damaged at rest) raises
    :class:`~loopwise.errors.ConfigError` naming the run and the record: replayed as an
    empty turn, it would drop the calls it asked for (one a person approved) and let the
    run complete without them.
    """
    from loopwise.models.port import Turn  # on the replay path only (see Context.call_model)

    turn = record.get("turn")
    calls = turn.get("tool_calls") if isinstance(turn, dict) else None
    if not isinstance(turn, dict) or not isinstance(calls, list):
        raise damaged(run_id, key, f"a 'turn' of {_shown(turn)}")
    for call in calls:
        if not (
            isinstance(call, dict)
            and all(isinstance(call.get(part), str) for part in ("id", "name", "arguments"))
            and isinstance(call.get("server_id"), str | None)
            and set(call) <= {"id", "name", "arguments", "server_id"}
        ):
            raise damaged(run_id, key, f"a tool call of {_shown(call)}")
    try:
        return Turn.from_dict(turn)
    except (TypeError, ValueError) as e:  # a count that is no number
        raise damaged(run_id, key, f"a 'turn' that cannot be read ({e})") from e


def _shown(value: object) -> str:
    return f"{type(value).__name__} {value!r:.60}"
