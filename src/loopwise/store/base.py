"""The run store: runs, their ordered events and their approvals, behind one interface.

:class:`RunStore` is the interface, the union of six roles a consumer asks for one by one:
:class:`EventLog` (a run's events), :class:`RunLeases` (registering, queueing and leasing
runs), :class:`RunQueries` (reading runs), :class:`ApprovalBook` (gate requests and
decisions), :class:`EvalHistory` (eval summaries) and :class:`LiveEvidence` (the live
cases shadow runs and people's decisions leave). :class:`SQLiteStore` (one file, the
embedded default) and :class:`~loopwise.store.postgres.PostgresStore` (many workers on many
machines) implement it on :class:`~loopwise.store.sql.SQLStore`, which holds every statement
both run, so the two keep one semantics. :func:`loopwise.store.open.open_store` picks one
from a path or URL. A store is an :class:`~loopwise.core.events.EventSink`: a run streams
every event into it as it happens, and the store keeps the ``runs`` row (status, output,
usage) and the ``approvals`` rows (from ``gate_requested``/``gate_decided`` events) in step
with the log.

How the SQL stores keep events durable, lease runs and share a database is
:mod:`loopwise.store.sql`'s.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from loopwise.core.events import Event, Status
from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue
from loopwise.errors import ConfigError, DecisionError

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_STORE_PATH",
    "PAGE",
    "QUEUED",
    "RESUMABLE",
    "ApprovalBook",
    "ApprovalPage",
    "EvalHistory",
    "EventLog",
    "LiveCase",
    "LiveEvidence",
    "RunLeases",
    "RunQueries",
    "RunStore",
    "StoredApproval",
    "StoredRun",
    "Tx",
    "cursor_after",
    "default_store_path",
    "not_pending",
    "place_of",
    "redact",
]

DEFAULT_STORE_PATH = ".loopwise/runs.db"
"""Where the store lives when neither an argument nor ``LOOPWISE_STORE`` says."""

DEFAULT_LEASE_SECONDS = 30.0
"""How long a run's owner may go silent before another process may take the run over."""

RESUMABLE = frozenset(
    {"running", Status.AWAITING_APPROVAL.value, Status.ERROR.value, Status.CANCELLED.value}
)
"""Stored statuses a resume continues: ``running`` (the process died mid-run), ``error``
(the model API failed, a step raised) and ``cancelled`` (interrupted) too, so a run is
not started over (its effects done again under new keys) once the cause is fixed."""

QUEUED = "queued"
"""The stored status of a run recorded for a worker to start (``run --queue``)."""


_PASSWORDS = re.compile(
    r"((?:^[A-Za-z][A-Za-z0-9+.-]*:|://)[^:/@?#\s]*):([^@/?#\s]*)@|([?&]password=)([^&#\s]*)",
    re.IGNORECASE,
)
"""A URL's passwords: ``user:PASSWORD@`` before the host (also in a URL missing its
``//``), ``password=PASSWORD`` in the query (libpq reads both)."""


def redact(text: str, url: str | None = None) -> str:
    """``text`` with the passwords of ``url`` (default: of ``text`` itself, a URL) replaced
    by ``***``, also where ``text`` quotes them undecoded or decoded (a driver's message
    about a malformed URL may)."""
    secrets = {
        found
        for m in _PASSWORDS.finditer(text if url is None else url)
        for raw in (m.group(2), m.group(4))
        if raw
        for found in (raw, urllib.parse.unquote(raw))
    }
    text = _PASSWORDS.sub(lambda m: f"{m[1]}:***@" if m[1] else f"{m[3]}***", text)
    # Not one or two letters: they would blot out words of the message, not a secret.
    for secret in sorted((s for s in secrets if len(s) > 2), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def default_store_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ``$LOOPWISE_STORE``, else ``.loopwise/runs.db``."""
    return Path(path or os.environ.get("LOOPWISE_STORE") or DEFAULT_STORE_PATH)


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredRun:
    """One run as the store has it."""

    run_id: str
    """The run's id."""
    target: str
    """The step's name."""
    spec: str | None
    """How to load the target again (``path.py:name``); ``None`` when not recorded."""
    status: str
    """A :class:`~loopwise.core.step.Status` value, or ``running``/``queued``."""
    detail: str | None
    """Why the run ended as it did, when it says."""
    input: JSONValue
    """The run's input (JSON)."""
    output: JSONValue
    """The run's output (JSON), once finished."""
    usage: dict[str, Any] | None
    """The run's usage so far (``Usage.to_dict()``)."""
    model: str | None
    """The model's name the run started with."""
    options: dict[str, Any]
    """The limits the run started with (budget, max_steps)."""
    owner: str | None
    """The process (``host:pid``) that runs or last ran it."""
    lease_until: float | None
    """When the owner's lease lapses (seconds since the epoch, database clock)."""
    created_at: str
    """ISO-8601 UTC."""
    updated_at: str
    """ISO-8601 UTC."""
    conversation: str | None = None
    """The conversation the run is a message of, if any."""
    turn: int | None = None
    """Which message of its conversation it is (from 1)."""

    @property
    def eval_id(self) -> str | None:
        """The eval this run measured for (``options["eval"]``), ``None`` for a real run.
        An eval's runs are left out of :meth:`~RunApprovals.pending` (all runs), the inbox
        and the workers' queue, even in a store shared with real runs."""
        mark = self.options.get("eval")
        return None if mark is None else str(mark)

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict (``runs list --json``), with ``eval_id``."""
        return {**asdict(self), "eval_id": self.eval_id}


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredApproval:
    """One gate request of a run and, once decided, its decision."""

    run_id: str
    """The run it belongs to."""
    approval_id: str
    """Its id within the run."""
    step: str
    """The step that asked."""
    tool: str
    """The tool or action to approve."""
    call_id: str | None
    """The tool call it gates."""
    args: JSONValue
    """The arguments asked about."""
    effect: str | None
    """The tool's effect (``write``/``irreversible``)."""
    reason: str | None
    """Why the gate asked."""
    tainted_by: str | None
    """The untrusted source that preceded the call, if any."""
    args_hash: str
    """The hash of tool + arguments a decision is bound to."""
    status: str
    """``pending``, ``approved``, ``denied`` or ``edited``."""
    requested_at: str
    """ISO-8601 UTC."""
    decided_by: str | None
    """Who decided."""
    decided_at: str | None
    """When (ISO-8601 UTC)."""
    decision_reason: str | None
    """Why, as the decider said."""
    edited_args: JSONValue
    """The arguments an ``edited`` decision approved instead."""

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict."""
        return asdict(self)


class Tx(Protocol):
    """One open transaction of a store's connection."""

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[Mapping[str, Any]]:
        """Run a query; its rows as mappings."""
        ...

    def run(self, sql: str, params: tuple[object, ...] = ()) -> int:
        """Run a statement; the number of rows it changed."""
        ...

    def run_many(self, sql: str, rows: list[tuple[object, ...]]) -> int:
        """Run a statement once per parameter row; the number of rows changed in all."""
        ...


class EventLog(Protocol):
    """The role that keeps a run's events: appends them as they happen (it is an
    :class:`~loopwise.core.events.EventSink`) and reads them back in order."""

    def record(self, run_id: str, event: Event) -> None:
        """Append ``event`` to the run's log (the :class:`EventSink` method)."""
        ...

    def record_many(self, run_id: str, events: list[Event]) -> None:
        """Append several events, all or none (the gate requests of one turn)."""
        ...

    def events(self, run_id: str) -> list[Event]:
        """The run's events in ``seq`` order."""
        ...

    def journal(self, run_id: str) -> dict[str, JSONObject]:
        """``{key: data}`` of every event that carries a journal ``key``."""
        ...

    def flush(self) -> None:
        """Commit the events grouped since the last durability point."""
        ...


class RunLeases(Protocol):
    """The role that hands runs to processes: registers them, queues them, leases
    one to one owner at a time and records how a run that stopped early stands."""

    lease_seconds: float
    """How long a run's lease lasts without renewal."""

    def create_run(
        self,
        run_id: str,
        *,
        target: str,
        spec: str | None,
        input: object,
        model: str | None,
        options: Mapping[str, object],
        owner: str | None = None,
        queued: bool = False,
        conversation: str | None = None,
    ) -> None:
        """Register a run before its first event, with what resuming it needs (as the
        next message of ``conversation``, when given)."""
        ...

    def claim(self, run_id: str, owner: str, *, alive: Callable[[str], bool]) -> bool:
        """Take a paused or interrupted run for resuming, atomically."""
        ...

    def claim_next(self, owner: str, *, decided_only: bool = False) -> StoredRun | None:
        """Take the oldest run a worker should execute now (``decided_only``: only a
        paused run whose approvals are all decided); the run as it was before."""
        ...

    def hold(self, run_id: str, owner: str) -> AbstractContextManager[None]:
        """A context manager renewing the run's lease while it runs here."""
        ...

    def wait_for_work(self, timeout: float) -> None:
        """Return when a run may have become claimable, or after ``timeout`` seconds."""
        ...

    def mark_paused(self, run_id: str, detail: str) -> None:
        """Mark a ``running`` run of a dead process that waits on approvals as paused."""
        ...

    def mark_failed(self, run_id: str, detail: str) -> None:
        """Mark a run that raised before finishing as ``error``."""
        ...


class RunQueries(Protocol):
    """The role that answers questions about stored runs (the CLI's ``runs``, the inbox)."""

    def get_run(self, run_id: str) -> StoredRun:
        """The run; :class:`ConfigError` when there is no such run."""
        ...

    def list_runs(
        self,
        *,
        limit: int = 50,
        conversation: str | None = None,
        status: str | None = None,
        target: str | None = None,
        since: str | None = None,
    ) -> list[StoredRun]:
        """The most recent runs first (of one conversation, of one status, of a ``target``
        — its spec or step name — created at ``since`` or later, when given)."""
        ...

    def conversation_runs(self, conversation: str) -> list[StoredRun]:
        """The runs of a conversation in the order they were sent (empty when unknown)."""
        ...

    def show(self, run_id: str) -> JSONObject:
        """The audit log: run fields plus every event (DESIGN §11)."""
        ...


PAGE = 50
"""How many undecided approvals a page lists unless asked for another number."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalPage:
    """One page of the undecided approvals of real runs (an eval's left out), newest first."""

    approvals: list[StoredApproval]
    """This page's approvals, newest first."""
    total: int
    """How many approvals are undecided in all, on every page."""
    next: str | None
    """The cursor of the next (older) page, for ``after=``; ``None`` on the last page."""


def cursor_after(last: StoredApproval) -> str:
    """The cursor of the page after ``last`` (``pending_page(after=...)``): its place in the
    newest-first order, as JSON in base64 — opaque to whoever passes it back."""
    key = json.dumps([last.requested_at, last.run_id, last.approval_id])
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def place_of(after: str) -> tuple[str, str, str]:
    """The place a page cursor marks (``requested_at, run_id, approval_id``);
    :class:`ConfigError` naming ``after`` when it is no cursor."""
    try:
        key = json.loads(base64.urlsafe_b64decode(after + "=" * (-len(after) % 4)))
    except ValueError:
        key = None
    if not (isinstance(key, list) and len(key) == 3 and all(isinstance(k, str) for k in key)):
        raise ConfigError(
            f"after: {after[:40]!r} is not a page cursor (use the next page's, as listed)",
            name="after",
        )
    return key[0], key[1], key[2]


class ApprovalBook(Protocol):
    """The role that keeps the gate requests of runs and the decisions people make."""

    def pending(self, run_id: str | None = None) -> list[StoredApproval]:
        """Undecided approvals (of one run, or of all), oldest first."""
        ...

    def pending_page(self, *, limit: int = PAGE, after: str | None = None) -> ApprovalPage:
        """One page of the undecided approvals of real runs, newest first: the first, or
        the one after the page whose :attr:`ApprovalPage.next` is ``after``."""
        ...

    def approvals(self, run_id: str) -> list[StoredApproval]:
        """Every approval of a run, decided or not."""
        ...

    def approval(self, run_id: str, approval_id: str) -> StoredApproval | None:
        """One approval of a run, or ``None``."""
        ...

    def decide(
        self,
        run_id: str,
        approval_id: str,
        *,
        decision: str,
        by: str,
        reason: str | None = None,
        edited_args: Mapping[str, object] | None = None,
        seen_hash: str | None = None,
    ) -> StoredApproval:
        """Record a human decision on a pending approval; return the updated approval
        (``edited_args``: JSON data, checked by the caller; kept as a copy)."""
        ...


class EvalHistory(Protocol):
    """The role that keeps eval summaries, so an eval compares with the last one."""

    def save_eval(
        self,
        eval_id: str,
        *,
        dataset: str,
        created_at: str,
        summaries: Mapping[str, JSONMapping],
    ) -> None:
        """Keep an eval's summary per target (its runs are runs of this store already)."""
        ...

    def last_eval(
        self,
        target: str,
        *,
        dataset: str | None,
        before: str,
        model: str | None = None,
        having: str | None = None,
    ) -> JSONObject | None:
        """The newest summary of ``target`` on ``dataset`` (``None``: on any) from an eval no
        later than ``before`` (and, given ``model``, one whose summary names that ``model``;
        given ``having``, one whose summary holds that key, as a sweep's ``calibration``),
        with its ``created_at`` and ``eval_id``; ``None`` when there is none."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class LiveCase:
    """One case of live traffic kept as evidence: a shadowed run's pair of outputs, or a
    person's decision (a pick, an edit) that labels a case."""

    run_id: str
    """The run it happened in."""
    key: str
    """Its journal key in that run (a run keeps each case once, however often resumed)."""
    target: str
    """The run's target as recorded (its spec, else its step's name)."""
    kind: str
    """``shadow`` (a shadow's pair) or ``person`` (a person's decision as the label)."""
    step: str
    """The step that kept it (the ``Shadow``'s path, the gate's step)."""
    input: JSONValue
    """The case's input (JSON)."""
    output: JSONValue
    """What the run answered: the primary's output, or what the step proposed."""
    reference: JSONValue
    """What it is judged against: the shadow's output, or what the person chose."""
    agree: bool | None
    """Whether ``output`` agrees with ``reference``; ``None`` when there is nothing to
    compare (the shadow did not complete)."""
    status: str
    """How the shadow's run ended (a :class:`~loopwise.core.events.Status` value), or the
    person's decision (``picked``, ``edited``, ``approved``, ``denied``)."""
    detail: str | None
    """Why, when it says (a failed shadow's error)."""
    created_at: str
    """ISO-8601 UTC."""

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict."""
        return asdict(self)


class LiveEvidence(Protocol):
    """The role that reads live cases back (``loopwise check``'s ``live``, a sweep over
    people's decisions). They are written as a side effect of the events that carry them
    (a ``step_finished`` with ``live`` data), so a resumed run or a second worker keeps
    each case once."""

    def live_targets(self) -> list[str]:
        """Every target that has live cases (as recorded)."""
        ...

    def live_cases(
        self, targets: Sequence[str], *, since: str | None = None, kind: str | None = None
    ) -> list[LiveCase]:
        """The live cases of any of ``targets`` (spellings of one target), oldest first:
        those recorded at or after ``since`` (ISO-8601) when given, of one ``kind`` when
        given; never those of an eval's runs (they measured, they were not traffic)."""
        ...


class RunStore(EventLog, RunLeases, RunQueries, ApprovalBook, EvalHistory, LiveEvidence, Protocol):
    """What loopwise needs from a run store: every role (:class:`~loopwise.store.sql.SQLStore`
    implements it twice). A consumer that needs one role asks for that role, so a third
    backend or a test fake implements what that consumer uses, not every method."""

    def close(self) -> None:
        """Commit what is grouped and release the store's resources."""
        ...


def not_pending(run_id: str, approval_id: str, status: str) -> DecisionError:
    """The error of a decision on an approval that was decided already."""
    return DecisionError(
        f"approval {approval_id!r} of run {run_id!r} is already {status}",
        name=approval_id,
        code="not-pending",
    )
