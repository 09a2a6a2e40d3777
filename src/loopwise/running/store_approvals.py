"""The durable approval handler: a run's gates answered from the decisions in its store.

:func:`~loopwise.running.runner.arun` and :func:`~loopwise.running.runner.aresume` wrap the
run's own handler in a :class:`StoreApprovals`, so a gate asked again after a pause (in any
process) gets the decision a person recorded with ``loopwise approve``/``deny`` or the inbox.
"""

from __future__ import annotations

from loopwise.store.base import ApprovalBook
from loopwise.tools.handlers import Handler, ask
from loopwise.tools.verdicts import ApprovalRequest, Denied, Verdict, verdict_from_data

__all__ = ["StoreApprovals"]


class StoreApprovals:
    """The durable approval handler: answers from decisions recorded in the store.

    Undecided requests go to ``fallback`` (a :class:`~loopwise.tools.gates.TerminalApprovals`,
    a function) when there is one, else stay pending so the run pauses. A decision made
    for other arguments than the request's (a different ``args_hash``) denies.
    """

    def __init__(self, store: ApprovalBook, fallback: Handler = None) -> None:
        self.store = store
        self.fallback = fallback

    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        """The recorded decision, the fallback's answer, or ``None`` (still pending)."""
        row = self.store.approval(request.run_id, request.approval_id)
        if row is None or row.status == "pending":
            return await ask(self.fallback, request)
        if row.step != request.step:
            # Two steps' calls share an id (the model chose them): this decision was about
            # the other call; fail closed rather than let it approve this one.
            return Denied(
                f"approval {request.approval_id!r} was decided for a call of another step "
                f"({row.step}); this call has no approval of its own",
                by="loopwise",
            )
        if row.args_hash != request.args_hash:
            # loopwise refuses here, not the person: their decision was about other arguments.
            return Denied(
                "the approval was given for different arguments than this call has "
                f"({request.approval_id}, {row.status} by {row.decided_by})",
                by="loopwise",
            )
        return verdict_from_data(
            {
                "decision": row.status,
                "by": row.decided_by,
                "reason": row.decision_reason,
                "args": row.edited_args,
                "decided_at": row.decided_at,
            }
        )
