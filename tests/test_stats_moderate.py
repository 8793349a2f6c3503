"""The run-to-run spread prior (stats/moderate.py): its special functions, its fit, and its effect."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_p2p.stats import (
    MODERATE_MIN_REPS,
    MODERATE_MIN_RUNS,
    Outcome,
    RunStats,
    SpreadPrior,
    decide_change,
    spread_prior,
)
from pytest_p2p.stats.moderate import digamma, trigamma, trigamma_inverse
from pytest_p2p.stats.tdist import StatsError

EULER = 0.5772156649015329


def test_special_functions_at_known_points() -> None:
    assert digamma(1.0) == pytest.approx(-EULER, abs=1e-12)
    assert digamma(0.5) == pytest.approx(-EULER - 2 * math.log(2), abs=1e-12)
    assert digamma(11.0) == pytest.approx(-EULER + sum(1 / i for i in range(1, 11)), abs=1e-12)
    assert trigamma(1.0) == pytest.approx(math.pi ** 2 / 6, abs=1e-12)
    assert trigamma(0.5) == pytest.approx(math.pi ** 2 / 2, abs=1e-11)
    for bad in (0.0, -1.0):
        with pytest.raises(StatsError):
            digamma(bad)
        with pytest.raises(StatsError):
            trigamma(bad)
        with pytest.raises(StatsError):
            trigamma_inverse(bad)


@settings(deadline=None, max_examples=60)
@given(st.floats(min_value=0.02, max_value=500.0))
def test_trigamma_inverse_inverts(x: float) -> None:
    assert trigamma_inverse(trigamma(x)) == pytest.approx(x, rel=1e-6)


def test_a_prior_needs_three_tests_with_a_spread() -> None:
    assert spread_prior([(1e-4, 9.0), (2e-4, 9.0)]) is None
    assert spread_prior([(1e-4, 9.0), (2e-4, 9.0), (0.0, 9.0)]) is None


def test_agreeing_spreads_lend_the_most_and_no_more_than_pooling() -> None:
    prior = spread_prior([(1e-4, 9.0)] * 8)
    assert prior is not None and prior.tests == 8
    assert prior.df == pytest.approx(7 * 9.0)  # the cap: (m - 1) tests' df
    assert prior.var == pytest.approx(1e-4, rel=0.15)


def test_disagreeing_spreads_lend_little() -> None:
    prior = spread_prior([(1e-6, 9.0), (1e-1, 9.0), (1e-4, 9.0), (3e-3, 9.0), (5e-6, 9.0)])
    assert prior is not None and prior.df < 1.0
    s2, df = prior.moderate(2e-2, 9.0)
    assert df == pytest.approx(9.0 + prior.df) and 1.5e-2 < s2 < 2e-2


def _runs(means: list[float], cv: float = 0.01, n: int = 4) -> list[RunStats]:
    return [RunStats(math.log(m), cv * cv, n) for m in means]


SPREAD = [1.0, 1.012, 0.985, 1.004, 0.992, 1.018, 0.99, 1.007, 0.981, 1.003]  # 10 run means, sd 1.2 %


def test_the_prior_turns_a_borderline_drop_into_a_failure() -> None:
    """-8 % against 3 % tolerance at a Holm-sized alpha: 9 df cannot clear it, 9 + 63 df can."""
    base, cur = _runs(SPREAD), RunStats(math.log(0.92), 0.01 ** 2, 6)
    prior = SpreadPrior(var=statistics.variance([math.log(x) for x in SPREAD]), df=63.0, tests=8)
    alone = decide_change(base, cur, tolerance=0.03, alpha=0.01 / 12)
    lent = decide_change(base, cur, tolerance=0.03, alpha=0.01 / 12, prior=prior)
    assert alone.outcome is not Outcome.FAIL and lent.outcome is Outcome.FAIL
    assert "spread moderated over 8 tests (+63 df)" in lent.reason and "moderated" not in alone.reason
    assert lent.p_value is not None and alone.p_value is not None and lent.p_value < alone.p_value


def test_short_histories_and_three_rep_runs_are_not_moderated() -> None:
    assert (MODERATE_MIN_RUNS, MODERATE_MIN_REPS) == (10, 4)
    three = RunStats(math.log(0.92), 0.01 ** 2, 3)
    lent = SpreadPrior(var=1e-6, df=63.0, tests=8)
    with_prior = decide_change(_runs(SPREAD), three, tolerance=0.03, alpha=0.001, prior=lent)
    alone = decide_change(_runs(SPREAD), three, tolerance=0.03, alpha=0.001)
    assert (with_prior.outcome, with_prior.lower, with_prior.upper, with_prior.p_value) == (
        alone.outcome, alone.lower, alone.upper, alone.p_value)
    assert "moderated" not in with_prior.reason  # (its reps-needed may count on the prior from 4 reps on)
    base, cur = _runs(SPREAD[:9]), RunStats(math.log(0.91), 0.01 ** 2, 6)
    prior = SpreadPrior(var=1e-6, df=63.0, tests=8)
    assert decide_change(base, cur, tolerance=0.03, alpha=0.001, prior=prior) == decide_change(
        base, cur, tolerance=0.03, alpha=0.001)
