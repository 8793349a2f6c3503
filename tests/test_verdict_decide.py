"""The decision library (pytest_p2p.stats) and the metric registry (pytest_p2p.metrics)."""

from __future__ import annotations

import math
import random

import pytest

from pytest_p2p import metrics
from pytest_p2p.stats import (
    Outcome,
    RunStats,
    SequentialPlan,
    StatsError,
    decide_change,
    decide_uplift,
    family_wise,
    holm_adjust,
    outliers,
    screen_pairs,
    summarise,
    t_quantile,
)


@pytest.mark.parametrize(("p", "df", "want"), [
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.99, 9, 2.8214), (0.995, 30, 2.7500), (0.95, 1e9, 1.6449),
])
def test_t_quantile_matches_tables(p: float, df: float, want: float) -> None:
    assert t_quantile(p, df) == pytest.approx(want, abs=1e-4)


def test_uplift_three_outcomes() -> None:
    off = [100.0, 100.4, 99.8, 100.1]
    passed = decide_uplift([110.0, 110.6, 109.9, 110.2], off, threshold=0.05, alpha=0.01)
    assert passed.outcome is Outcome.PASS and passed.lower > 0.05 and passed.pairs_needed is None
    failed = decide_uplift([101.0, 100.9, 100.7, 101.2], off, threshold=0.05, alpha=0.01)
    assert failed.outcome is Outcome.FAIL and failed.upper < 0.05
    noisy = decide_uplift([63.99, 63.32, 53.55], [58.0, 58.5, 57.9], threshold=0.05, alpha=0.01)
    assert noisy.outcome is Outcome.INCONCLUSIVE
    assert noisy.pairs_needed is not None and noisy.pairs_needed > 3
    assert "pairs would decide" in noisy.reason and noisy.level == pytest.approx(0.98)


def test_uplift_lower_is_better_turns_the_ratio() -> None:
    d = decide_uplift([90.0, 90.2, 89.9], [100.0, 100.1, 99.9], threshold=0.05, higher_is_better=False,
                      alpha=0.01)
    assert d.outcome is Outcome.PASS and d.estimate == pytest.approx(100 / 90 - 1, rel=1e-2)


def test_uplift_one_pair_is_inconclusive_and_bad_input_is_an_error() -> None:
    assert decide_uplift([110.0], [100.0], threshold=0.05, alpha=0.01).outcome is Outcome.INCONCLUSIVE
    with pytest.raises(StatsError):
        decide_uplift([1.0, -1.0], [1.0, 1.0], threshold=0.05, alpha=0.01)
    with pytest.raises(StatsError):
        decide_uplift([1.0], [1.0, 2.0], threshold=0.05, alpha=0.01)


def test_uplift_wrong_verdicts_stay_below_alpha() -> None:
    """At a true uplift exactly on the threshold every pass is wrong: rate <= alpha (+ MC slack)."""
    rng = random.Random(7)
    alpha, trials, passes = 0.05, 1500, 0
    for _ in range(trials):
        off = [100 * math.exp(rng.gauss(0, 0.03)) for _ in range(4)]
        on = [o * 1.05 * math.exp(rng.gauss(0, 0.03)) for o in off]
        passes += decide_uplift(on, off, threshold=0.05, alpha=alpha).outcome is Outcome.PASS
    assert passes / trials < alpha + 3 * math.sqrt(alpha * (1 - alpha) / trials)
    assert passes > 0  # the rule is not vacuous: at the boundary it errs about alpha of the time


def test_screen_flags_a_throttled_rep_only() -> None:
    on = [100.0, 101.0, 80.0, 100.5, 99.8]
    off = [95.0, 95.5, 95.2, 94.8, 95.1]
    assert screen_pairs(on, off) == [2]
    assert screen_pairs(on[:2], off[:2]) == []
    assert screen_pairs([100.0, 100.6, 99.5], [95.0, 95.3, 94.9]) == []
    assert outliers([1.0, 1.0, 1.0, 5.0]) == [3]


def test_sequential_plan_spends_exactly_alpha() -> None:
    plan = SequentialPlan(alpha=0.01, min_pairs=3, max_pairs=6)
    looks = [plan.alpha_at(k) for k in range(1, 10)]
    assert sum(looks) == pytest.approx(0.01)
    assert plan.alpha_at(3) == pytest.approx(0.005) and plan.alpha_at(2) == 0 and plan.alpha_at(7) == 0
    assert SequentialPlan(alpha=0.01, min_pairs=4, max_pairs=4).alpha_at(4) == pytest.approx(0.01)
    undecided = decide_uplift([63.99, 63.32, 53.55], [58.0, 58.5, 57.9], threshold=0.05, alpha=0.005)
    decided = decide_uplift([110.0, 110.6, 109.9], [100.0, 100.4, 99.8], threshold=0.05, alpha=0.005)
    assert plan.should_continue([decided, undecided], 3)
    assert not plan.should_continue([decided], 3)
    assert not plan.should_continue([undecided], 6)
    assert plan.should_continue([], 2)
    with pytest.raises(StatsError):
        SequentialPlan(alpha=0.01, min_pairs=5, max_pairs=4)


def _runs(rng: random.Random, k: int, n: int, tau: float, sigma: float, level: float = 100.0) -> list[RunStats]:
    out = []
    for _ in range(k):
        mu = level * math.exp(rng.gauss(0, tau))
        out.append(RunStats.of([mu * math.exp(rng.gauss(0, sigma)) for _ in range(n)]))
    return out


def test_change_fail_pass_and_short_baseline() -> None:
    rng = random.Random(3)
    base = _runs(rng, 10, 3, 0.005, 0.01)
    drop = decide_change(base, RunStats.of([88.0, 88.5, 87.9]), tolerance=0.03, alpha=0.01)
    assert drop.outcome is Outcome.FAIL and drop.upper < -0.03 and drop.p_value is not None
    same = decide_change(base, RunStats.of([100.2, 99.6, 100.4]), tolerance=0.03, alpha=0.01)
    assert same.outcome is Outcome.PASS
    short = decide_change(base[:2], RunStats.of([96.0, 96.2, 95.9]), tolerance=0.03, alpha=0.01)
    assert short.outcome is Outcome.INCONCLUSIVE and "baseline too short: 2 run(s)" in short.reason
    far = decide_change(base[:1], RunStats.of([40.0, 40.2, 39.9]), tolerance=0.03, alpha=0.01)
    assert far.outcome is Outcome.FAIL and "3x the tolerance" in far.reason


def test_change_df_is_k_minus_one_with_equal_reps() -> None:
    base = _runs(random.Random(5), 4, 3, 0.02, 0.01)
    d = decide_change(base, RunStats.of([99.0, 100.0, 101.0]), tolerance=0.03, alpha=0.01)
    assert "df 3.0" in d.reason


def test_change_lower_is_better() -> None:
    base = _runs(random.Random(9), 6, 3, 0.0, 0.01, level=50.0)
    d = decide_change(base, RunStats.of([60.0, 60.3, 59.8]), tolerance=0.05, higher_is_better=False, alpha=0.01)
    assert d.outcome is Outcome.FAIL and d.estimate == pytest.approx(50 / 60 - 1, abs=0.01)


def test_holm_adjust_and_family_wise_demotion() -> None:
    assert holm_adjust([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06])  # type: ignore[arg-type]
    rng = random.Random(11)
    base = _runs(rng, 10, 3, 0.0, 0.01)
    fails = [decide_change(base, RunStats.of(v), tolerance=0.03, alpha=0.05)
             for v in ([88.0, 88.4, 88.1], [95.6, 95.9, 95.4])]
    judged = family_wise(fails + [decide_change(base, RunStats.of([100.0, 100.1, 99.9]), tolerance=0.03,
                                                alpha=0.05)] * 40, alpha=0.01)
    assert judged[0].outcome is Outcome.FAIL
    assert judged[1].outcome is not Outcome.FAIL
    assert "Holm-adjusted" in judged[0].reason


def test_summarise() -> None:
    s = summarise([10.0, 11.0, 12.0])
    assert s.mean == 11.0 and s.std == 1.0 and s.lower is not None and s.lower < 11.0 < (s.upper or 0)
    assert summarise([5.0]).std is None


def test_registry_is_the_one_direction() -> None:
    assert metrics.metric("max_output_tokens_per_s").direction == "higher"
    assert metrics.metric("request_goodput").direction == "higher"
    assert metrics.metric("avg_watts").direction == "info"
    assert metrics.metric("p99_ttft_ms").direction == "lower"
    assert metrics.metric("output_throughput").primary
    with pytest.raises(KeyError, match="output_throughput"):
        metrics.metric("output_througput")
    assert metrics.direction("p95_ttft_ms") == "lower"
    assert metrics.direction("std_itl_ms") == "info"
    assert metrics.direction("mystery") is None
    assert metrics.direction("avg_watts", {"avg_watts": "lower"}) == "lower"


def test_default_primaries() -> None:
    assert metrics.default_primaries("model", "c8") == ("output_throughput",)
    assert metrics.default_primaries("probe", "s8KiB") == ("time_us",)
    assert metrics.default_primaries("probe", "s512KiB") == ("busbw_gbs",)


def test_floor_does_not_buy_degrees_of_freedom() -> None:
    """Run means that agree closely by chance (df K-1 = 2) keep df 2 when the within-run floor applies."""
    base = [RunStats.of([95.0, 100.0, 105.0]), RunStats.of([95.1, 100.0, 105.0]), RunStats.of([95.0, 100.1, 105.0])]
    d = decide_change(base, RunStats.of([96.0, 99.0, 104.0]), tolerance=0.03, alpha=0.01)
    assert "df 2.0" in d.reason


def test_noisier_current_run_widens_its_own_interval() -> None:
    base = _runs(random.Random(13), 10, 4, 0.0, 0.01)
    calm = decide_change(base, RunStats.of([97.0, 97.2, 96.9, 97.1]), tolerance=0.03, alpha=0.01)
    hit = decide_change(base, RunStats.of([100.0, 100.2, 99.9, 88.0]), tolerance=0.03, alpha=0.01)
    assert "noisier than its history" in hit.reason and "noisier" not in calm.reason
    assert hit.upper - hit.lower > 2 * (calm.upper - calm.lower)
