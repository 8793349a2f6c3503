"""Student t and normal distributions in pure Python (no scipy at run time).

Why here: the campaign, the verdict and the decision library all need t quantiles for
a handful of values; one implementation (regularized incomplete beta by a modified
Lentz continued fraction, inverse by bisection, |error| < 1e-10, checked against
published tables in tests/test_stats_decide.py) serves them all.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist


class StatsError(ValueError):
    """Input that no statistic can be computed from (empty, NaN, non-positive ratios)."""


def z_quantile(p: float) -> float:
    """The ``p`` quantile of the standard normal."""
    return NormalDist().inv_cdf(p)


# --- Student t distribution -------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (fractional and infinite df allowed)."""
    if df <= 0:
        raise StatsError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(df):
        return NormalDist().cdf(t)
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """Inverse of :func:`t_cdf` by bisection (monotone, so it cannot miss); |error| < 1e-10.

    Cached: a baseline comparison asks for the same (p, df) many times.
    """
    if not 0.0 < p < 1.0:
        raise StatsError(f"probability must be in (0, 1), got {p}")
    if df <= 0:
        raise StatsError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(df) or df > 1e7:
        return NormalDist().inv_cdf(p)
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)
