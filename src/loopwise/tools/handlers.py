"""Who answers a gate's request for a person: the approval handler, and the terminal's.

A run's approval handler (``ctx.approvals``) is an object with ``async decide(request)``,
or a plain (sync or async) function of the request, returning a verdict,
``True``/``False``, or ``None`` for "not decided yet" (:func:`ask` reads every shape).
:class:`TerminalApprovals` asks on a terminal (y/n/edit). The run store's handler
(:mod:`loopwise.running.store_approvals`) answers from decisions made with ``loopwise
approve``/``deny`` and ``None`` before. :mod:`loopwise.tools.gates` re-exports every name here.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import TextIO

from loopwise.core.events import json_value
from loopwise.core.names import printable, shown_name_problem
from loopwise.core.options import ApprovalHandler
from loopwise.core.shape import name_of
from loopwise.errors import ConfigError
from loopwise.tools.audit import asked_lines, os_user
from loopwise.tools.verdicts import ApprovalRequest, Approved, Denied, Edited, Verdict

__all__ = ["Handler", "TerminalApprovals", "ask", "handler_name", "request_lines"]


Handler = ApprovalHandler
"""An approval handler (:data:`loopwise.core.options.ApprovalHandler`)."""


async def ask(handler: Handler, request: ApprovalRequest) -> Verdict | None:
    """Ask ``handler`` about ``request``: a verdict, or ``None`` while undecided.

    A verdict that does not say who decided is recorded under the handler's name (its
    ``by`` or ``name`` attribute, else its function or class name), never as a generic
    "policy": the audit log must tell an in-code approver from a person and from a policy.
    """
    if handler is None:
        return None
    # getattr: a handler is an object with decide(), or a function (ApprovalHandler)
    decide = getattr(handler, "decide", None)
    fn: Callable[[ApprovalRequest], object]
    if callable(decide):
        fn = decide
    elif callable(handler):
        fn = handler
    else:
        raise ConfigError(
            f"approvals handler {handler!r} is neither a function of the request nor an "
            "object with decide(request)",
            name="approvals",
        )
    result = fn(request)
    if inspect.isawaitable(result):
        result = await result
    return _human_verdict(result, handler_name(handler))


def handler_name(handler: object) -> str:
    """Who an approval handler is in the audit log."""
    for attr in ("by", "name"):
        # getattr: a handler is any object or function of the user's; naming itself is optional
        named = getattr(handler, attr, None)
        if isinstance(named, str) and named:
            return named
    name = name_of(handler) or type(handler).__name__
    return "approvals handler" if name == "<lambda>" else str(name)


_UNNAMED = {Approved: "policy", Denied: "policy", Edited: "human"}
"""The ``by`` each verdict type gets when its maker does not say."""


def _human_verdict(result: object, by: str) -> Verdict | None:
    if result is None:
        return None
    if isinstance(result, Approved | Denied | Edited):
        unnamed = result.by == _UNNAMED[type(result)]
        return replace(result, by=by) if unnamed else result
    if result is True:
        return Approved(by=by)
    if isinstance(result, str):
        return Denied(result, by=by)
    return Denied(f"denied by {by}", by=by)


def request_lines(request: ApprovalRequest) -> list[str]:
    """What a person reads before deciding ``request`` on a terminal: the call, why the
    gate asks, the planner's reason, the money at stake and the note, one per line."""
    taint = f" (tainted by {request.tainted_by})" if request.tainted_by else ""
    steps = request.args.get("plan") if request.tool == "approve_plan" else None
    call = "the whole plan" if isinstance(steps, list) else request.tool
    if not isinstance(steps, list):
        call += f"({json.dumps(request.args)})"
    lines = [f"{call} [{request.effect}] needs approval: {request.reason}{taint}"]
    for s in steps if isinstance(steps, list) else ():
        # A plan is read step by step, not as one line of JSON with Mermaid source in it.
        after = f" after {', '.join(s.get('depends_on') or [])}" if s.get("depends_on") else ""
        lines.append(
            f"    {s.get('id')} {s.get('action')}({json.dumps(s.get('args'))}){after}: "
            f"{s.get('reason')}"
        )
    lines += asked_lines(request.why, request.at_stake, request.note, request.at_stake_unit)
    return lines


class TerminalApprovals:
    """Ask on a terminal: ``y`` approves, ``n`` denies (asks why), ``e`` edits the arguments
    as JSON (checked against the tool's schema when typed: a bad edit says why and asks
    again). End of input before an answer (or while editing) leaves the call undecided, so
    the run pauses durably instead."""

    def __init__(
        self, *, by: str | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None
    ) -> None:
        problem = None if by is None else shown_name_problem(by)
        if problem is not None:
            raise ConfigError(f"TerminalApprovals(by={by!r}): the name {problem}", name="by")
        self.by = by or os_user()
        """Who decides, as the audit log records it (default: the OS user)."""
        self._in = stdin
        self._out = stdout
        self._lock: asyncio.Lock | None = None

    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        """One question at a time, even when several calls of a turn wait together."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await asyncio.to_thread(self._ask, request)

    def _line(self, prompt: str) -> str | None:
        out, inp = self._out or sys.stderr, self._in or sys.stdin
        out.write(prompt)
        out.flush()
        line = inp.readline()
        return None if not line else line.strip()

    def _ask(self, request: ApprovalRequest) -> Verdict | None:
        out = self._out or sys.stderr
        # The reasons and the note are model text: an ESC or CR must not rewrite the screen.
        out.write("\n" + "\n".join(printable(line) for line in request_lines(request)) + "\n")
        while True:
            answer = self._line("approve? [y]es / [n]o / [e]dit: ")
            if answer is None:
                return None
            if answer.lower() in {"y", "yes"}:
                return Approved(by=self.by)
            if answer.lower() in {"n", "no"}:
                # "no" is the answer: a reason is optional, end of input gives none.
                reason = self._line("reason: ") or "denied at the terminal"
                return Denied(reason, by=self.by)
            if answer.lower() in {"e", "edit"}:
                raw = self._line("new arguments as a JSON object: ")
                if raw is None:
                    return None
                edited = self._edited(request, raw)
                if edited is not None:
                    return edited

    def _edited(self, request: ApprovalRequest, raw: str) -> Edited | None:
        """The edit typed, or ``None`` (asked again) when it is no JSON object or the
        tool's schema refuses it: a bad edit must not end the run denied."""
        try:
            args = json_value(raw)
        except json.JSONDecodeError as e:
            (self._out or sys.stderr).write(f"not JSON: {e.msg}\n")
            return None
        if not isinstance(args, dict):
            (self._out or sys.stderr).write("the arguments must be a JSON object\n")
            return None
        problem = request.edit_problem(args) if request.edit_problem is not None else None
        if problem is not None:
            said = printable(f"the edited arguments were rejected: {problem}")
            (self._out or sys.stderr).write(f"{said}; try again\n")
            return None
        return Edited(args, by=self.by)
