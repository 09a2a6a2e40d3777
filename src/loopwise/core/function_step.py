"""A plain function as a step: :class:`FunctionStep` and the :func:`step` decorator.

The smallest :class:`~loopwise.core.step.Step`: the function's annotations give its
``input_type`` and ``output_type`` (for a workflow's graph checks), and a resume restores
its recorded output as the declared return type (:class:`~loopwise.core.replay.Restorer`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, cast, get_type_hints, overload

import typing_extensions

from loopwise.core.jsontypes import JSONValue
from loopwise.core.members import StepDefaults
from loopwise.core.names import check_name
from loopwise.core.replay import Restorer
from loopwise.core.shape import Kind, Shape
from loopwise.errors import ConfigError

if TYPE_CHECKING:
    from loopwise.core.step import Context

__all__ = ["FunctionStep", "step"]

P = typing_extensions.ParamSpec("P", default=...)
"""The parameters of the function a step wraps (``(input)`` or ``(input, ctx)``)."""
R = typing_extensions.TypeVar("R", default=Any)
"""What the function returns (a coroutine for an ``async def``)."""


class FunctionStep(StepDefaults, Generic[P, R]):
    """A plain function (sync or async) as a step; sync ones run off the event loop.

    The function takes ``(input)`` or ``(input, ctx)``. Its annotations give
    ``input_type`` and ``output_type`` for graph checks. A sync function runs in a worker
    thread, so blocking I/O cannot stall other runs; the hop is not free, so write quick
    pure code (routing, reshaping) as ``async def`` to run it on the loop itself.
    """

    needs_model = False
    """Plain code: running it needs no model (:func:`~loopwise.core.step.needs_model`)."""

    def __init__(self, fn: Callable[P, R], *, name: str | None = None) -> None:
        self.fn = fn
        # The same function, as run() calls it: with (input) or (input, ctx), checked below.
        self._call: Callable[..., object] = fn
        self.name = check_name(name or fn.__name__, what="step")
        self.description = inspect.getdoc(fn) or ""
        params = list(inspect.signature(fn).parameters)
        if not 1 <= len(params) <= 2:
            raise ConfigError(
                f"step {self.name!r} must take (input) or (input, ctx), not {len(params)} "
                "parameters",
                name=self.name,
            )
        self._takes_ctx = len(params) == 2
        # An object with an async __call__ is async too (iscoroutinefunction says no).
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__
        )
        hints = _hints(fn)
        self.input_type = hints.get(params[0], Any)
        self.output_type = hints.get("return", Any)
        self._restorer = Restorer(self.output_type)
        functools.update_wrapper(self, fn)

    async def run(self, input: object, ctx: Context) -> Any:
        """Call the function (in a worker thread when it is sync; in place under an engine,
        whose workflow code has no threads and does its outside-world work elsewhere)."""
        args = (input, ctx) if self._takes_ctx else (input,)
        if self._is_async:
            # cast: an async function's call is its coroutine (_is_async, checked in __init__).
            return await cast("Awaitable[object]", self._call(*args))
        if ctx.offload is not None:
            result = self._call(*args)
        else:
            result = await asyncio.to_thread(self._call, *args)
        if inspect.isawaitable(result):  # a sync wrapper that returns a coroutine
            return await result
        return result

    def restorable(self, output: object, recorded: JSONValue) -> bool:
        """Whether a resume may take ``output`` from its record (a ``Restorer`` says)."""
        return self._restorer.exact(output, recorded)

    def restore(self, input: object, recorded: JSONValue) -> object:
        """The output ``recorded`` stands for, as the declared return type (or ``RERUN``)."""
        return self._restorer.restore(recorded)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the wrapped function directly."""
        return self.fn(*args, **kwargs)

    def describe(self) -> Shape:
        """A function step: plain code, nothing inside it to review."""
        return Shape(kind=Kind.FUNCTION, name=self.name)

    def __repr__(self) -> str:
        return f"<step {self.name}>"


def _hints(fn: object) -> dict[str, Any]:
    try:
        return get_type_hints(fn)
    except (NameError, TypeError):
        return {}


@overload
def step(fn: Callable[P, R], /) -> FunctionStep[P, R]: ...
@overload
def step(*, name: str | None = None) -> Callable[[Callable[P, R]], FunctionStep[P, R]]: ...


def step(fn: Callable[..., object] | None = None, /, *, name: str | None = None) -> object:
    """Make a plain function a step: ``@step`` or ``@step(name="route")``."""
    if fn is not None:
        return FunctionStep(fn)
    return lambda f: FunctionStep(f, name=name)
