"""The ``worker`` verb: claim and execute runs from a shared store until told to stop.

Registered by :mod:`loopwise.cli.main`. Prints one line per run it executed on stdout
(``RUN_ID STATUS``) and what it is doing on stderr; exits 0 after SIGTERM/SIGINT once
the runs in hand finished or paused (a second signal ends it at once).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from loopwise.cli import temporal
from loopwise.cli.options import Verbs, count, store_help
from loopwise.core.names import counted, printable
from loopwise.core.result import RunResult
from loopwise.running.live import owner_id
from loopwise.running.worker import awork
from loopwise.store.base import DEFAULT_LEASE_SECONDS, StoredRun
from loopwise.store.open import open_store, require_folder

__all__ = ["add_worker_verb"]


def _report(row: StoredRun, outcome: RunResult | Exception) -> None:
    if isinstance(outcome, Exception):
        print(f"{row.run_id} error", flush=True)
        said = printable(f"loopwise worker: run {row.run_id}: {outcome}")
        print(said, file=sys.stderr, flush=True)
    else:
        print(f"{outcome.run_id} {outcome.status}", flush=True)


def _trouble(e: Exception) -> None:
    print(f"loopwise worker: cannot claim runs ({e}); trying again", file=sys.stderr, flush=True)


async def _serve(args: argparse.Namespace) -> int:
    require_folder(args.store)  # a mistyped path would wait forever on an empty store
    store = open_store(args.store, lease_seconds=args.lease)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stopping(signum: int) -> None:
        print(
            f"loopwise worker: {signal.Signals(signum).name}: finishing the runs in hand",
            file=sys.stderr,
            flush=True,
        )
        stop.set()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)  # a second signal ends the worker at once

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping, sig)
    print(
        f"loopwise worker {owner_id()} on {store.name}: "
        f"up to {counted(args.concurrency, 'run')} at once",
        file=sys.stderr,
        flush=True,
    )
    try:
        await awork(
            store,
            concurrency=args.concurrency,
            poll_seconds=args.poll,
            stop=stop,
            on_finished=_report,
            on_trouble=_trouble,
        )
    finally:
        store.close()
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    if temporal.on_temporal(args.store):
        return temporal.serve(args)
    return asyncio.run(_serve(args))


def _seconds(raw: str) -> float:
    """An argparse type: a positive number of seconds."""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {raw}")
    return value


def add_worker_verb(sub: Verbs) -> None:
    """Register ``worker`` on the CLI's subparsers."""
    p = sub.add_parser("worker", help="claim and execute queued and resumable runs")
    p.add_argument("--store", help=store_help)
    p.add_argument(
        "--concurrency", type=count(1), default=4, help="runs executed at once (default 4)"
    )
    p.add_argument(
        "--lease",
        type=_seconds,
        default=DEFAULT_LEASE_SECONDS,
        help="seconds a run of a silent worker stays its own before others take it over "
        f"(default {DEFAULT_LEASE_SECONDS:g})",
    )
    p.add_argument("--poll", type=_seconds, default=1.0, help="seconds between polls (default 1)")
    p.set_defaults(handler=_cmd_worker)
