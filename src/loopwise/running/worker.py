"""Workers: processes that claim runs from a shared store and execute them.

``loopwise worker [--store URL] [--concurrency N]`` (or :func:`awork`) takes, in arrival
order, runs that are ``queued`` (``loopwise run ... --queue``,
:func:`~loopwise.running.runner.enqueue`), paused runs whose approvals are all decided, and
``running`` runs whose owner's lease lapsed (a process or machine that died), and
executes up to ``concurrency`` of them at once. A claim is atomic (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL, the write lock on SQLite), so workers on many machines never
execute one run twice. A decided approval or a queued run wakes the waiting workers at
once on PostgreSQL (LISTEN/NOTIFY); on SQLite they poll every ``poll_seconds``. The runs
of one worker share one HTTP client per model setting
(:func:`~loopwise.models.clients.shared_clients`), closed when the worker returns.

Stopping (SIGTERM or SIGINT to the CLI, ``stop.set()`` in Python) ends the claiming and
lets the runs in hand finish or pause before the worker returns; a worker killed
outright leaves its runs to the others once their leases lapse. A store that fails to
answer a claim (a locked file, a dropped connection) is tried again after
``poll_seconds``: the runs in hand go on meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from loopwise.core.result import RunResult
from loopwise.errors import ConfigError, StoreError
from loopwise.models.clients import shared_clients
from loopwise.running.live import owner_id
from loopwise.running.runner import execute_claimed
from loopwise.store.base import RunStore, StoredRun

__all__ = ["Finished", "Idle", "Trouble", "awork"]

Finished = Callable[[StoredRun, RunResult | Exception], None]
"""Told about each run a worker executed: how it ended, or what it raised."""

Trouble = Callable[[StoreError], None]
"""Told when a claim failed (the worker tries again after ``poll_seconds``)."""

Idle = Callable[[], None]
"""Told each time a worker has no run in hand after looking for one to claim (or failing
to, when the store did not answer)."""


async def awork(
    store: RunStore,
    *,
    concurrency: int = 4,
    poll_seconds: float = 1.0,
    stop: asyncio.Event | None = None,
    on_finished: Finished | None = None,
    on_trouble: Trouble | None = None,
    decided_only: bool = False,
    wake: asyncio.Event | None = None,
    on_idle: Idle | None = None,
) -> int:
    """Claim and execute runs from ``store`` until ``stop`` is set; how many ran.

    ``decided_only`` claims only paused runs whose approvals are all decided (``loopwise
    serve --resume``); ``wake``, once set, makes the worker claim at once (it clears it
    before each look); ``on_idle`` is called each time the worker looked (or the store
    failed the look) and has nothing to run. Raises :class:`~loopwise.errors.ConfigError`
    for a ``concurrency`` below 1. A run that raises is recorded ``error`` by the runner
    and reported to ``on_finished``; a claim the store failed is reported to
    ``on_trouble`` and tried again; the worker goes on.
    """
    if concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, not {concurrency}", name="concurrency")
    # One HTTP client (one SSL context) per model setting for the worker's whole life,
    # not one per run: building one costs more CPU than the run it serves.
    async with shared_clients():
        return await _work(
            store,
            concurrency=concurrency,
            poll_seconds=poll_seconds,
            stop=stop or asyncio.Event(),
            wake=wake or asyncio.Event(),
            hooks=_Hooks(on_finished, on_trouble, on_idle),
            decided_only=decided_only,
        )


@dataclass(frozen=True, slots=True)
class _Hooks:
    finished: Finished | None
    trouble: Trouble | None
    idle: Idle | None


async def _work(
    store: RunStore,
    *,
    concurrency: int,
    poll_seconds: float,
    stop: asyncio.Event,
    wake: asyncio.Event,
    hooks: _Hooks,
    decided_only: bool,
) -> int:
    owner, done = owner_id(), 0
    running: set[asyncio.Task[None]] = set()
    # Listen before the first claim, so nothing decided in between goes unheard.
    waiter = asyncio.create_task(asyncio.to_thread(store.wait_for_work, 0))
    stopping = asyncio.create_task(stop.wait())
    waking = asyncio.create_task(wake.wait())
    # A store that predates ``decided_only`` still serves a worker that takes every kind.
    claim = partial(store.claim_next, decided_only=True) if decided_only else store.claim_next
    while not stop.is_set():
        wake.clear()  # what wakes it from here on is looked for again
        try:
            while len(running) < concurrency and (row := claim(owner)) is not None:
                task = asyncio.create_task(_execute(store, row, hooks.finished))
                running.add(task)
                task.add_done_callback(running.discard)
                done += 1
        except StoreError as e:
            # Raising here would cancel the runs in hand and leave them `cancelled`, which
            # no worker claims: a store that failed once is asked again instead.
            if hooks.trouble is not None:
                hooks.trouble(e)
            if not running and hooks.idle is not None:
                hooks.idle()  # (a store that stays away must not hold who waits for idle)
            await asyncio.wait({stopping}, timeout=poll_seconds)
            continue
        if not running and hooks.idle is not None:
            hooks.idle()
        # A worker with its hands full waits for a run of its own to end, not for news of
        # claimable runs it could not take: each NOTIFY wakes every listening worker, and
        # eight busy ones woken per queued run spent more CPU on it than on their runs.
        # (The news waits on the listening connection; the next look drains it.)
        if waiter.done() and len(running) < concurrency:
            waiter = asyncio.create_task(asyncio.to_thread(store.wait_for_work, poll_seconds))
        if waking.done():
            waking = asyncio.create_task(wake.wait())
        waits = {stopping, waking, *running} | (set() if waiter.done() else {waiter})
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    waking.cancel()
    if running:
        await asyncio.wait(running)
    await waiter
    return done


async def _execute(store: RunStore, row: StoredRun, on_finished: Finished | None) -> None:
    outcome: RunResult | Exception
    try:
        outcome = await execute_claimed(store, row)
    except Exception as e:
        outcome = e
    if on_finished is not None:
        on_finished(row, outcome)
