"""The scales of a chart's axes: round ends, a 1-2-2.5-5 step and its ticks.

Geometry only (no SVG): :mod:`loopwise.evidence.charts` draws with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["axis_span", "least_cost_span", "nice_step", "ticks"]


def axis_span(
    values: Sequence[float], floor: float, ceil: float, least: float
) -> tuple[float, float, float]:
    """A nice axis over ``values`` within [floor, ceil], at least ``least`` wide:
    ``(low, high, step)`` with both ends on a multiple of a 1-2-2.5-5 step."""
    lo, hi = min(values), max(values)
    if hi - lo < least:
        mid = (lo + hi) / 2
        lo, hi = mid - least / 2, mid + least / 2
    pad = (hi - lo) * 0.06
    lo, hi = max(floor, lo - pad), min(ceil, hi + pad)
    if hi - lo < least:  # pushed against a wall: grow away from it
        lo, hi = (lo, lo + least) if lo == floor else (hi - least, hi)
    step = nice_step((hi - lo) / 4)
    lo = max(floor, math.floor(lo / step + 1e-9) * step)
    hi = min(ceil, math.ceil(hi / step - 1e-9) * step)
    return lo, hi, step


def nice_step(raw: float) -> float:
    """The least 1-2-2.5-5 multiple of a power of ten at or above ``raw`` (1 for ``raw`` ≤ 0):
    an axis step, or the top of an axis that starts at 0."""
    if raw <= 0:
        return 1.0
    exp = 10.0 ** math.floor(math.log10(raw))
    return next(m * exp for m in (1, 2, 2.5, 5, 10) if raw <= m * exp * (1 + 1e-9))


def ticks(lo: float, hi: float, step: float) -> list[float]:
    count = round((hi - lo) / step)
    return [lo + k * step for k in range(count + 1)]


def least_cost_span(costs: Sequence[float]) -> float:
    """The narrowest cost axis: a fifth of the largest cost, or a dollar-cent when all are 0."""
    least = max(abs(c) for c in costs) * 0.2
    return least if least > 0 else 0.01  # a cost of 5e-324 has no fifth: it is 0 here
