"""A plain function as a step: :class:`FunctionStep` and the :func:`step` decorator.

The smallest :class:`~loopwise.core.step.Step`: the function's annotations give its
``input_type`` and ``output_type`` (for a workflow's graph checks), and a resume restores
its recorded output as the declared return type (:class:`~loopwise.core.replay.Restorer`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, get_type_hints, overload

from loopwise.core.members import StepDefaults
from loopwise.core.names import check_name
from loopwise.core.replay import Restorer
from loopwise.core.shape import Kind, Shape
from loopwise.errors import ConfigError

if TYPE_CHECKING:
    from loopwise.core.step import Context

__all__ = ["FunctionStep", "step"]


class FunctionStep(StepDefaults):
    """A plain function (sync or async) as a step; sync ones run off the event loop.

    The function takes ``(input)`` or ``(input, ctx)``. Its annotations give
    ``input_type`` and ``output_type`` for graph checks. A sync function runs in a worker
    thread, so blocking I/O cannot stall other runs; the hop is not free, so write quick
    pure code (routing, reshaping) as ``async def`` to run it on the loop itself.
    """

    needs_model = False
    """Plain code: running it needs no model (:func:`~loopwise.core.step.needs_model`)."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        self.fn = fn
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
        self.input_type: Any = hints.get(params[0], Any)
        self.output_type: Any = hints.get("return", Any)
        self._restorer = Restorer(self.output_type)
        functools.update_wrapper(self, fn)

    async def run(self, input: Any, ctx: Context) -> Any:
        """Call the function (in a worker thread when it is sync; in place under an engine,
        whose workflow code has no threads and does its outside-world work elsewhere)."""
        args = (input, ctx) if self._takes_ctx else (input,)
        if self._is_async:
            return await self.fn(*args)
        if ctx.offload is not None:
            result = self.fn(*args)
        else:
            result = await asyncio.to_thread(self.fn, *args)
        if inspect.isawaitable(result):  # a sync wrapper that returns a coroutine
            return await result
        return result

    def restorable(self, output: Any, recorded: Any) -> bool:
        """Whether a resume may take ``output`` from its record (a ``Restorer`` says)."""
        return self._restorer.exact(output, recorded)

    def restore(self, input: Any, recorded: Any) -> Any:
        """The output ``recorded`` stands for, as the declared return type (or ``RERUN``)."""
        return self._restorer.restore(recorded)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly."""
        return self.fn(*args, **kwargs)

    def describe(self) -> Shape:
        """A function step: plain code, nothing inside it to review."""
        return Shape(kind=Kind.FUNCTION, name=self.name)

    def __repr__(self) -> str:
        return f"<step {self.name}>"


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return get_type_hints(fn)
    except (NameError, TypeError):
        return {}


@overload
def step(fn: Callable[..., Any], /) -> FunctionStep: ...
@overload
def step(*, name: str | None = None) -> Callable[[Callable[..., Any]], FunctionStep]: ...


def step(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None
) -> FunctionStep | Callable[[Callable[..., Any]], FunctionStep]:
    """Make a plain function a step: ``@step`` or ``@step(name="route")``."""
    if fn is not None:
        return FunctionStep(fn)
    return lambda f: FunctionStep(f, name=name)
