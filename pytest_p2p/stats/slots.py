"""Bad slots: a server start whose every point ran off together.

Why a second screen: a slot is one server start of one arm — all the points of that arm
and rep.  What spoils a rep (a throttled GPU, a neighbour's job, a server that came up
on a bad clock) spoils the whole slot, so the slot is low at *every* point.  At a
within-run CV of 8 % one such slot at -20 % is only 2.5 sigma at any one point, and the
per-point screen (:func:`~pytest_p2p.stats.outliers`) cannot tell it from noise; averaged
over four points it is about 5 sigma.  Left in, it moved the mean of a 4-rep run by 5 %
and, against 30 baseline runs, made 1.2 % of unchanged campaigns fail (issue 9's goal is
at most 1 %).

The test (the externally studentised residual of one slot, on log values): for slot
``i`` the score is the mean over points of ``x[p][i] - mean of the other slots at p``;
its spread comes only from the *other* slots (their pooled within-point variance,
``P * (n - 2)`` degrees of freedom), so the suspect cannot hide itself by inflating the
scale.  Under independent normal noise the statistic is exactly Student t, and a slot is
flagged when

* it is beyond the two-sided ``alpha_slot`` (1 %) t quantile, **and**
* its mean deviation is at least ``min_size`` (10 %): smaller shifts are drift or noise
  that the schedule and the decision already account for — re-running them would only
  cost time (drift of 0.5 %/slot alone made 5-20 % of campaigns re-run a slot without it).

Never more than a third of the slots are flagged: that is noise, not a bad slot.  A
flagged slot's pair is re-run, not averaged in (campaign/adaptive.py); a false flag costs
a re-run, never a verdict.  Measured in ``benchmarks/verdict_power.py`` (docs/baselines.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .tdist import StatsError, t_quantile

SLOT_ALPHA = 0.01  # two-sided, per slot: a false flag costs one re-run
SLOT_MIN_SIZE = 0.10  # log units: a slot must sit at least ~10 % off across its points


def _logs(points: Sequence[Sequence[float]]) -> list[list[float]]:
    rows = [list(row) for row in points]
    n = len(rows[0]) if rows else 0
    if any(len(row) != n for row in rows):
        raise StatsError(f"the slot screen needs the same reps at every point, got {[len(r) for r in rows]}")
    if any(not math.isfinite(v) or v <= 0 for row in rows for v in row):
        raise StatsError("the slot screen needs positive finite values")
    return [[math.log(v) for v in row] for row in rows]


def _deviation(logs: list[list[float]], i: int) -> tuple[float, float]:
    """Slot ``i``'s mean log deviation from the other slots over the points, and the other slots'
    pooled within-point variance (its scale, free of slot ``i``)."""
    score = var = 0.0
    for row in logs:
        rest = row[:i] + row[i + 1:]
        m = math.fsum(rest) / len(rest)
        score += row[i] - m
        var += math.fsum((y - m) ** 2 for y in rest) / (len(rest) - 1)
    return score / len(logs), var / len(logs)


def slot_shift(points: Sequence[Sequence[float]], i: int) -> float:
    """How far slot ``i`` sits from the other slots across the points, as a fraction (-0.2 = 20 % low)."""
    return math.expm1(_deviation(_logs(points), i)[0])


def outlying_slots(points: Sequence[Sequence[float]], *, alpha: float = SLOT_ALPHA,
                   min_size: float = SLOT_MIN_SIZE) -> list[int]:
    """Indices of slots (reps) of one arm that sit off together across points.

    ``points[p][i]`` is rep ``i``'s value at point ``p`` (positive; every point with the
    same reps, in the same order).  ``[]`` with fewer than 2 points or 3 reps: there is
    nothing to pool, and the per-point screen is the only one.
    """
    if not 0 < alpha < 1:
        raise StatsError(f"slot screen alpha must be in (0, 1), got {alpha}")
    logs = _logs(points)
    if len(logs) < 2 or len(logs[0]) < 3:
        return []
    n_points, n = len(logs), len(logs[0])
    crit = t_quantile(1 - alpha / 2, n_points * (n - 2))
    flagged = []
    for i in range(n):
        score, var = _deviation(logs, i)
        se = math.sqrt(var * (1 + 1 / (n - 1)) / n_points)
        if abs(score) >= min_size and (se == 0 or abs(score) > crit * se):
            flagged.append(i)
    return flagged if len(flagged) <= n // 3 else []
