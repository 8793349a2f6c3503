"""Summarise the reps of one metric: what a reader needs to judge their quality.

Why geometric as well as arithmetic: the verdict works on log values (a change is a
ratio), so the spread it uses is the CV-like standard deviation of the logs; the
arithmetic mean is what the report prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .decide import outliers
from .tdist import StatsError, t_quantile


@dataclass(frozen=True)
class RepSummary:
    n: int
    mean: float  # arithmetic
    std: float | None  # sample (ddof=1)
    cv: float | None  # std of the log values (~ coefficient of variation)
    lower: float | None  # two-sided ``level`` t interval of the mean
    upper: float | None
    level: float
    suspects: tuple[int, ...]  # indices :func:`outliers` would re-run


def summarise(values: Sequence[float], *, level: float = 0.95) -> RepSummary:
    """Mean, sample std, log-scale spread, t interval and outlier suspects of one metric's reps."""
    xs = [float(x) for x in values]
    if not xs or any(not math.isfinite(x) for x in xs):
        raise StatsError(f"summarise needs finite values, got {values!r}")
    n = len(xs)
    m = math.fsum(xs) / n
    if n < 2:
        return RepSummary(n, m, None, None, None, None, level, ())
    s = math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * s / math.sqrt(n)
    cv: float | None = None
    suspects: tuple[int, ...] = ()
    if all(x > 0 for x in xs):
        logs = [math.log(x) for x in xs]
        lm = math.fsum(logs) / n
        cv = math.sqrt(math.fsum((x - lm) ** 2 for x in logs) / (n - 1))
        suspects = tuple(outliers(xs))
    return RepSummary(n, m, s, cv, m - half, m + half, level, suspects)
