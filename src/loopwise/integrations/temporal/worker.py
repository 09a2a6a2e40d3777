"""Workers for runs on Temporal, and what ``loopwise run``/``worker`` do with a
``temporal://`` store.

A worker serves the one workflow type (:class:`~.workflow.LoopwiseRun`) and its
activities (:class:`~.activities.Activities`) on the address's task queue. The workflow
runs in Temporal's sandbox with loopwise's modules passed through (they are imported once
per process, not per run; loopwise's own code is the same on replay), and a target's
module is loaded passed through too (:mod:`.workflow`).

:func:`run` serves a run started with :meth:`~.store.TemporalStore.start` in this process
until it pauses for a person or ends, as a local ``loopwise run`` does; a paused run goes
on in any ``loopwise worker`` of the same address once it is decided (or when one starts:
decisions sent while no worker runs wait in Temporal). :func:`serve` is ``loopwise worker``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from loopwise.core.result import RunResult
from loopwise.errors import missing_extra
from loopwise.integrations.temporal.activities import Activities
from loopwise.integrations.temporal.address import TemporalAddress
from loopwise.integrations.temporal.store import TemporalStore, connect
from loopwise.running.stored import stored_result

try:
    from temporalio.client import Client
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
except ImportError as e:
    raise missing_extra("temporal", e, needed_by="a temporal:// store") from None

from loopwise.integrations.temporal.workflow import LoopwiseRun

__all__ = ["new_worker", "run", "sandbox", "serve"]

SETTLED = frozenset({"queued", "running"})
"""Statuses of a run still on its way (anything else: paused or ended)."""


def sandbox() -> SandboxedWorkflowRunner:
    """Temporal's workflow sandbox with loopwise's modules passed through (a worker's, and a
    replayer's that checks committed histories)."""
    # What loopwise imports lazily, imported now: not first inside workflow code, where
    # a slow import would hold up a workflow task past its deadlock timeout.
    import loopwise.models.openai  # noqa: F401

    restrictions = SandboxRestrictions.default.with_passthrough_modules("loopwise")
    return SandboxedWorkflowRunner(restrictions=restrictions)


def new_worker(
    client: Client, address: TemporalAddress, *, concurrency: int | None = None
) -> Worker:
    """A worker of ``address``'s task queue, making at most ``concurrency`` model calls,
    tool calls and judgements at once (``None``: the SDK's default). It keeps the runs it
    served in memory (a run not kept would replay its whole history at every step); when
    it stops, another worker takes its runs over within seconds (the sticky queue's
    timeout)."""
    return Worker(
        client,
        task_queue=address.task_queue,
        workflows=[LoopwiseRun],
        activities=Activities().all(),
        workflow_runner=sandbox(),
        max_concurrent_activities=concurrency,
        max_concurrent_local_activities=concurrency,
        # A worker killed with runs in memory: another takes them over this soon.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
    )


def run(store: TemporalStore, run_id: str, *, poll_seconds: float = 0.05) -> RunResult:
    """Serve the run ``run_id`` in this process until it pauses or ends; the result."""

    client = store.client

    async def served() -> None:
        async with new_worker(client, store.address):
            while await store.astatus(run_id) in SETTLED:
                await asyncio.sleep(poll_seconds)

    store.call(served())
    row = store.get_run(run_id)
    return stored_result(store, row, pending=store.pending(run_id))


async def serve(url: str, stop: asyncio.Event, *, concurrency: int | None = None) -> None:
    """``loopwise worker`` on a ``temporal://`` store: serve runs until ``stop`` is set, at
    most ``concurrency`` activities at once."""
    address = TemporalAddress.parse(url)
    client = await connect(address)
    async with new_worker(client, address, concurrency=concurrency):
        await stop.wait()
