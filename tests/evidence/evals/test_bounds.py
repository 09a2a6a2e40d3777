"""The exact statistics behind every certificate and verdict, each checked against an
independent computation (exact rational binomial sums, closed forms, published values) and at
the degenerate ends (no case, one case, all wrong, none wrong)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from loopwise.evidence.evals.bounds import (
    binom_cdf,
    binom_sf,
    cases_to_bound,
    cases_to_bound_rate,
    clopper_pearson_lower,
    clopper_pearson_upper,
    mcnemar_exact,
    newcombe_paired,
    wilson_interval,
    zero_error_bound,
)


def _exact_cdf(k: int, n: int, p: Fraction) -> Fraction:
    """P(X <= k) as an exact rational, term by term with math.comb."""
    return sum(
        (Fraction(math.comb(n, i)) * p**i * (1 - p) ** (n - i) for i in range(k + 1)),
        Fraction(0),
    )


@pytest.mark.parametrize(
    ("k", "n", "p"),
    [(0, 1, "1/2"), (2, 5, "1/3"), (3, 20, "1/20"), (10, 40, "1/5"), (29, 600, "1/20")],
)
def test_binom_cdf_equals_the_exact_rational_sum(k: int, n: int, p: str) -> None:
    exact = _exact_cdf(k, n, Fraction(p))
    assert binom_cdf(k, n, float(Fraction(p))) == pytest.approx(float(exact), rel=1e-10)
    assert binom_sf(k + 1, n, float(Fraction(p))) == pytest.approx(float(1 - exact), rel=1e-9)


def test_binom_cdf_by_hand() -> None:
    # n=3, p=1/2: P(X<=1) = (1 + 3) / 8
    assert binom_cdf(1, 3, 0.5) == pytest.approx(0.5)
    # n=2, p=0.1: P(X<=0) = 0.81, P(X<=1) = 0.81 + 2·0.1·0.9 = 0.99
    assert binom_cdf(0, 2, 0.1) == pytest.approx(0.81)
    assert binom_cdf(1, 2, 0.1) == pytest.approx(0.99)


def test_binom_cdf_degenerate_ends() -> None:
    assert binom_cdf(0, 0, 0.3) == 1.0  # no case: at most 0 errors for sure
    assert binom_cdf(-1, 5, 0.3) == 0.0
    assert binom_cdf(5, 5, 0.3) == 1.0  # all wrong is always "at most n"
    assert binom_cdf(0, 1, 0.3) == pytest.approx(0.7)  # one case
    assert binom_cdf(0, 10, 0.0) == 1.0 and binom_cdf(9, 10, 1.0) == 0.0
    assert binom_sf(0, 0, 0.5) == 1.0 and binom_sf(1, 0, 0.5) == 0.0
    with pytest.raises(ValueError, match="p must be"):
        binom_cdf(1, 3, 1.5)
    with pytest.raises(ValueError, match="n must be"):
        binom_cdf(0, -1, 0.5)


@pytest.mark.parametrize(("k", "n"), [(1, 10), (3, 20), (5, 100), (29, 600), (7, 8)])
def test_clopper_pearson_bounds_are_where_the_exact_tail_crosses(k: int, n: int) -> None:
    conf = 0.9
    upper = clopper_pearson_upper(k, n, conf)
    lower = clopper_pearson_lower(k, n, conf)
    tail = Fraction(1, 10)
    # the exact tail is the level at the bound and crosses it there (checked in rationals)
    below, above = Fraction(upper - 1e-7), Fraction(upper + 1e-7)
    assert _exact_cdf(k, n, below) > tail > _exact_cdf(k, n, above)
    below, above = Fraction(lower - 1e-7), Fraction(lower + 1e-7)
    assert 1 - _exact_cdf(k - 1, n, below) < tail < 1 - _exact_cdf(k - 1, n, above)
    assert lower < k / n < upper


def test_clopper_pearson_published_values() -> None:
    # 3 of 20: the exact two-sided 90% interval is (0.0423, 0.3437), i.e. one-sided 95%
    assert clopper_pearson_upper(3, 20, 0.95) == pytest.approx(0.3437, abs=1e-4)
    assert clopper_pearson_lower(3, 20, 0.95) == pytest.approx(0.0422, abs=1e-4)
    # the rule of three: 0 of n bounds the rate below about 3/n at 95%
    assert clopper_pearson_upper(0, 300, 0.95) == pytest.approx(3 / 300, rel=0.01)


def test_clopper_pearson_degenerate_ends() -> None:
    assert clopper_pearson_upper(0, 0) == 1.0 and clopper_pearson_lower(0, 0) == 0.0  # no case
    # none wrong: (1-p)^n = δ by hand
    assert clopper_pearson_upper(0, 11, 0.9) == pytest.approx(1 - 0.1 ** (1 / 11))
    assert clopper_pearson_upper(0, 11, 0.9) == pytest.approx(0.1889, abs=1e-4)
    assert clopper_pearson_upper(0, 1, 0.9) == pytest.approx(0.9)  # one case, right
    assert clopper_pearson_lower(1, 1, 0.9) == pytest.approx(0.1)  # one case, wrong
    assert clopper_pearson_upper(1, 1, 0.9) == 1.0
    # all wrong: p^n = δ
    assert clopper_pearson_upper(5, 5) == 1.0
    assert clopper_pearson_lower(5, 5, 0.9) == pytest.approx(0.1 ** (1 / 5))
    assert clopper_pearson_lower(0, 5) == 0.0
    assert zero_error_bound(0) == 1.0 and zero_error_bound(11) == pytest.approx(0.1889, abs=1e-4)
    with pytest.raises(ValueError, match="k must be"):
        clopper_pearson_upper(4, 3)
    with pytest.raises(ValueError, match="confidence"):
        clopper_pearson_upper(0, 3, 1.0)


def test_cases_to_bound_is_the_smallest_n_and_the_log_formula() -> None:
    pairs = [(0.05, 0.1), (0.01, 0.05), (0.2, 0.1), (0.5, 0.25), (0.1, 0.1), (0.5, 0.5)]
    for alpha, delta in pairs:
        n = cases_to_bound(alpha, delta)
        # smallest n with (1-α)^n <= δ, checked in exact rationals
        a, d = Fraction(alpha), Fraction(delta)
        assert (1 - a) ** n <= d < (1 - a) ** (n - 1) or n == 1
        if n > 1:
            assert (1 - a) ** (n - 1) > d
    assert cases_to_bound(0.05, 0.1) == 45 == math.ceil(math.log(0.1) / math.log(0.95))
    assert cases_to_bound(0.5, 0.25) == 2  # the ratio is exactly 2: not rounded up to 3
    assert cases_to_bound(0.5, 0.5) == 1
    # 45 error-free cases are enough to bound under 5%, 44 are not
    assert zero_error_bound(45) <= 0.05 < zero_error_bound(44)
    with pytest.raises(ValueError, match="alpha"):
        cases_to_bound(0.0, 0.1)
    with pytest.raises(ValueError, match="delta"):
        cases_to_bound(0.05, 1.0)


def test_cases_to_bound_rate() -> None:
    assert cases_to_bound_rate(0.0, 0.05) == 45
    assert cases_to_bound_rate(0.05, 0.05) is None and cases_to_bound_rate(0.3, 0.05) is None
    n = cases_to_bound_rate(0.01, 0.05)
    assert n is not None
    k = math.ceil(0.01 * n)
    assert clopper_pearson_upper(k, n, 0.9) <= 0.05
    assert clopper_pearson_upper(math.ceil(0.01 * (n - 1)), n - 1, 0.9) > 0.05


def test_mcnemar_exact_by_hand() -> None:
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)  # 2 · (1/2)^5
    assert mcnemar_exact(1, 4) == pytest.approx(2 * 6 / 32)  # 2 · (1 + 5)/32
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 0) == 1.0  # no discordant case: no evidence either way
    assert mcnemar_exact(0, 1) == 1.0  # one case cannot tell
    with pytest.raises(ValueError, match="discordant"):
        mcnemar_exact(-1, 2)


def test_wilson_interval_solves_the_score_equation() -> None:
    # independent: the Wilson bounds are the p where |p̂ - p| = z·sqrt(p(1-p)/n)
    z = 1.959963984540054
    for x, n in [(0, 3), (3, 3), (7, 20), (1, 1)]:
        low, high = wilson_interval(x, n, 0.95)
        for p in (low, high):
            if 0 < p < 1:
                assert abs(x / n - p) == pytest.approx(z * math.sqrt(p * (1 - p) / n), abs=1e-9)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(3, 3, 0.95)[0] == pytest.approx(3 / (3 + z * z))


def test_newcombe_paired_published_value() -> None:
    # Fagerland, Lydersen & Laake, "Statistical Analysis of Contingency Tables", ch. 8
    # (Cavo et al. 2012): table (59, 6 / 16, 80) → −0.0621 (95% CI −0.1186 to −0.0046)
    low, high = newcombe_paired(59, 6, 16, 80)
    assert (low, high) == (pytest.approx(-0.1186, abs=5e-5), pytest.approx(-0.0046, abs=5e-5))


def test_newcombe_paired_by_hand_and_degenerate_ends() -> None:
    z = 1.959963984540054
    # 3 cases both right: every margin but one is empty, φ = 0, the interval is ± (1 - l)
    # where l = 3 / (3 + z²) is Wilson's lower bound for 3 of 3: not "+0 to +0"
    half = 1 - 3 / (3 + z * z)
    assert newcombe_paired(3, 0, 0, 0) == (pytest.approx(-half), pytest.approx(half))
    assert half == pytest.approx(0.5615, abs=1e-4)
    assert newcombe_paired(0, 0, 0, 0) == (-1.0, 1.0)  # no case
    low, high = newcombe_paired(0, 1, 0, 0)  # one case, only a right
    assert -1 <= low < 1.0 <= high <= 1
    low, high = newcombe_paired(0, 0, 0, 4)  # all wrong on both sides
    assert low < 0 < high
    low, high = newcombe_paired(60, 0, 0, 0)  # 60 agreeing cases: narrow, still not a point
    assert -0.07 < low < 0 < high < 0.07
    with pytest.raises(ValueError, match="only_b"):
        newcombe_paired(1, 1, -1, 1)
