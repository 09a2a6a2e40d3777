"""HTTP clients shared by the models of one process: one connection pool, one SSL context.

A worker executes many runs, each with a model made from the name the run recorded. Built
per run, each model would open its own client — and load the CA bundle into a new SSL
context (~28 ms of CPU, even for an ``http://`` URL) — for a run that needs ~10 ms. Inside
:func:`shared_clients` (a worker's whole life), models with the same settings take one
client from the block's pool, which closes them when it ends; a model's ``aclose()`` leaves
a pooled client open for the next run. Outside such a block a model owns its client.

The pool is the block's, not the process's: it lives in a context variable that tasks
started inside the block inherit, so nothing outside it (another test, another worker in the
same process) sees it. Imports nothing heavier than ``contextvars``: a worker that serves
only scripted runs never loads the ``openai`` SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Protocol, TypeVar, cast

__all__ = ["Closable", "pooled", "shared_clients"]


class Closable(Protocol):
    """A client the pool can close (``openai.AsyncOpenAI`` is one)."""

    async def close(self) -> None: ...


C = TypeVar("C", bound=Closable)

_POOL: ContextVar[dict[str, Closable] | None] = ContextVar("loopwise_clients", default=None)


@asynccontextmanager
async def shared_clients() -> AsyncIterator[None]:
    """Within the block, models with the same settings share one client, closed at its end."""
    pool: dict[str, Closable] = {}
    token = _POOL.set(pool)
    try:
        yield
    finally:
        _POOL.reset(token)
        for client in pool.values():
            await client.close()


def pooled(key: str, build: Callable[[], C]) -> tuple[C, bool]:
    """The client for ``key`` and whether the pool owns it: inside :func:`shared_clients`
    the pool's (built by ``build`` on first use), else a new one the caller owns."""
    pool = _POOL.get()
    if pool is None:
        return build(), False
    if key not in pool:
        pool[key] = build()
    return cast(C, pool[key]), True  # one key, one kind of client: the one built for it
