"""Exact statistics for rates a team signs off on: :func:`binom_cdf`, the one-sided
Clopper–Pearson bounds (:func:`clopper_pearson_upper`, :func:`clopper_pearson_lower`), how
many error-free cases bound a rate (:func:`cases_to_bound`, :func:`cases_to_bound_rate`),
and the paired comparison of two 0/1 outcomes on the same cases (:func:`mcnemar_exact`,
:func:`newcombe_paired`).

Why these: a rate seen on few cases has no useful normal approximation (0 errors in 11
cases gives a zero-variance t-interval, "+0 to +0", which is degenerate, not certain). The
Clopper–Pearson bound inverts the exact binomial tail, so "0 errors in 11 cases" bounds the
error rate below 1 − 0.1^(1/11) ≈ 19% at 90% confidence, honestly. For two targets on the
same cases only the discordant cases (one right, the other wrong) carry information about
which is better: the exact test conditions on them (McNemar's, a binomial test at ½), and
Newcombe's hybrid score interval (1998, method 10) bounds the difference of the two rates.

Everything is the standard library: the binomial tail is summed term by term from its
largest term (found in log space with ``math.lgamma``, the rest by the ratio of
neighbours), bounds are found by bisection on it (the tail is monotone in ``p``).
Every function raises ``ValueError`` naming the argument that is out of range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

__all__ = [
    "binom_cdf",
    "binom_sf",
    "cases_to_bound",
    "cases_to_bound_rate",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "mcnemar_exact",
    "newcombe_paired",
    "wilson_interval",
    "zero_error_bound",
]

_BISECTIONS = 64


def _check_counts(k: int, n: int) -> None:
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    if not 0 <= k <= n:
        raise ValueError(f"k must be between 0 and n={n}, not {k}")


def _check_open_unit(name: str, value: float) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{name} must be strictly between 0 and 1, not {value}")


def _binom_sum(lo: int, hi: int, n: int, p: float) -> float:
    """``P(lo <= X <= hi)`` for ``X ~ Binomial(n, p)``: the largest term in the range in log
    space (``math.lgamma``), the others by the ratio of neighbours walking away from it,
    each at most 1 relative to it (no overflow), stopping once they stop counting."""
    lo, hi = max(lo, 0), min(hi, n)
    if lo > hi:
        return 0.0
    if p <= 0.0:
        return 1.0 if lo == 0 else 0.0
    if p >= 1.0:
        return 1.0 if hi == n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    top = min(max(math.floor((n + 1) * p), lo), hi)  # the mode, or the range's end nearest it
    log_top = (
        math.lgamma(n + 1)
        - math.lgamma(top + 1)
        - math.lgamma(n - top + 1)
        + top * log_p
        + (n - top) * log_q
    )
    odds = p / (1 - p)
    terms = [1.0]
    term = 1.0
    for i in range(top, lo, -1):  # term(i-1) / term(i) = i / (n-i+1) / odds
        term *= i / ((n - i + 1) * odds)
        terms.append(term)
        if term < 1e-18:
            break
    term = 1.0
    for i in range(top, hi):  # term(i+1) / term(i) = (n-i) / (i+1) * odds
        term *= (n - i) / (i + 1) * odds
        terms.append(term)
        if term < 1e-18:
            break
    return min(1.0, math.exp(log_top) * math.fsum(terms))


def binom_cdf(k: int, n: int, p: float) -> float:
    """``P(X <= k)`` for ``X ~ Binomial(n, p)``: the chance of at most ``k`` errors in ``n``
    cases when each is an error with probability ``p`` (1.0 for ``k >= n``; 0.0 for ``k < 0``)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    if not 0 <= p <= 1:
        raise ValueError(f"p must be between 0 and 1, not {p}")
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return _binom_sum(0, k, n, p)


def binom_sf(k: int, n: int, p: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, p)`` (summed directly, not ``1 - cdf``, so a small
    upper tail keeps its digits)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    if not 0 <= p <= 1:
        raise ValueError(f"p must be between 0 and 1, not {p}")
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return _binom_sum(k, n, n, p)


def _bisect(decreasing: bool, f_minus_target: Callable[[float], float]) -> float:
    """The root in [0, 1] of a monotone function."""
    low, high = 0.0, 1.0
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2
        above = f_minus_target(mid) > 0
        if above == decreasing:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def clopper_pearson_upper(k: int, n: int, confidence: float = 0.9) -> float:
    """The one-sided Clopper–Pearson upper bound of a rate seen ``k`` times in ``n``: the
    largest ``p`` with ``P(X <= k; n, p) >= 1 - confidence``. With probability at least
    ``confidence`` the true rate is at most this. 1.0 when ``k == n`` (including no cases)."""
    _check_counts(k, n)
    _check_open_unit("confidence", confidence)
    if k == n:
        return 1.0
    if k == 0:  # closed form: (1 - p)^n = 1 - confidence
        return -math.expm1(math.log1p(-confidence) / n)
    tail = 1 - confidence
    return _bisect(True, lambda p: binom_cdf(k, n, p) - tail)


def clopper_pearson_lower(k: int, n: int, confidence: float = 0.9) -> float:
    """The one-sided Clopper–Pearson lower bound: the smallest ``p`` with
    ``P(X >= k; n, p) >= 1 - confidence``. 0.0 when ``k == 0`` (including no cases)."""
    _check_counts(k, n)
    _check_open_unit("confidence", confidence)
    if k == 0:
        return 0.0
    if k == n:  # closed form: p^n = 1 - confidence
        return math.exp(math.log1p(-confidence) / n)
    tail = 1 - confidence
    return _bisect(False, lambda p: binom_sf(k, n, p) - tail)


def zero_error_bound(n: int, delta: float = 0.1) -> float:
    """What ``n`` error-free cases bound a rate below at confidence ``1 - delta``:
    ``1 - delta^(1/n)`` (1.0 with no case)."""
    return clopper_pearson_upper(0, n, 1 - delta) if n > 0 else 1.0


def cases_to_bound(alpha: float, delta: float = 0.1) -> int:
    """The fewest error-free cases that bound a rate below ``alpha`` at confidence
    ``1 - delta``: the smallest ``n`` with ``(1 - alpha)^n <= delta``, i.e.
    ``⌈ln δ / ln(1 − α)⌉`` (checked in integers so a ratio landing on a whole number is not
    rounded up by float error). Fewer accepted cases than this can never be certified."""
    _check_open_unit("alpha", alpha)
    _check_open_unit("delta", delta)
    n = max(1, math.ceil(math.log(delta) / math.log1p(-alpha)))
    if 1 - alpha == 1.0:
        return n  # alpha below float resolution: (1 - alpha)^n is 1, the log form is all
    while n > 1 and (1 - alpha) ** (n - 1) <= delta:
        n -= 1
    while (1 - alpha) ** n > delta:
        n += 1
    return n


def cases_to_bound_rate(rate: float, alpha: float, delta: float = 0.1) -> int | None:
    """About how many cases, were errors to keep arriving at ``rate``, would bound the
    error rate below ``alpha`` at confidence ``1 - delta`` (errors counted as
    ``⌈rate · n⌉``); ``None`` when ``rate >= alpha`` (no number of cases would)."""
    _check_open_unit("alpha", alpha)
    _check_open_unit("delta", delta)
    if not 0 <= rate < alpha:
        return None
    if rate == 0:
        return cases_to_bound(alpha, delta)

    def bounded(n: int) -> bool:  # the upper bound is <= α exactly when the tail at α is <= δ
        return binom_cdf(min(n, math.ceil(rate * n - 1e-9)), n, alpha) <= delta

    high = cases_to_bound(alpha, delta)
    if high > 10**8:
        return None  # more cases than anyone will label: say none would
    while not bounded(high):
        high *= 2
        if high > 10**8:
            return None
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if bounded(mid) else (mid, high)
    return high


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """The exact two-sided p-value that two targets are equally good, from the cases only
    ``a`` got right (``only_a``) and only ``b`` got right (``only_b``): under the null each
    discordant case is a fair coin, so ``min(1, 2 · P(X <= min(b, c)))`` for
    ``X ~ Binomial(b + c, ½)`` (1.0 with no discordant case)."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, not {only_a}, {only_b}")
    m = only_a + only_b
    if m == 0:
        return 1.0
    return min(1.0, 2 * binom_cdf(min(only_a, only_b), m, 0.5))


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The two-sided Wilson score interval of ``successes`` of ``n`` at ``confidence``
    (``(0, 1)`` with no case)."""
    _check_counts(successes, n)
    _check_open_unit("confidence", confidence)
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def newcombe_paired(
    both: int, only_a: int, only_b: int, neither: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe's hybrid score interval (1998, method 10) for ``rate_a - rate_b`` when both
    targets ran the same cases: ``both`` right, ``only_a`` right, ``only_b`` right,
    ``neither``. It combines the two Wilson intervals with the observed correlation ``φ``
    (0 when a margin is empty; a positive ``ad − bc`` is first reduced by ``n/2``, as
    Newcombe recommends) and never collapses to a point: 3 cases both got
    right give about (−0.56, +0.56) at 95%, not "+0 to +0". ``(-1, 1)`` with no case."""
    counts = {"both": both, "only_a": only_a, "only_b": only_b, "neither": neither}
    for name, value in counts.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, not {value}")
    _check_open_unit("confidence", confidence)
    n = both + only_a + only_b + neither
    if n == 0:
        return -1.0, 1.0
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    l1, u1 = wilson_interval(both + only_a, n, confidence)
    l2, u2 = wilson_interval(both + only_b, n, confidence)
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    cross: float = both * neither - only_a * only_b
    if cross > 0:  # Newcombe's correction: a small positive association counts as none
        cross = max(0.0, cross - n / 2)
    phi = cross / math.sqrt(margins) if margins else 0.0
    d = p1 - p2
    low = d - _square_and_add(p1 - l1, u2 - p2, phi)
    high = d + _square_and_add(u1 - p1, p2 - l2, phi)
    return max(-1.0, low), min(1.0, high)


def _square_and_add(x: float, y: float, phi: float) -> float:
    return math.sqrt(max(0.0, x * x - 2 * phi * x * y + y * y))
