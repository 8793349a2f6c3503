"""Drift is no uncertainty of an ABBA mean: the prediction floor uses the spread about the rep-order line."""

from __future__ import annotations

import math

import pytest

from pytest_p2p.stats import RunStats, decide_change


def test_trend_var_is_the_spread_about_the_rep_order_line() -> None:
    drift = [100 * math.exp(-0.01 * i) for i in range(6)]  # 1 % per rep, no noise
    r = RunStats.of(drift)
    assert r.log_var is not None and r.log_var > 1e-5 and r.trend_var == pytest.approx(0.0, abs=1e-18)
    noisy = [100.0, 103.0, 98.0, 101.0]
    logs = [math.log(x) for x in noisy]
    c = [-1.5, -0.5, 0.5, 1.5]
    slope = sum(ci * x for ci, x in zip(c, logs, strict=True)) / sum(ci * ci for ci in c)
    m = sum(logs) / 4
    want = sum((x - m - slope * ci) ** 2 for ci, x in zip(c, logs, strict=True)) / 2
    assert RunStats.of(noisy).trend_var == pytest.approx(want)
    assert RunStats.of([1.0, 2.0, 3.0]).trend_var is None and RunStats.of_summary(10.0, 1.0, 5).trend_var is None


def _drifting(level: float, seed: int, n: int = 6, cv: float = 0.01, drift: float = 0.02) -> list[float]:
    import random

    rng = random.Random(seed)
    return [level * math.exp(-drift * i + rng.gauss(0, cv)) for i in range(n)]


def test_drift_does_not_widen_the_floor_of_a_run_judged_against_drifting_runs() -> None:
    """Every run drifts 2 %/rep the same way: the floor follows the noise (1 %), not the drift."""
    base = [RunStats.of(_drifting(100.0 * (1 + 0.002 * (i % 3 - 1)), seed=i)) for i in range(10)]
    cur_vals = _drifting(92.0, seed=99)
    with_trend = decide_change(base, RunStats.of(cur_vals), tolerance=0.03, alpha=0.01 / 12)
    cur_plain = RunStats.of(cur_vals)
    without = decide_change([RunStats(b.log_mean, b.log_var, b.n) for b in base],
                            RunStats(cur_plain.log_mean, cur_plain.log_var, cur_plain.n), tolerance=0.03,
                            alpha=0.01 / 12)
    assert with_trend.upper < without.upper  # a tighter interval on the same data
    assert with_trend.outcome.value == "fail"
