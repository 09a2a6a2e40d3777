"""Background mode of the Responses API: a model call that may outlast an HTTP timeout.

With ``OpenAIOptions(background=True)`` a call is posted with ``background: true``: the
server answers at once with the response ``queued``, generates it on its own, and
loopwise polls ``GET /responses/{id}`` every ``poll_seconds`` until it is done (completed,
incomplete or failed). No connection is held while the model thinks, so a long
reasoning step is bounded by the run's own limits (``max_seconds``), not by the client's
timeout. A call stopped while it polls (the run cancelled, its wall-time budget spent) has
its response cancelled on the server (``POST /responses/{id}/cancel``), so nothing goes on
generating, and billing, for a run that stopped; its resume asks again (a model call has
no effects, and an unfinished one is not journaled).
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import quote

import openai
from openai.types.responses import Response

from loopwise.core.jsontypes import JSONMapping
from loopwise.models.responses import sdk_field

__all__ = ["PENDING", "background_response"]

PENDING = frozenset({"queued", "in_progress"})
"""The statuses of a background response still being generated."""

_AUTH: openai.RequestOptions = {"security": {"bearer_auth": True}}  # as the SDK asks for auth


async def background_response(
    client: openai.AsyncOpenAI, params: JSONMapping, poll_seconds: float
) -> Response:
    """Post ``params`` (``background: true``) and poll the response until it is done; a
    poll cut short cancels it on the server and re-raises. SDK errors propagate."""
    response = await client.post("/responses", cast_to=Response, body=params, options=_AUTH)
    path = f"/responses/{quote(str(response.id), safe='')}"
    try:
        while sdk_field(response, "status") in PENDING:
            await asyncio.sleep(poll_seconds)
            response = await client.get(path, cast_to=Response, options=_AUTH)
    except BaseException:
        await asyncio.shield(_cancel(client, path))
        raise
    return response


async def _cancel(client: openai.AsyncOpenAI, path: str) -> None:
    """Best effort: a cancel that fails leaves the server to finish the response alone."""
    with contextlib.suppress(openai.OpenAIError, ValueError):
        await client.post(f"{path}/cancel", cast_to=Response, options=_AUTH)
