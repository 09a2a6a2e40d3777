"""The command-line verbs over stored runs and their approvals: ``runs list|show``,
``pending``, ``approve``, ``deny``.

Registered by :mod:`loopwise.cli.main`.
Mistakes (an unknown run or approval, an ambiguous ``approve``, a ``--by`` with a control
character) raise :class:`~loopwise.errors.ConfigError`: one line, exit 2.

What a run holds (reasons, details, tool output, names) is model or user text: printed
for people, every line goes through :func:`loopwise.core.names.printable`, so an ESC, CR
or bidirectional override shows as an escape instead of rewriting the terminal;
``--json`` prints it exactly (JSON escapes it).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import TYPE_CHECKING

from loopwise.cli import temporal
from loopwise.cli.options import Verbs, count, given, read_json, store_help
from loopwise.core.events import Status
from loopwise.core.jsontypes import JSONMapping, JSONObject, json_list, json_object
from loopwise.core.names import counted, printable
from loopwise.core.since import since_instant
from loopwise.errors import ConfigError
from loopwise.store.base import PAGE, StoredApproval, StoredRun, cursor_after
from loopwise.store.open import open_store, require_folder
from loopwise.store.sql import SQLStore
from loopwise.tools.audit import asked_lines, event_summary, os_user

if TYPE_CHECKING:
    from loopwise.integrations.temporal.store import TemporalStore
    from loopwise.running.approvals import ApprovalView

__all__ = ["add_runs_verbs"]

_PUBLIC = ("run_id", "approval_id", "tool", "args", "effect", "reason", "tainted_by")
_CONTEXT = (
    "why",
    "at_stake",
    "at_stake_unit",
    "note",
    "plan_step",
    "plan",
    "editable",
    "decided",
    "args_hash",
    "step",
    "answer_schema",
)
"""What ``pending --json`` adds to DESIGN §11's fields: the planner's reason, the money at
stake and its unit, the request's note, the plan around the step, and who decided the run's other
approvals; for a question (an MCP server's elicitation) the schema its answer must match."""


def _store(args: argparse.Namespace) -> SQLStore | TemporalStore:
    require_folder(args.store)  # a mistyped path is an error, never an empty store
    if temporal.on_temporal(args.store):
        return temporal.open_runs(args.store)
    return open_store(args.store)


def _cmd_runs_list(args: argparse.Namespace) -> int:
    if args.conversation is not None:
        from loopwise.architectures.history import (
            check_conversation_id,  # the run machinery: only here
        )

        check_conversation_id(args.conversation)
    since = None if args.since is None else since_instant(args.since, flag="--since")
    with _store(args) as st:
        runs = st.list_runs(
            limit=args.limit,
            conversation=args.conversation,
            status=args.status,
            target=args.target,
            since=since,
        )
    if args.json:
        print(json.dumps({"runs": [r.to_dict() for r in runs]}, default=str))
        return 0
    if not runs:
        print("no runs stored")
        return 0
    print("\n".join(_runs_table(runs)))
    return 0


_STATUSES = frozenset({*(s.value for s in Status), "running", "queued"})


def _status(raw: str) -> str:
    """``--status``: one status a run may have."""
    if raw not in _STATUSES:
        raise argparse.ArgumentTypeError(f"{raw!r}: one of {', '.join(sorted(_STATUSES))}")
    return raw


_HEADER = ("RUN", "STATUS", "TARGET", "MODEL", "TOKENS", "CREATED (UTC)")
_WIDEST = 40
"""A target or model name longer than this is cut (``…``); ``--json`` has it whole."""


def _runs_table(runs: list[StoredRun]) -> list[str]:
    """``runs list`` for people: a header, then one row per run, every column as wide as
    its widest cell, so a long model or target name never shifts the columns after it."""
    rows = [_HEADER] + [
        (
            printable(r.run_id),
            r.status if r.eval_id is None else f"{r.status} (eval {r.eval_id})",
            _cut(printable(r.target)),
            _cut(printable(r.model or "-")),
            f"{(r.usage or {}).get('total_tokens', 0):,}",
            r.created_at[:19].replace("T", " "),
        )
        for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    return [
        "  ".join(
            cell.rjust(w) if i == 4 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _cut(text: str) -> str:
    return text if len(text) <= _WIDEST else text[: _WIDEST - 1] + "…"


def _cmd_runs_show(args: argparse.Namespace) -> int:
    with _store(args) as st:
        log = st.show(args.run_id)
    if args.json:
        print(json.dumps(log, default=str))
        return 0
    detail = f" — {log['detail']}" if log["detail"] else ""
    print(printable(f"run {log['run_id']} ({log['target']}): {log['status']}{detail}"))
    _print_thread(log)
    events = [json_object(e) for e in json_list(log["events"])]
    ran = {json_object(e["data"]).get("call_id") for e in events if e["type"] == "tool_result"}
    for e in events:
        said = _summary(e)
        if e["type"] == "tool_call" and json_object(e["data"]).get("call_id") not in ran:
            # Logged before its gate was asked: without a result it has not run (yet).
            said += "  (not run)"
        print(printable(f"{e['seq']:>4}  {e['type']:<14} {e['step']:<28} {said}"))
    if log["output"] is not None:
        print("output:", json.dumps(log["output"], default=str))
    return 0


def _print_thread(log: JSONMapping) -> None:
    """The conversation a run belongs to: every message of it, this one marked."""
    thread = [json_object(r) for r in json_list(log.get("thread"))]
    if not thread:
        return
    print(printable(f"conversation {log['conversation']}: message {log['turn']} of {len(thread)}"))
    for r in thread:
        mark = "→" if r["run_id"] == log["run_id"] else " "
        question = json.dumps(r["input"], default=str)
        answer = json.dumps(r["output"], default=str) if r["output"] is not None else "-"
        line = f" {mark} {r['turn']:>3}  {r['run_id']}  {r['status']:<17}  "
        print(printable(f"{line}{_clip(question, 50)} → {_clip(answer, 50)}"))


def _clip(text: str, size: int) -> str:
    return text if len(text) <= size else text[: size - 1] + "…"


def _summary(event: JSONMapping) -> str:
    d = json_object(event["data"])
    if event["type"] == "tool_result":
        text = str(d.get("content", ""))
        flagged = d.get("is_error") and not text.startswith("ERROR")
        return ("ERROR " if flagged else "") + (text[:60] + ("…" if len(text) > 60 else ""))
    return event_summary(str(event["type"]), d)


def _cmd_pending(args: argparse.Namespace) -> int:
    from loopwise.running import approvals  # loads pydantic: only for pending and decisions

    if args.run_id is not None and (args.limit is not None or args.after is not None):
        raise ConfigError("--limit and --after page every run's approvals: drop them or RUN_ID")
    page = None
    with _store(args) as st:
        if args.run_id is not None:
            st.get_run(args.run_id)  # an unknown run is a usage error, not "nothing pending"
            asked = st.pending(args.run_id)
        else:
            page = st.pending_page(limit=args.limit or PAGE, after=args.after)
            asked = page.approvals
        waiting = approvals.views(st, asked)
    if args.json:
        rows = [v.to_dict() for v in waiting]
        shown = [{k: a[k] for k in _PUBLIC + _CONTEXT if k in a} for a in rows]
        if page is not None:  # where the next page starts, after any row
            for row, a in zip(shown, asked, strict=True):
                row["cursor"] = cursor_after(a)
        print(json.dumps(shown, default=str))
    else:
        if not waiting:
            print("no pending approvals" if args.after is None else "no older pending approvals")
        for v in waiting:
            print("\n".join(printable(line) for line in _pending_lines(v)))
    if page is not None and page.next is not None:
        # On stderr with --json, so stdout stays the list and a script still hears of it.
        said = f"{len(asked)} of {page.total} pending approvals shown, newest first; "
        again = [f"--limit {args.limit}"] if args.limit else []
        again += [f"--store {shlex.quote(args.store)}"] if args.store else []
        said += f"the next {args.limit or PAGE}: loopwise pending --after {page.next}"
        said += "".join(f" {flag}" for flag in again)
        print(said, file=sys.stderr if args.json else sys.stdout)
    return 0


def _pending_lines(v: ApprovalView) -> list[str]:
    """One approval (an :class:`~loopwise.running.approvals.ApprovalView`) as the terminal shows
    it: the ask, then why, the plan around it, who decided the run's other gates."""
    a = v.approval
    taint = f" (tainted by {a.tainted_by})" if a.tainted_by else ""
    # A whole plan's steps are listed below; its arguments hold them again as JSON.
    call = a.tool if not v.editable and v.plan else f"{a.tool}({json.dumps(a.args)})"
    lines = [f"{a.run_id}  {a.approval_id}  {call} [{a.effect}]: {a.reason}{taint}"]
    lines += asked_lines(v.why, v.at_stake, v.note, v.at_stake_unit)
    lines.append(
        f"    decide exactly this: loopwise approve {a.run_id} --approval {a.approval_id} "
        f"--seen-hash {a.args_hash[:12]}  (or deny ... --reason TEXT)"
    )
    for p in v.plan:
        mark = "->" if p.id == v.plan_step else "  "
        after = f" after {', '.join(p.depends_on)}" if p.depends_on else ""
        lines.append(f"    {mark} {p.id} {p.action} [{p.state}]{after}: {p.reason}")
    for d in v.decided:
        why = f": {d.decision_reason}" if d.decision_reason else ""
        lines.append(f"    {d.approval_id} {d.tool} was {d.status} by {d.decided_by}{why}")
    return lines


def _chosen(st: SQLStore | TemporalStore, args: argparse.Namespace) -> list[StoredApproval]:
    """The approvals a decision applies to (:func:`loopwise.running.decisions.choose`)."""
    from loopwise.running.decisions import choose

    if args.all and args.seen_hash:
        raise ConfigError("--seen-hash binds one approval: drop --all", name="seen_hash")
    return choose(
        st, args.run_id, approval=args.approval, all_pending=args.all, seen_hash=args.seen_hash
    )


def _edited_args(args: argparse.Namespace) -> JSONObject | None:
    if args.args is None:
        return None
    try:
        edited = read_json(args.args, "--args")
    except json.JSONDecodeError as e:
        raise ConfigError(f"--args is not valid JSON ({e.msg})", name="args") from e
    if not isinstance(edited, dict):
        raise ConfigError("--args must be a JSON object of the tool's arguments", name="args")
    return edited


def _edit_deps(args: argparse.Namespace) -> object:
    """``--deps``'s deps for judging an edit (without it, the target module's make_deps())."""
    if args.deps is None:
        return None
    from loopwise.running.targets import deps_factory  # only an edit is judged with deps

    make = deps_factory(None, args.deps)
    return make() if make is not None else None


def _decide(args: argparse.Namespace, decision: str) -> int:
    from loopwise.running import approvals  # loads pydantic: checks edits against the tool's schema

    by = approvals.check_decider(
        os_user() if args.by is None else args.by
    )  # before anything is read or recorded
    edited = _edited_args(args) if decision == "approved" else None
    deps = _edit_deps(args) if edited is not None else None
    with _store(args) as st:
        chosen = _chosen(st, args)
        if edited is not None and len(chosen) != 1:
            raise ConfigError("--args edits one approval: name it with --approval", name="args")
        for a in chosen:
            done = approvals.decide(
                st,
                args.run_id,
                a.approval_id,
                decision=decision,
                by=by,
                reason=given(args, "reason"),
                edited_args=edited,
                seen_hash=args.seen_hash,
                deps=deps,
            )
            call = f"{done.tool}({json.dumps(done.edited_args or done.args)})"
            print(
                printable(
                    f"{done.status} {done.approval_id} of run {args.run_id}: "
                    f"{call} by {done.decided_by}"
                )
            )
        still = len(st.pending(args.run_id))
        spec = None if still else st.get_run(args.run_id).spec  # for how to resume it
    if not still and temporal.on_temporal(args.store):
        print(f"every gate of run {args.run_id} is decided: a `loopwise worker` on this store "
              "continues it (now, or when one starts)")  # fmt: skip
        return 0
    print(
        printable(
            f"{counted(still, 'approval')} still pending"
            if still
            else _how_to_resume(args.run_id, spec)
        )
    )
    return 0


def _how_to_resume(run_id: str, spec: str | None) -> str:
    """The next step once every gate is decided: the CLI when the run knows its target."""
    if spec:
        # A worker claims a paused run once its gates are decided: it may be on its way.
        return (
            f"every gate of run {run_id} is decided: a `loopwise worker` (or `loopwise serve "
            f"--resume`) on this store continues it; with none running: loopwise resume {run_id}"
        )
    return (
        f"continue in Python: loopwise.resume({run_id!r}, step=YOUR_STEP) — this run recorded "
        "no target spec (its step is not bound to a name in an importable module, e.g. it "
        "was made in a script or a function), so `loopwise resume` cannot load it; define "
        "the step at module level in a module you import to make runs resumable from the CLI"
    )


def _add_runs(sub: Verbs) -> None:
    p = sub.add_parser("runs", help="list and show stored runs")
    verbs = p.add_subparsers(dest="runs_verb", required=True, parser_class=type(p))
    ls = verbs.add_parser("list", help="the most recent runs")
    ls.add_argument("--limit", type=count(1), default=50, help="how many (default 50)")
    ls.add_argument(
        "--conversation", metavar="ID", help="only this conversation's runs, newest first"
    )
    ls.add_argument("--status", type=_status, help="only runs with this status")
    ls.add_argument("--target", help="only runs of this target (its spec or step name)")
    ls.add_argument(
        "--since", metavar="WHEN", help="only runs created since: 30m, 24h, 7d, 2w or an ISO date"
    )
    ls.set_defaults(handler=_cmd_runs_list)
    show = verbs.add_parser("show", help="the audit log of one run")
    show.add_argument("run_id")
    show.set_defaults(handler=_cmd_runs_show)
    for q in (ls, show):
        q.add_argument("--json", action="store_true", help="print one JSON document")
        q.add_argument("--store", help=store_help)


def _add_decision(sub: Verbs, verb: str) -> None:
    p = sub.add_parser(verb, help=f"{verb} a pending gate")
    p.add_argument("run_id")
    p.add_argument("--approval", help="the approval id (needed when several are pending)")
    p.add_argument("--all", action="store_true", help=f"{verb} every pending approval of the run")
    p.add_argument("--by", help="who decides (default: the current user)")
    p.add_argument(
        "--seen-hash",
        metavar="HASH",
        help="decide only if the approval still asks about the arguments with this hash "
        "(`loopwise pending` shows it; 8 or more of its hex digits)",
    )
    p.add_argument("--store", help=store_help)
    if verb == "approve":
        p.add_argument("--args", help="approve with these edited arguments (a JSON object)")
        p.add_argument(
            "--deps",
            metavar="MODULE:FUNCTION",
            help="the deps the policy judging --args gets (module:function or "
            "file.py:function; default: the run's target module's make_deps(), if any)",
        )
        p.add_argument("--reason", help="why (recorded in the audit log)")
        p.set_defaults(handler=lambda a: _decide(a, "approved"))
    else:
        p.add_argument("--reason", required=True, help="why (the model reads it)")
        p.set_defaults(handler=lambda a: _decide(a, "denied"))


def add_runs_verbs(sub: Verbs) -> None:
    """Register ``runs``, ``pending``, ``approve`` and ``deny`` on the CLI's subparsers."""
    _add_runs(sub)
    p = sub.add_parser("pending", help="list undecided approvals")
    p.add_argument("run_id", nargs="?", help="only this run's (all of them)")
    p.add_argument(
        "--limit",
        type=count(1),
        help=f"approvals per page, newest first (default {PAGE}); the page's last line "
        "(on stderr with --json) says how to ask for the next one",
    )
    p.add_argument(
        "--after",
        metavar="CURSOR",
        help="the page after this cursor (the last page's, or a JSON row's \"cursor\")",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--store", help=store_help)
    p.set_defaults(handler=_cmd_pending)
    _add_decision(sub, "approve")
    _add_decision(sub, "deny")
