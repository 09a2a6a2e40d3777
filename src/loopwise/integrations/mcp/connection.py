"""One connection to an MCP server, owned by a task of its own, and running the listing's
async work from sync code (:mod:`loopwise.integrations.mcp.servers` declares tools with these).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import tempfile
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TextIO, TypeVar

from loopwise.errors import missing_extra

if importlib.util.find_spec("mcp") is None:
    # Checked here, where loopwise.mcp begins, not imported: the SDK loads when a server
    # connects. Without it, importing loopwise.mcp names the extra to install.
    raise missing_extra("mcp", ModuleNotFoundError(name="mcp"), needed_by="loopwise.mcp")

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client.session import IncomingMessage, MessageHandlerFnT

__all__ = ["Connection", "NotStarted", "Opener", "Source", "blocking", "reason"]

_STDERR_TAIL = 600

Opener = Callable[[contextlib.AsyncExitStack, TextIO, "MessageHandlerFnT"], Awaitable["Client"]]
"""Enters a connected client on the stack (then: a file for its stderr, and the handler of
the server's notifications)."""


class Source(Protocol):
    """What a connection needs of the tools it serves
    (:class:`~loopwise.integrations.mcp.servers.MCPTools`)."""

    server: str
    connect_timeout: float
    opener: Opener

    async def on_message(self, message: IncomingMessage) -> None:
        """Take a notification the server sent."""


class NotStarted(Exception):
    """A server could not be started or connected to (the message names it)."""


class Connection:
    """One connection to a server, owned by a task of its own.

    The ``mcp`` client is an anyio context that must be left in the task that entered it;
    the calls of a run come from many tasks, so one task enters it, serves until
    :meth:`aclose`, and leaves it.
    """

    def __init__(self, source: Source) -> None:
        self._source = source
        self._ready: asyncio.Future[Client] | None = None
        self._closing = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        # Read by messages while the connection lives; closed by aclose().
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115

    async def open(self) -> Client:
        """The connected client; the first caller connects, the others wait for it.

        Raises :class:`NotStarted` (naming the server) when it cannot be connected.
        """
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._owner = asyncio.create_task(self._serve(self._ready))
        timeout = self._source.connect_timeout
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except Exception as e:
            said = self.stderr_tail()
            await self.aclose()
            server = self._source.server
            if isinstance(e, TimeoutError) and not self._ready.done():
                why = f"MCP server {server!r} did not answer within {timeout}s of starting"
            else:
                why = f"MCP server {server!r} did not start: {reason(e)}"
            raise NotStarted(why + said) from e

    async def _serve(self, ready: asyncio.Future[Client]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                opener = self._source.opener
                ready.set_result(await opener(stack, self._stderr, self._source.on_message))
                await self._closing.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(e)
            if not isinstance(e, Exception):
                raise

    def stderr_tail(self) -> str:
        """What the server wrote on stderr lately (for messages), or ``""``."""
        if self._stderr.closed:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            said = " ".join(self._stderr.read().split())
            if said:
                return f"; it said: …{said[-_STDERR_TAIL:]}"
        return ""

    async def aclose(self) -> None:
        """Close the connection (stop a subprocess server); idempotent."""
        self._closing.set()
        if self._owner is not None:
            if not (self._ready is not None and self._ready.done()):
                self._owner.cancel()  # still starting: stop waiting for it
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._owner
        self._stderr.close()

    async def __aenter__(self) -> Client:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def reason(error: BaseException) -> str:
    """The innermost useful message of an error (anyio wraps failures in groups)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


_T = TypeVar("_T")


def blocking(work: Callable[[], Awaitable[_T]]) -> _T:
    """Run ``work`` to its end from sync code, inside a running event loop or not."""

    async def main() -> _T:
        return await work()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()
