"""The run's journal: the only place replay keys are built, recalled and counted.

A run records what it must not do twice — model turns, tool results, gate requests and
decisions, accepted plans — as events that carry a journal ``key``. A resumed run gets
those events back (:attr:`Journal.recorded`) and recalls them by key instead of calling
the model, running the tool or asking the person again. Keys are deterministic: the step
path, a kind, and either the caller's own id (a tool call's id) or a counter of how
often that kind was keyed at that path (:meth:`Journal.counted`), so a resumed run
derives the same keys in the same order.

**Keys are unambiguous by construction.** The parts of a key are ids a model, its server
or a user chose, so they are never joined as they are: each part is escaped
(:func:`escape`: ``%``, ``:`` and what a store cannot hold — control characters, lone
surrogates — become ``%XX``) and the escaped parts are joined with ``:``, so one key is
spelled by one sequence of parts only. An id made of letters, digits and ``._@~/-`` is
its own escape: such keys read (and are stored) exactly as older versions wrote them.
The ids that bind a call's approval and idempotency key (:meth:`Journal.bound`,
:meth:`Journal.idempotency_key`) are built the same way: the approval id a person types
is the escaped call id, after the step path of a nested step (``outer/helper/inner/c1``;
a ``/`` in a call id is ``%2F``, so no call id spells another step's).

The journal is owned by the run's :class:`~loopwise.core.step.Context` and shared by every
nested context of the run. Besides keys it keeps two facts about the run that safety
rests on and that survive a resume because they are read from the log:

* **taint** — the first result of a tool declared ``untrusted_output`` that reached the
  model (:attr:`Journal.taint`);
* **effects** — which ``(tool, canonical arguments)`` pairs already took effect
  (:meth:`Journal.effect`), so a pair never takes effect twice in one run.

Nothing outside this module builds, parses or counts keys.

**A damaged record stops the resume.** What a replay acts on (a model turn, the counters a
finished step took) is read strictly: a stored record that holds something else there (a
log edited or damaged at rest) raises :class:`~loopwise.errors.ConfigError` naming the run
(``name``) and the record (:func:`damaged`), as a resume that does not match its journal
does, so it raises through every step (a workflow node does not make it an ``error``
status), instead of replaying as an empty turn that would drop a
call a person approved, or as uncounted keys that would hand a later call an earlier
one's recorded result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from loopwise.core.events import Event
from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.errors import ConfigError

__all__ = ["Journal", "damaged", "escape"]

_TOOL_RESULT = "tool_result"
_CALL = "call"


def _needs_escape(ch: str, extra: str) -> bool:
    code = ord(ch)
    return ch in extra or ch == "%" or code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF


def escape(part: object, *, also: str = ":") -> str:
    """``part`` as text in which ``%``, the characters of ``also`` (the separator, ``:``),
    control characters and lone surrogates are ``%XX`` (UTF-8 bytes, surrogates kept):
    one text per part, and text every store can hold."""
    text = str(part)
    if not any(_needs_escape(ch, also) for ch in text):
        return text
    out = []
    for ch in text:
        if _needs_escape(ch, also):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            out.append(ch)
    return "".join(out)


def _unescape(text: str) -> str:
    if "%" not in text:
        return text
    raw = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "%":
            raw += bytes.fromhex(text[i + 1 : i + 3])
            i += 3
        else:
            raw += text[i].encode("utf-8", "surrogatepass")
            i += 1
    return raw.decode("utf-8", "surrogatepass")


class Journal:
    """Keys, replay look-ups and counters of one run (see the module docs)."""

    __slots__ = ("_counters", "_effects", "_recorded", "_taint", "_under")

    def __init__(self, recorded: Mapping[str, JSONObject] | None = None) -> None:
        self._recorded: dict[str, JSONObject] = dict(recorded or {})
        self._counters: dict[str, int] = {}
        self._under: dict[str, list[str]] = {}
        self._taint: str | None = None
        self._effects: dict[str, JSONObject] = {}

    @staticmethod
    def key(path: str, kind: str, *parts: object) -> str:
        """The key of a record identified by the caller (``path:kind:part...``, each part
        escaped: see the module docs)."""
        return ":".join(escape(p) for p in (path, kind, *parts))

    @staticmethod
    def call_key(result_key: str) -> str:
        """The key of a call's ``tool_call`` event, given its result's key (one more part:
        no escaped call id ends in it)."""
        return f"{result_key}:{_CALL}"

    @staticmethod
    def bound(scope: str, call_id: str) -> str:
        """The id that binds a call's approval and idempotency key: ``call_id`` escaped
        (``/`` too), after ``scope`` (a nested step's path) and a ``/`` when there is one."""
        own = escape(call_id, also=":/")
        return f"{scope}/{own}" if scope else own

    @staticmethod
    def idempotency_key(run_id: str, bind_id: str) -> str:
        """What a ``write``/``irreversible`` tool receives as ``ctx.idempotency_key``:
        ``run_id:bind_id`` with the run id escaped (it holds no ``:``, so the first one
        ends it): no other run and call spell it."""
        return f"{escape(run_id)}:{bind_id}"

    def counted(self, path: str, kind: str) -> int:
        """How many times ``kind`` was keyed at ``path`` in this run, this one included."""
        base = self.key(path, kind)
        n = self._counters.get(base, 0) + 1
        if n == 1:
            self._file(path, base)
        self._counters[base] = n
        return n

    def _file(self, path: str, base: str) -> None:
        """File a new counter under ``path`` and every path above it, so that
        :meth:`counters_under` (asked at every replayable step's end) reads only its own."""
        while True:
            self._under.setdefault(path, []).append(base)
            path, slash, _ = path.rpartition("/")
            if not slash:
                return

    def next_key(self, path: str, kind: str) -> str:
        """A counted key: ``path:kind:n`` for the n-th record of ``kind`` at ``path``."""
        return self.key(path, kind, self.counted(path, kind))

    def recall(self, key: str) -> JSONObject | None:
        """What was recorded under ``key`` (by an earlier process or this one), or ``None``."""
        return self._recorded.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._recorded

    def note(self, kind: str, data: JSONObject) -> None:
        """Take in one event as it is logged (or restored from the store on resume)."""
        key = data.get("key")
        if key is not None:
            self._recorded[str(key)] = data
        if kind == _TOOL_RESULT:
            self._note_result(data)

    def observe(self, events: Iterable[Event]) -> None:
        """Take in a stored log (resume): its keys, its taint and its effects."""
        for event in events:
            self.note(str(event.type), event.data)

    def _note_result(self, data: JSONObject) -> None:
        if self._taint is None and data.get("untrusted"):
            self._taint = f"{data.get('tool')} ({data.get('call_id')})"
        done = data.get("took_effect")
        if done is not None:
            self._effects.setdefault(str(done), data)

    def inherit_taint(self, source: str | None) -> None:
        """Start tainted by ``source``: untrusted text that reached the model before this
        run (an earlier run of its conversation) is in its transcript too."""
        if self._taint is None and source is not None:
            self._taint = source

    @property
    def taint(self) -> str | None:
        """The first untrusted output that reached the model (``tool (call id)``), if any."""
        return self._taint

    def effect(self, effect_id: str) -> JSONObject | None:
        """The recorded result of the call that took effect as ``effect_id``, if one did."""
        return self._effects.get(effect_id)

    def counters_under(self, path: str) -> JSONObject:
        """The counters of ``path`` and every path below it.

        Recorded with a result that stands for a nested step (a step used as a tool):
        a resumed run replays the result without running the step, and must still count
        its keys, or the next run of that step would take this one's keys.
        """
        return {base: self._counters[base] for base in self._under.get(path, ())}

    def advance(self, counters: JSONValue, *, run_id: str, record: str) -> None:
        """Count again what :meth:`counters_under` recorded (never counting back); none
        recorded (a log from before they were) counts nothing. Counters that are not an
        object of whole counts raise :func:`damaged` (``record``: the key they came with)."""
        if counters is None:
            return
        if not isinstance(counters, dict) or not all(
            type(n) is int and n >= 0 for n in counters.values()
        ):
            raise damaged(run_id, record, f"counters that are not whole counts ({counters!r:.80})")
        for base, n in counters.items():
            assert isinstance(n, int)  # checked above
            if base not in self._counters:
                self._file(_unescape(base.rpartition(":")[0]), base)
            self._counters[base] = max(self._counters.get(base, 0), n)


def damaged(run_id: str, record: str, holds: str) -> ConfigError:
    """The error of a journaled record a resume cannot replay: the log of ``run_id`` holds
    ``holds`` in ``record`` (its key), which loopwise never writes there."""
    return ConfigError(
        f"run {run_id!r}: its log's record {record!r} holds {holds}, which loopwise never "
        "writes: the log was changed or damaged at rest, so the run is not resumed from it "
        "(restore the store from a backup, or start the run again)",
        name=run_id,
    )
