"""The approvals inbox's pages, as HTML strings: the inbox, a run, the runs list.

Rendered on the server with no script and no external resource (the stylesheet is
:data:`loopwise.serve.style.STYLESHEET`, served by :mod:`loopwise.serve.app` from the
same origin), so the pages work offline and under a strict Content-Security-Policy.
Everything that came from a run — arguments, tool output, reasons, step ids — is model or
user text and is escaped where it is written into the page (free text such as a reason
also shows a bidirectional override or control character as an escape, so it cannot
reorder what follows); nested arguments are shown as nested lists, not as one line of
JSON. Plans are drawn by :func:`loopwise.core.svg.graph_svg`, the report's drawing, from
:mod:`loopwise.serve.graphs`; the page shell, tables and badges are
:mod:`loopwise.serve.html`'s; a card says when another run asks for the same
irreversible action (:mod:`loopwise.serve.twins`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from loopwise.core.events import Event, EventType
from loopwise.core.names import unprintable
from loopwise.core.svg import EFFECT_COLORS, graph_svg
from loopwise.core.svg import escape as _e
from loopwise.core.svg import escape_shown as _t
from loopwise.running.approvals import ApprovalView, PlanItem
from loopwise.serve.graphs import plan_graph, ran_graph
from loopwise.serve.html import effect_badge, page, state_badge, table, url_path
from loopwise.serve.twins import Twin, object_of
from loopwise.store.base import StoredApproval, StoredRun
from loopwise.tools.audit import changed_fields, changes_text, event_summary, stake_text

__all__ = [
    "EDITABLE_CHARS",
    "Form",
    "inbox_page",
    "readable",
    "run_page",
    "runs_page",
    "who_resumes",
]

_MAX_DEPTH = 6
_MAX_ITEMS = 200
_MAX_TEXT = 20_000
_LONG_TEXT = 1_000
EDITABLE_CHARS = 64_000
"""Arguments whose JSON is longer are not put in the page's edit box: the form could not
carry them back (:mod:`loopwise.serve.app` takes forms of up to 256 KiB, URL-encoded)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Form:
    """What every decision form carries besides the decision."""

    csrf: str
    """The token that proves the form came from this server's page."""
    by: str | None
    """The approver's name to prefill (``--by``), when known."""
    fixed_by: str | None = None
    """The approver's name from the authenticating proxy: shown, not asked."""
    error: tuple[str, str, str] | None = None
    """``(run_id, approval_id, message)`` of a refused decision, shown at its approval."""
    notice: str | None = None
    """A line about the decision just made."""
    root: str = ""
    """The (URL-quoted) path the inbox is mounted under: every link starts with it."""


def readable(value: object, depth: int = 0) -> str:
    """``value`` as HTML a person reads: objects as definition lists, lists as lists,
    text with its line breaks; bounded in depth and length."""
    if depth >= _MAX_DEPTH:
        return f"<code>{_t(_clip(json.dumps(value, default=str), 200))}</code>"
    if isinstance(value, Mapping):
        if not value:
            return "<span class='meta'>(none)</span>"
        rows = [
            f"<dt>{_t(k)}</dt><dd>{readable(v, depth + 1)}</dd>"
            for k, v in list(value.items())[:_MAX_ITEMS]
        ]
        return f"<dl class='args'>{''.join(rows)}</dl>"
    if isinstance(value, list | tuple):
        if not value:
            return "<span class='meta'>(empty list)</span>"
        items = "".join(f"<li>{readable(v, depth + 1)}</li>" for v in value[:_MAX_ITEMS])
        return f"<ol class='args'>{items}</ol>"
    if isinstance(value, str) and len(value) > _LONG_TEXT:
        # Scrolls in its own box, so the decision's forms stay near the top of the card.
        return f"<div class='text long'>{_t(_clip(value, _MAX_TEXT))}</div>"
    if isinstance(value, str):
        return f"<span class='text'>{_t(value)}</span>"
    return f"<code>{_t(json.dumps(value, default=str))}</code>"


def _editable(args: object) -> str:
    """``args`` as the JSON an edit box shows and posts back: what would reorder or hide
    the text (a bidirectional override, a line separator, a control character) is written
    as a JSON escape (``\\u202e``), so the box shows it and the posted text still reads as
    exactly these arguments."""
    text = json.dumps(args, indent=2, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(f"\\u{ord(ch):04x}" if ch != "\n" and unprintable(ch) else ch for ch in text)


def _clip(text: str, n: int) -> str:
    if len(text) <= n:
        return text
    return text[:n] + f"… ({len(text) - n:,} more characters; loopwise runs show --json has all)"


def inbox_page(
    waiting: Sequence[ApprovalView],
    form: Form,
    *,
    total: int | None = None,
    older: str | None = None,
    paged: bool = False,
    twins: Mapping[tuple[str, str], Sequence[Twin]] | None = None,
) -> str:
    """A page of pending approvals, newest first, each with what is decided and the forms:
    ``total`` pending in all, ``older`` the cursor of the next page (a link), ``paged`` when
    this is not the first page (a link back to the newest); ``twins`` the other runs'
    approvals asking for the same irreversible action (:mod:`loopwise.serve.twins`),
    by ``(run_id, approval_id)``, each card naming and linking them."""
    notice = f"<p class='notice' role='status'>{_t(form.notice)}</p>" if form.notice else ""
    shown = {(v.approval.run_id, v.approval.approval_id) for v in waiting}
    if form.error is not None and form.error[:2] not in shown:
        notice += f"<p class='error' role='alert'>{_t(form.error[2])}</p>"
    if not waiting:
        body = "<p class='empty'>Nothing waits for a decision.</p>"
    else:
        ordered = sorted(waiting, key=lambda v: v.approval.requested_at, reverse=True)
        same = twins or {}
        body = "".join(_card(v, form, same.get(_key(v.approval), ())) for v in ordered)
    every = len(waiting) if total is None else total
    count = f"{every:,} pending approval{'' if every == 1 else 's'}"
    if every > len(waiting):
        count += f" · {len(waiting):,} shown"
    newest = url_path(form.root, "")
    pages = []
    if older:
        pages.append(f"<a href='{newest}?after={quote(older)}' rel='next'>Older approvals →</a>")
    if paged:
        pages.insert(0, f"<a href='{newest}'>← Newest</a>")
    nav = f"<nav class='pages'>{' '.join(pages)}</nav>" if pages else ""
    heading = f"<h1>Inbox <span class='meta'>{count}</span></h1>"
    return page("Inbox", f"{heading}{notice}{body}{nav}", root=form.root)


def _key(a: StoredApproval) -> tuple[str, str]:
    return a.run_id, a.approval_id


def _twin_line(a: StoredApproval, same: Sequence[Twin], root: str) -> str:
    """The hint that other runs ask for the same irreversible action; empty when none."""
    runs = list(dict.fromkeys(t.run_id for t in same))
    if not runs:
        return ""
    links = ", ".join(
        f"<a href='{url_path(root, 'runs', r)}'>{_t(r)}</a>" for r in runs[:_TWINS_SHOWN]
    )
    if len(runs) > _TWINS_SHOWN:
        links += f" and {len(runs) - _TWINS_SHOWN:,} more"
    who = "another run" if len(runs) == 1 else f"{len(runs):,} other runs"
    asks = "asks" if len(runs) == 1 else "ask"
    return (
        f"<p class='twin' role='note'><strong>Same action twice:</strong> {who} ({links}) "
        f"{asks} for the same {_t(a.tool)} {_t(object_of(a))}</p>"
    )


_TWINS_SHOWN = 5


def _card(v: ApprovalView, form: Form, same: Sequence[Twin] = ()) -> str:
    a = v.approval
    facts = [("Why a person decides", _t(a.reason or "the gate asks a person"))]
    if v.why:
        facts.insert(0, ("Planner's reason", _t(v.why)))
    if a.tainted_by:
        facts.append(
            ("Untrusted input", f"<strong class='warn'>tainted by {_t(a.tainted_by)}</strong>")
        )
    if v.at_stake is not None:
        amount, _, said = stake_text(v.at_stake, v.at_stake_unit).partition(" (")
        facts.append(("At stake", f"{_e(amount)} <span class='meta'>({_e(said)}</span>"))
    if v.note:
        facts.append(("Note", _t(v.note)))
    dl = "".join(f"<dt>{k}</dt><dd>{val}</dd>" for k, val in facts)
    run = url_path(form.root, "runs", a.run_id)
    return (
        f"<article class='approval' id='{_e(_anchor(a))}'>"
        f"<h2>{_t(a.tool)} {effect_badge(a.effect)}</h2>"
        f"<p class='meta'>run <a href='{run}'>{_t(a.run_id)}</a>"
        + (f" of <strong>{_e(v.target)}</strong>" if v.target else "")
        + " · approval "
        f"<code>{_t(a.approval_id)}</code> · step <code>{_t(a.step)}</code> · asked "
        f"{_e(a.requested_at[:19].replace('T', ' '))} UTC</p>"
        f"{_twin_line(a, same, form.root)}"
        f"<dl class='facts'>{dl}</dl>"
        f"<h3>Arguments</h3>{readable(a.args)}"
        f"{_plan_list(v)}{_decided(v.decided)}{_forms(v, form)}</article>"
    )


def _anchor(a: StoredApproval) -> str:
    return f"a-{a.run_id}-{a.approval_id}"


def _plan_list(v: ApprovalView) -> str:
    if not v.plan:
        return ""
    rows = []
    for p in v.plan:
        here = " class='here'" if p.id == v.plan_step else ""
        after = f" <span class='meta'>after {_t(', '.join(p.depends_on))}</span>"
        rows.append(
            f"<li{here}><code>{_t(p.id)}</code> {_t(p.action)} {effect_badge(p.effect)} "
            f"{state_badge(p.state)}{_edited_by(p)}{after if p.depends_on else ''}<br>"
            f"<span class='meta'>{_t(p.reason)}</span></li>"
        )
    return f"<h3>The plan around it</h3><ol class='plan'>{''.join(rows)}</ol>"


def _edited_by(p: PlanItem) -> str:
    return f" <span class='meta'>edited by {_t(p.edited_by)}</span>" if p.edited_by else ""


def _change(a: StoredApproval) -> str:
    """What an edited decision changed (``amount_cents: 25000 → 4000``); empty else."""
    if a.status != "edited":
        return ""
    return changes_text(changed_fields(a.args, a.edited_args))


def _decided(decided: Sequence[StoredApproval]) -> str:
    if not decided:
        return ""
    rows = "".join(
        f"<li><code>{_t(d.approval_id)}</code> {_t(d.tool)}: {state_badge(d.status)} by "
        f"<strong>{_t(d.decided_by)}</strong>"
        + (f" ({_t(_change(d))})" if _change(d) else "")
        + (f" — {_t(d.decision_reason)}" if d.decision_reason else "")
        + "</li>"
        for d in decided
    )
    return f"<h3>Decided already in this run</h3><ul class='decided'>{rows}</ul>"


def _hidden(v: ApprovalView, form: Form) -> str:
    a = v.approval
    fields = {
        "csrf": form.csrf,
        "run_id": a.run_id,
        "approval_id": a.approval_id,
        "args_hash": a.args_hash,
    }
    return "".join(f"<input type='hidden' name='{k}' value='{_e(x)}'>" for k, x in fields.items())


def _who(form: Form, key: str) -> str:
    if form.fixed_by is not None:
        return f"<p class='meta'>deciding as <strong>{_t(form.fixed_by)}</strong></p>"
    return (
        f"<label for='by-{key}'>Your name</label>"
        f"<input id='by-{key}' name='by' required autocomplete='name' "
        f"value='{_e(form.by or '')}'>"
    )


def _forms(v: ApprovalView, form: Form) -> str:
    a = v.approval
    key = _e(_anchor(a))
    error = ""
    if form.error is not None and form.error[:2] == (a.run_id, a.approval_id):
        error = f"<p class='error' role='alert'>{_t(form.error[2])}</p>"
    decide = (
        f"<form method='post' action='{url_path(form.root, 'decide')}' class='decide'>"
        f"{_hidden(v, form)}"
        f"{_who(form, key)}"
        f"<label for='reason-{key}'>Reason <span class='meta'>(needed to deny; the model "
        f"reads it)</span></label><textarea id='reason-{key}' name='reason' rows='2'>"
        "</textarea><div class='buttons'>"
        "<button name='decision' value='approve' class='approve'>Approve</button>"
        "<button name='decision' value='deny' class='deny'>Deny</button></div></form>"
    )
    shown = _editable(a.args)
    if not v.editable:
        edit = "<p class='meta'>A whole plan is approved or denied, not edited.</p>"
    elif len(shown) > EDITABLE_CHARS:
        edit = (
            f"<p class='meta'>These arguments are too large to edit here ({len(shown):,} "
            "characters): edit them with <code>loopwise approve "
            f"{_t(a.run_id)} --approval {_t(a.approval_id)} --args @edited.json</code>.</p>"
        )
    else:
        edit = (
            "<details><summary>Edit arguments</summary>"
            f"<form method='post' action='{url_path(form.root, 'decide')}' class='edit'>"
            f"{_hidden(v, form)}"
            f"{_who(form, key + '-e')}"
            f"<label for='args-{key}'>Arguments (JSON object; checked against the tool's "
            f"schema and policy before anything is recorded)</label>"
            f"<textarea id='args-{key}' name='args' rows='6'>"
            f"{_e(shown)}</textarea>"
            f"<label for='ereason-{key}'>Reason</label>"
            f"<textarea id='ereason-{key}' name='reason' rows='2'></textarea>"
            "<div class='buttons'><button name='decision' value='approve' "
            "class='approve'>Approve edited</button></div></form></details>"
        )
    return f"<section class='decision'>{error}{decide}{edit}</section>"


_LEGEND = (
    "<p class='meta legend'>border: "
    + ", ".join(f"<span class='effect {k}'>{k}</span>" for k in EFFECT_COLORS)
    + " · fill: step state</p>"
)


def run_page(
    run: StoredRun,
    plan: Sequence[PlanItem],
    approvals: Sequence[StoredApproval],
    events: Sequence[Event],
    *,
    resuming: bool = False,
    root: str = "",
    twins: Mapping[tuple[str, str], Sequence[Twin]] | None = None,
) -> str:
    """A run: its status, its plan drawn with each step's state (or, without a plan, what
    it ran), every approval with who decided, and the whole audit log; ``twins`` as for
    :func:`inbox_page`, a line per pending approval another run asks the same of.

    A paused run's line says what it waits for now, from its approvals (the run's stored
    detail was written when it paused, before any decision); ``resuming`` says this
    server resumes a run once nothing is pending (``loopwise serve --resume``). A run
    that ended ``error`` before its resume ran anything (its target could not be loaded)
    says it could not be resumed, why, and how to finish it.

    Drawn from the store's record alone: showing a run never loads its target's code."""
    head = (
        f"<h1>Run <code>{_t(run.run_id)}</code> {state_badge(run.status)}</h1>"
        f"<p class='meta'>{_e(run.target)}"
        + (f" · {_e(run.spec)}" if run.spec else "")
        + f" · started {_e(run.created_at[:19].replace('T', ' '))} UTC"
        + (f" · model {_e(run.model)}" if run.model else "")
        + "</p>"
        + _detail(run, approvals, events, resuming=resuming)
        + "".join(
            _twin_line(a, (twins or {}).get(_key(a), ()), root)
            for a in approvals
            if a.status == "pending"
        )
    )
    return page(
        f"Run {run.run_id}",
        head
        + _drawing(run, plan, events)
        + _plan_table(plan)
        + _approvals_table(approvals)
        + _audit(events),
        nav="runs",
        root=root,
    )


def _detail(
    run: StoredRun,
    approvals: Sequence[StoredApproval],
    events: Sequence[Event],
    *,
    resuming: bool,
) -> str:
    if run.status == "error" and events and events[-1].type is EventType.RUN_PAUSED:
        line = (
            f"The run could not be resumed: {run.detail}. Its decisions are kept: once "
            + (f"that is fixed, run: loopwise resume {run.run_id}" if run.spec else "")
            + ("" if run.spec else f"the step loads, loopwise.resume({run.run_id!r}, step=...)")
        )
        return f"<p class='detail error' role='alert'>{_t(line)}</p>"
    if run.status != "awaiting_approval" or not approvals:
        return f"<p class='detail'>{_t(run.detail)}</p>" if run.detail else ""
    pending = [a for a in approvals if a.status == "pending"]
    if pending:
        names = ", ".join(f"{a.tool} ({a.approval_id})" for a in pending)
        line = f"{len(pending)} call(s) await approval: {names}"
    elif resuming and run.spec:
        line = "Every approval is decided: this inbox is resuming the run."
    else:
        line = f"Every approval is decided; the run waits to be resumed: {who_resumes(run)}"
    return f"<p class='detail' role='status'>{_t(line)}</p>"


def who_resumes(run: StoredRun) -> str:
    """What continues a decided run that this inbox does not resume."""
    if not run.spec:
        # Workers, `serve --resume` and `loopwise resume` load a run's step by its spec.
        return (
            f"continue it in Python: loopwise.resume({run.run_id!r}, step=YOUR_STEP) (it "
            "recorded no target spec: its step was made in a script or a function)"
        )
    return f"a `loopwise worker` on this store continues it, or run: loopwise resume {run.run_id}"


def _drawing(run: StoredRun, plan: Sequence[PlanItem], events: Sequence[Event]) -> str:
    if plan:
        svg = graph_svg(plan_graph(plan), name="the plan", states={p.id: p.state for p in plan})
        return f"<h2>The plan</h2><figure class='drawing'>{svg}</figure>{_LEGEND}"
    ran, states = ran_graph(run.status, events)
    if len(ran.nodes) < 2:
        return ""
    svg = graph_svg(ran, name=f"what run {run.run_id} ran", states=states)
    return (
        "<h2>What it ran <span class='meta'>(the steps and tools its target entered)"
        f"</span></h2><figure class='drawing'>{svg}</figure>"
    )


def _plan_table(plan: Sequence[PlanItem]) -> str:
    """Each step with its state and arguments: a step that ran with a person's edit shows
    the arguments it ran with, and the planner's proposal beside them."""
    if not plan:
        return ""
    rows = [
        [
            f"<code>{_t(p.id)}</code>",
            _t(p.action),
            effect_badge(p.effect),
            state_badge(p.state) + _edited_by(p),
            _t(p.reason),
            _ran_and_proposed(p) if p.ran_with is not None else readable(p.args),
        ]
        for p in plan
    ]
    heads = ("step", "action", "effect", "state", "planner's reason", "arguments")
    return table(heads, rows, "plan")


def _ran_and_proposed(p: PlanItem) -> str:
    return (
        "<div class='ran'><div><p class='meta'>ran with (edited by "
        f"<strong>{_t(p.edited_by or 'a person')}</strong>)</p>{readable(p.ran_with)}</div>"
        "<div class='proposed'><p class='meta'>the planner proposed</p>"
        f"{readable(p.args)}</div></div>"
    )


def _approvals_table(approvals: Sequence[StoredApproval]) -> str:
    if not approvals:
        return ""
    rows = [
        [
            f"<code>{_t(a.approval_id)}</code>",
            _t(a.tool),
            state_badge(a.status),
            _t(a.decided_by or ""),
            _e((a.decided_at or "")[:19].replace("T", " ")),
            _t(_change(a)),
            _t(a.decision_reason or ""),
        ]
        for a in approvals
    ]
    heads = ("approval", "action", "decision", "by", "when (UTC)", "what changed", "why")
    return "<h2>Approvals</h2>" + table(heads, rows, "approvals")


_AUDIT_HEAD, _AUDIT_TAIL = 100, 1_900
"""A long run's audit log shows its first and its latest events (the page stays a page)."""


def _audit(events: Sequence[Event]) -> str:
    def row(e: Event) -> str:
        return (
            f"<tr class='{_e(e.type)}'><td data-label='#'>{e.seq}</td>"
            f"<td data-label='event'>{_e(e.type)}</td>"
            f"<td data-label='step'><code>{_t(e.step)}</code></td>"
            f"<td data-label='at'>{_e(e.at[11:19])}</td><td data-label='what' class='text'>"
            f"{_t(_clip(event_summary(str(e.type), e.data), 600))}</td></tr>"
        )

    left_out = len(events) - _AUDIT_HEAD - _AUDIT_TAIL
    if left_out <= 0:
        rows = "".join(map(row, events))
    else:
        gap = (
            f"<tr><td colspan='5' class='meta gap'>… {left_out:,} events not shown here "
            "(loopwise runs show RUN_ID --json has every one)</td></tr>"
        )
        head, tail = events[:_AUDIT_HEAD], events[-_AUDIT_TAIL:]
        rows = "".join(map(row, head)) + gap + "".join(map(row, tail))
    return (
        f"<h2>Audit log <span class='meta'>{len(events):,} events</span></h2>"
        "<div class='scroll'><table class='stack audit'><thead><tr><th>#</th><th>event</th>"
        f"<th>step</th><th>at</th><th>what</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


def runs_page(
    runs: Sequence[StoredRun], statuses: Sequence[str], chosen: str | None, *, root: str = ""
) -> str:
    """The most recent runs, filtered by status (``chosen``), with a link per status;
    ``root`` is the (URL-quoted) path the inbox is mounted under."""
    listed = url_path(root, "runs")
    filters = [f"<a href='{listed}'" + ("" if chosen else " aria-current=page") + ">all</a>"]
    filters += [
        f"<a href='{listed}?status={quote(s)}'"
        + (" aria-current=page" if s == chosen else "")
        + f">{_e(s)}</a>"
        for s in statuses
    ]
    rows = [
        [
            f"<a href='{url_path(root, 'runs', r.run_id)}'><code>{_t(r.run_id)}</code></a>",
            state_badge(r.status),
            _e(r.target),
            _e(r.created_at[:19].replace("T", " ")),
        ]
        for r in runs
    ]
    listing = (
        table(("run", "status", "target", "started (UTC)"), rows, "runs")
        if runs
        else "<p class='empty'>No runs.</p>"
    )
    return page(
        "Runs",
        f"<h1>Runs</h1><nav class='filters'>{' '.join(filters)}</nav>{listing}",
        nav="runs",
        root=root,
    )
