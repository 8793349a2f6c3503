"""Summaries of a metric's reps and the paired uplift of two arms: the one home of both.

Why pure Python: scipy and numpy are not dependencies of the plugin, and a campaign
has a handful of reps per scenario, so speed is irrelevant and correctness is easy to
check against published tables.

Conventions (stated in every summary so nobody has to guess):

* ``std`` is the **sample** standard deviation (``ddof=1``); ``None`` for one value.
* ``ci95`` is the two-sided 95 % confidence interval of the mean, Student-t based:
  ``mean +- t(0.975, n-1) * std / sqrt(n)``; ``None`` for fewer than two values.
* Uplift of arm A over arm B uses the **pairing** that interleaved scheduling gives:
  rep k of A ran next to rep k of B, so slow drifts (temperature, background load)
  cancel in the per-rep ratio ``a_k / b_k``. The estimate is the geometric mean of
  the paired ratios minus one, and its CI is the t interval of the log ratios mapped
  back — ratios are multiplicative, so averaging them on a log scale is the honest
  way to combine them.
* :func:`summarize` is the shape of one metric in ``aggregate.json``; :func:`summarise`
  adds what the verdict reads (the spread of the logs, outlier suspects). Both are built
  from the same helpers, so the report and the verdict can never disagree on a mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from .decide import outliers
from .tdist import StatsError, t_quantile

__all__ = ["CI_KIND", "STD_KIND", "UPLIFT_KIND", "PairedUplift", "RepSummary", "Summary", "mean", "mean_ci",
           "median", "paired_uplift", "sample_std", "summarise", "summarize"]

STD_KIND = "sample (ddof=1)"
CI_KIND = "two-sided 95% Student-t interval of the mean"
UPLIFT_KIND = "paired by rep: geometric mean of a_k/b_k - 1, t interval on log ratios"


class Summary(TypedDict):
    """One metric across reps, as in ``aggregate.json`` (``None`` where there are too few values)."""

    mean: float | None
    std: float | None
    median: float | None
    ci95: list[float] | None
    n: int
    values: list[float]


class PairedUplift(TypedDict):
    """Arm A over arm B, paired by rep (``estimate``/``ci95`` ``None`` without pairs / below two pairs)."""

    estimate: float | None
    ci95: list[float] | None
    n: int
    ratios: list[float]
    kind: str


# --- descriptive statistics -------------------------------------------------------------


def _clean(values: Sequence[float], what: str) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise StatsError(f"{what}: expected numbers, got {v!r}")
        if not math.isfinite(v):
            raise StatsError(f"{what}: non-finite value {v!r}")
        out.append(float(v))
    return out


def mean(values: Sequence[float]) -> float:
    xs = _clean(values, "mean")
    if not xs:
        raise StatsError("mean of no values")
    return math.fsum(xs) / len(xs)


def sample_std(values: Sequence[float]) -> float | None:
    """Sample standard deviation (ddof=1); ``None`` for fewer than two values."""
    xs = _clean(values, "std")
    if len(xs) < 2:
        return None
    m = math.fsum(xs) / len(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def median(values: Sequence[float]) -> float:
    xs = sorted(_clean(values, "median"))
    if not xs:
        raise StatsError("median of no values")
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """t-based CI of the mean; ``None`` with fewer than two values (no spread to scale by)."""
    xs = _clean(values, "ci")
    n = len(xs)
    if n < 2:
        return None
    m = math.fsum(xs) / n
    s = sample_std(xs) or 0.0
    half = t_quantile(0.5 + level / 2.0, n - 1) * s / math.sqrt(n)
    return (m - half, m + half)


def summarize(values: Sequence[float]) -> Summary:
    """``{mean, std, median, ci95, n, values}`` — the shape of one metric in ``aggregate.json``."""
    xs = _clean(values, "summarize")
    if not xs:
        return {"mean": None, "std": None, "median": None, "ci95": None, "n": 0, "values": []}
    ci = mean_ci(xs)
    return {
        "mean": mean(xs),
        "std": sample_std(xs),
        "median": median(xs),
        "ci95": list(ci) if ci is not None else None,
        "n": len(xs),
        "values": xs,
    }


def paired_uplift(
    a_values: Sequence[float | None],
    b_values: Sequence[float | None],
    *,
    higher_is_better: bool = True,
    level: float = 0.95,
) -> PairedUplift:
    """Uplift of arm A over arm B from reps paired by index (rep k of A with rep k of B).

    A pair where either side is ``None`` (a missing or excluded rep) is dropped, so
    exclusion never breaks the pairing. ``higher_is_better=False`` (latency, time) turns
    the ratio around: A is "up" when it is *faster*, ``b_k / a_k - 1``.
    Returns ``{estimate, ci95, n, ratios, kind}``; ``ci95`` is ``None`` below two pairs.
    """
    if len(a_values) != len(b_values):
        raise StatsError(f"paired uplift needs equal rep counts, got {len(a_values)} and {len(b_values)}")
    ratios: list[float] = []
    for a, b in zip(a_values, b_values, strict=True):
        if a is None or b is None:
            continue
        a_f, b_f = _clean([a, b], "paired uplift")
        if a_f <= 0 or b_f <= 0:
            raise StatsError(f"paired uplift needs positive values, got {a_f} and {b_f}")
        ratios.append(a_f / b_f if higher_is_better else b_f / a_f)
    n = len(ratios)
    if n == 0:
        return {"estimate": None, "ci95": None, "n": 0, "ratios": [], "kind": UPLIFT_KIND}
    logs = [math.log(r) for r in ratios]
    m = math.fsum(logs) / n
    ci = mean_ci(logs, level)
    return {
        "estimate": math.exp(m) - 1.0,
        "ci95": [math.exp(ci[0]) - 1.0, math.exp(ci[1]) - 1.0] if ci is not None else None,
        "n": n,
        "ratios": ratios,
        "kind": UPLIFT_KIND,
    }


# --- what the verdict reads of one metric --------------------------------------------------


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
    """Mean, sample std, log-scale spread, t interval and outlier suspects of one metric's reps.

    Why geometric as well as arithmetic: the verdict works on log values (a change is a
    ratio), so the spread it uses is the CV-like standard deviation of the logs; the
    arithmetic mean is what the report prints.
    """
    xs = [float(x) for x in values]
    if not xs or any(not math.isfinite(x) for x in xs):
        raise StatsError(f"summarise needs finite values, got {values!r}")
    n, m, ci = len(xs), mean(xs), mean_ci(xs, level)
    if ci is None:
        return RepSummary(n, m, None, None, None, None, level, ())
    cv: float | None = None
    suspects: tuple[int, ...] = ()
    if all(x > 0 for x in xs):
        cv = sample_std([math.log(x) for x in xs])
        suspects = tuple(outliers(xs))
    return RepSummary(n, m, sample_std(xs), cv, ci[0], ci[1], level, suspects)
