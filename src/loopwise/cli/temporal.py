"""The verbs on a ``temporal://HOST:PORT/NAMESPACE`` store (:mod:`loopwise.integrations.temporal`).

``run`` starts the run as a Temporal workflow and serves it in this process until it
pauses for a person or ends (``--queue``: only starts it); ``worker`` serves every run of
the address's task queue; ``pending``, ``approve``/``deny``, ``runs list``/``show`` and
``serve`` read and decide through :func:`open_runs`. Every other verb refuses the URL in one line
(:func:`loopwise.store.open.open_store`). Without ``loopwise[temporal]`` each of these fails
in one line naming the extra.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING

from loopwise.cli.options import UsageError, budget_of, given
from loopwise.core.jsontypes import JSONValue
from loopwise.store.open import store_location

if TYPE_CHECKING:
    from loopwise.core.result import RunResult
    from loopwise.integrations.temporal.store import TemporalStore
    from loopwise.running.targets import Target

__all__ = ["on_temporal", "open_runs", "run", "serve"]

_LOCAL_ONLY = {
    "deps": "--deps (a worker makes deps with the target module's make_deps())",
    "conversation": "--conversation",
    "stream": "--stream",
    "api": "--api (start the worker with LOOPWISE_API set)",
    "structured_mode": "--structured-mode",
}


def on_temporal(store: str | None) -> bool:
    """Whether ``--store`` (or ``$LOOPWISE_STORE``) is a ``temporal://`` URL."""
    return store_location(store)[0] == "temporal"


def open_runs(store: str | None) -> TemporalStore:
    """The store ``pending``, ``approve``/``deny`` and ``runs`` read and decide through."""
    from loopwise.integrations.temporal.store import TemporalStore  # the optional extra

    return TemporalStore(store_location(store)[1])


def run(
    args: argparse.Namespace, target: Target, payload: JSONValue, wants_model: bool
) -> RunResult | str:
    """``run`` on Temporal: the run's :class:`RunResult` once it paused or ended, or its id
    when ``--queue`` only started it."""
    for flag, shown in _LOCAL_ONLY.items():
        if given(args, flag):
            raise UsageError(f"{shown} is not available for a run on Temporal")
    name = args.model or os.environ.get("LOOPWISE_MODEL") if wants_model else None
    if wants_model:
        from loopwise.running.targets import model_for

        model_for(target, name)  # a model that cannot be made fails here, not on a worker
    from loopwise.core.events import jsonable  # here: the store verbs load no run kernel
    from loopwise.core.execute import new_run_id
    from loopwise.core.usage import Budget
    from loopwise.integrations.temporal import worker  # the optional extra
    from loopwise.running.runner import run_limits

    with open_runs(args.store) as st:
        run_id = st.start(
            args.target,
            jsonable(payload),
            target=target.step.name,
            model=name,
            options=run_limits(budget_of(args) or Budget(), args.max_steps),
            run_id=new_run_id(),
        )
        if args.queue:
            return run_id
        result: RunResult = worker.run(st, run_id)
        return result


def serve(args: argparse.Namespace) -> int:
    """``worker`` on Temporal: serve the address's runs until SIGTERM/SIGINT."""
    import asyncio  # here: the store verbs this module also serves load no event loop

    from loopwise.integrations.temporal.worker import serve as served  # the optional extra

    url = store_location(args.store)[1]

    async def serving() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(
            f"loopwise worker on {url}: serving its runs, up to {args.concurrency} model "
            "calls, tool calls and judgements at once",
            file=sys.stderr,
            flush=True,
        )
        await served(url, stop, concurrency=args.concurrency)

    asyncio.run(serving())
    return 0
