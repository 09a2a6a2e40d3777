"""A person's edit of a call's arguments: judged when they make it, judged again before it runs.

:func:`judge_edit` is the one judgement of an edit (the tool's schema read strictly, then
its gate's policy and the caller's policies): ``loopwise approve --args`` and the inbox make
it when the person decides, and the executor (:mod:`loopwise.tools.calls`) again just before
the call runs. :func:`judged_again` re-asks the policies of an effect approved before its
batch; :func:`edit_data` and :func:`log_edit` are what the audit log says of an edited call.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from loopwise.core.events import EventType, jsonable
from loopwise.core.journal import Journal
from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue
from loopwise.core.step import Context
from loopwise.tools.arguments import ToolArgumentsError
from loopwise.tools.call_text import call_event, readable_args
from loopwise.tools.call_values import Call
from loopwise.tools.gates import Gate, PolicyFn, recheck_edited
from loopwise.tools.tool import Arguments, Tool
from loopwise.tools.verdicts import Denied, Edited

__all__ = ["edit_data", "edit_problem", "judge_edit", "judged_again", "log_edit"]


async def judge_edit(
    tool: Tool,
    edited: Arguments,
    policies: Sequence[Gate | PolicyFn | None] = (),
    ctx: Context | None = None,
) -> BaseModel | ToolArgumentsError | Denied:
    """A person's edit of ``tool``'s arguments: validated again by the tool's schema, in
    strict mode (``true`` is no number, ``"5000"`` no integer: what they typed is what
    runs), then judged by its gate's policy and ``policies`` (only a denial counts).

    The parsed arguments when they may run, else the schema error or the policy's denial.
    The one judgement of an edit: ``loopwise approve --args`` and the inbox make it when
    the person decides (with ``ctx``, a context holding the run's deps), and the executor
    makes it again before the call runs (in the run's own context).
    """
    try:
        args = tool.parse(edited, strict=True)
    except ToolArgumentsError as e:
        return e
    for check in (tool.gate, *policies):
        refused = await recheck_edited(check, tool.name, args, ctx)
        if refused is not None:
            return refused
    return args


def edit_problem(tool: Tool, edited: JSONMapping) -> str | None:
    """What ``tool``'s schema, read strictly as :func:`judge_edit` reads it, finds wrong
    with ``edited`` (the policies are judged when the edit runs)."""
    try:
        tool.parse(edited, strict=True)
    except ToolArgumentsError as e:
        return str(e)
    return None


async def judged_again(
    tool: Tool, args: BaseModel, policies: Sequence[Gate | PolicyFn | None] = ()
) -> Denied | None:
    """The policies' denial of an effect approved before this batch, judged again as it is
    about to run, or ``None``: a plan's gates are all asked before its first action, and an
    earlier step may have changed what a later step's policy judged (the balance it
    checked). Only a denial counts, as for a person's edit. Never asked again once the call
    was logged: after a crash its effect may have happened, and the policy would judge it.
    """
    for check in (tool.gate, *policies):
        refused = await recheck_edited(check, tool.name, args)
        if refused is not None:
            return Denied(f"{refused.reason} (judged again just before it ran)", by=refused.by)
    return None


def edit_data(tool: Tool, edited: Edited, asked: JSONValue) -> JSONObject:
    """What a ``tool_call`` event of an edited call says: ``args`` as it runs (validated
    as they run, or as given when they do not validate), who edited it and ``edited_from``,
    the arguments as asked."""
    try:
        shown: JSONValue = jsonable(tool.parse(edited.args, strict=True))
    except ToolArgumentsError:
        shown = readable_args(edited.args)
    return {"args": shown, "edited_by": edited.by, "edited_from": asked}


def log_edit(ctx: Context, call: Call, tool: Tool, edited: Edited) -> None:
    """Log a call a person edited after it was logged as asked (an agent's, a workflow
    node's) again, as it runs: a ``tool_call`` event with the edit's fields and
    ``edit_of``, the key of the first one. Once: not when the call was logged as edited."""
    first = ctx.journal.recall(Journal.call_key(call.key))
    key = Journal.key(ctx.step_path, "edited_call", call.bind_id)
    asked = first.get("args") if first is not None else readable_args(call.arguments)
    edit = edit_data(tool, edited, asked)
    shown = first is not None and "edited_by" in first and first.get("args") == edit["args"]
    if shown or key in ctx.journal:
        return
    data = call_event(call, None, str(tool.effect))
    data.update(edit, key=key, edit_of=Journal.call_key(call.key))
    ctx.emit(EventType.TOOL_CALL, data)
