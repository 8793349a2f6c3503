"""The first arm's effect, fitted (a two-sequence crossover): ``stats.sequence_fit`` / ``decide_nested(sequences=)``.

The campaign alternates the arm that goes first from start to start (``campaign.schedule.order``). On 2x H200
(2026-11-27, 5 starts x 2 window pairs) c16's start means split by that order: 23.2 / 27.9 / 23.4 / 27.8 / 23.8 %.
The plain spread of start means counted the split as noise (+-3.2 % of the ratio at 98 %); within each order
the starts agreed to about 0.2 %. The next night (another H200 pair, 6 starts) showed no split at c16 and one of
2.8 points at c64. These tests pin the fit's arithmetic against a hand computation, the rule that decides when
it applies (the design: 6 starts, never the data), and what a campaign records of it.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_campaign_resident import _runner

from pytest_p2p.campaign.schedule import first_arm, order
from pytest_p2p.stats import (
    Outcome,
    StartPrior,
    StatsError,
    decide_nested,
    expected_halfwidth,
    fits_sequences,
    pairs_for,
    prior_use,
    sequence_fit,
    t_quantile,
)
from pytest_p2p.stats.nested import MIN_SEQUENCE_DF, f_sf

# c16 of the 2x H200 night of 2026-11-27 (benchmarks/results/campaign2_compact-h200-ahead-5x2-2026-11-27.json):
# each start's two window pairs' log ratio x 100 (output tok/s, p2p_on over p2p_off), starts 1..5
H200_C16 = [[21.99, 19.71], [23.03, 26.12], [22.80, 19.29], [24.62, 24.40], [18.96, 23.66]]
H200_C64 = [[42.83, 54.56], [48.97, 50.90], [49.61, 49.39], [46.49, 48.74], [48.72, 50.02]]
# the night after (benchmarks/results/campaign2_compact-h200-ahead-6x2-2026-11-27.json), 6 starts
NIGHT2_C16 = [[20.6, 21.84], [24.92, 22.82], [22.77, 19.71], [19.99, 16.27], [22.83, 21.95], [21.81, 24.71]]
NIGHT2_C64 = [[45.07, 39.95], [43.64, 46.22], [40.93, 42.26], [44.88, 43.15], [41.59, 45.72], [45.49, 42.92]]
ARMS = ["p2p_on", "p2p_off"]


def _blocks(pcts: list[list[float]]) -> list[list[tuple[float, float]]]:
    return [[(math.exp(p / 100), 1.0) for p in start] for start in pcts]


def _orders(n: int) -> list[str]:
    return [f"{first_arm(ARMS, s)} first" for s in range(1, n + 1)]


def _means(pcts: list[list[float]]) -> list[float]:
    return [statistics.fmean(p / 100 for p in start) for start in pcts]


def _by_hand(means: list[float], alpha: float) -> tuple[float, float, float]:
    """Estimate and interval (log units) of the two-sequence fit, written out: odd starts one order, even the other."""
    odd, even = means[0::2], means[1::2]
    mu = (statistics.fmean(odd) + statistics.fmean(even)) / 2
    ss = sum((x - statistics.fmean(g)) ** 2 for g in (odd, even) for x in g)
    df = len(means) - 2
    se = math.sqrt(ss / df) / 2 * math.sqrt(1 / len(odd) + 1 / len(even))
    t = t_quantile(1 - alpha, df)
    return mu, mu - t * se, mu + t * se


def test_the_order_is_the_start_s_sequence_and_alternates() -> None:
    assert [first_arm(ARMS, s) for s in range(1, 5)] == ["p2p_on", "p2p_off", "p2p_on", "p2p_off"]
    assert all(order(ARMS, s, 1)[0] == first_arm(ARMS, s) for s in range(1, 9))


def test_the_fitted_interval_is_the_crossover_t_interval_by_hand() -> None:
    means = _means(NIGHT2_C64)
    mu, lo, hi = _by_hand(means, 0.01)
    d = decide_nested(_blocks(NIGHT2_C64), threshold=0.0, alpha=0.01, sequences=_orders(6))
    assert math.isclose(math.log1p(d.estimate), mu, rel_tol=1e-12)
    assert math.isclose(math.log1p(d.lower), lo, rel_tol=1e-9) and math.isclose(math.log1p(d.upper), hi, rel_tol=1e-9)
    assert d.outcome is Outcome.PASS and d.n == 6
    assert "first-arm effect fitted: p2p_on first +53.1 % (3 starts), p2p_off first +55.9 % (3 starts)" in d.reason
    assert "df = 4" in d.reason


def _half(pcts: list[list[float]], seq: list[str] | None) -> float:
    """Half-width of the 98 % interval in log units (~share of the ratio)."""
    d = decide_nested(_blocks(pcts), threshold=0.0, alpha=0.01, sequences=seq)
    return (math.log1p(d.upper) - math.log1p(d.lower)) / 2


def test_the_two_h200_nights_as_the_rule_judges_them() -> None:
    """The rule, not the night, decides: the 5-start night is judged on its plain start means although its c16
    split by order (p = 0.0003); the 6-start night is fitted at both points, and its c16 (no split) pays the df."""
    assert _half(H200_C16, _orders(5)) == pytest.approx(_half(H200_C16, None)) == pytest.approx(0.0320, abs=5e-4)
    assert sequence_fit(_means(H200_C16), _orders(5)).status == "too few"
    assert _half(NIGHT2_C16, None) == pytest.approx(0.0280, abs=5e-4)
    assert _half(NIGHT2_C16, _orders(6)) == pytest.approx(0.0346, abs=5e-4)
    assert _half(NIGHT2_C64, None) == pytest.approx(0.0169, abs=5e-4)
    assert _half(NIGHT2_C64, _orders(6)) == pytest.approx(0.0122, abs=5e-4)


def test_an_order_split_like_the_5_start_night_s_is_taken_out_from_6_starts() -> None:
    """c16's five start means with a sixth like its even starts: the fit's interval is a tenth of the plain one."""
    six = [*H200_C16, [24.5, 24.6]]
    assert _half(six, _orders(6)) < _half(six, None) / 8


def test_an_odd_start_count_is_balanced_by_order_not_by_start() -> None:
    """4 starts of one order and 3 of the other: each order weighs half, so an order effect cancels."""
    means = [0.20, 0.25, 0.20, 0.25, 0.20, 0.25, 0.20]
    fit = sequence_fit(means, _orders(7))
    assert fit.status == "fitted" and fit.mean == pytest.approx(0.225)
    assert statistics.fmean(means) == pytest.approx(0.2214, abs=1e-4)  # the plain mean leans to the odd starts
    assert fit.scale == pytest.approx((1 / 4 + 1 / 3) / 4)


def test_the_rule_is_the_design_six_starts_two_of_each_order() -> None:
    means = [0.1, 0.2, 0.1, 0.2, 0.1, 0.2, 0.1]
    five = sequence_fit(means[:5], _orders(5))
    assert five.status == "too few" and five.var is None  # 3 df would be left: judged plain ...
    assert five.p is not None and five.p < 1e-6  # ... with the split's test reported all the same
    assert sequence_fit(means[:6], _orders(6)).status == "fitted"
    assert sequence_fit(means, ["a"] * 6 + ["b"]).status == "too few"  # one start of an order: no spread of its own
    assert sequence_fit(means, None).status == "none"
    assert sequence_fit(means, ["a"] * 7).status == "none"
    assert [fits_sequences(b) for b in range(2, 10)] == [False, False, False, False, True, True, True, True]
    assert MIN_SEQUENCE_DF == 4
    d = decide_nested(_blocks([[20.0], [25.0], [21.0], [26.0], [20.5]]), threshold=0.0, alpha=0.01,
                      sequences=_orders(5))
    assert "first-arm effect not fitted" in d.reason and "that takes 6 starts, 2 of each order" in d.reason
    with pytest.raises(StatsError, match="5 start means but 4 sequence labels"):
        sequence_fit(means[:5], _orders(4))


def test_the_f_test_of_the_orders_is_reported_not_used() -> None:
    means = _means(NIGHT2_C64)
    fit = sequence_fit(means, _orders(6))
    odd, even = means[0::2], means[1::2]
    grand = statistics.fmean(means)
    msb = 3 * (statistics.fmean(odd) - grand) ** 2 + 3 * (statistics.fmean(even) - grand) ** 2
    assert fit.var is not None and fit.f == pytest.approx(msb / fit.var)
    assert fit.p == pytest.approx(f_sf(msb / fit.var, 1, 4)) and fit.p == pytest.approx(0.0525, abs=1e-3)
    quiet = sequence_fit(_means(NIGHT2_C16), _orders(6))
    assert quiet.status == "fitted" and quiet.p is not None and quiet.p > 0.9  # fitted all the same


@settings(deadline=None, max_examples=60)
@given(shift=st.floats(-0.5, 0.5), n=st.integers(6, 9),
       noise=st.lists(st.floats(-0.05, 0.05), min_size=9, max_size=9))
def test_an_order_effect_moves_the_estimate_by_half_and_never_the_width(shift: float, n: int,
                                                                        noise: list[float]) -> None:
    """Whatever the order effect, the fitted interval's width is the within-order spread's: exactness does not
    depend on the effect, which is why the design and not a test of the effect decides when to fit."""
    base = [0.3 + e for e in noise[:n]]
    moved = [m + (shift if i % 2 else 0.0) for i, m in enumerate(base)]
    a, b = sequence_fit(base, _orders(n)), sequence_fit(moved, _orders(n))
    assert a.status == b.status == "fitted" and a.var is not None and b.var is not None
    assert b.mean - a.mean == pytest.approx(shift / 2, abs=1e-9)
    assert b.var == pytest.approx(a.var, rel=1e-6, abs=1e-15)


def test_a_prior_is_judged_against_the_spread_within_orders() -> None:
    """The guard compares tonight's within-order variance (B - 2 df) with the prior; the combined df counts it."""
    six = [*H200_C16, [24.5, 24.6]]  # an order split like the 5-start night's
    prior = StartPrior(var=1e-5, df=8.0, nights=4, windows=2)  # a start mean within 0.3 %
    use = prior_use(_blocks(six), prior, sequences=_orders(6))
    assert use.status == "used" and use.total_df == pytest.approx(8 + 4)
    plain = prior_use(_blocks(six), prior)  # the order split counted as noise: refused by the guard
    assert plain.status == "refused"


def test_the_launch_guard_s_launch_means_are_not_fitted() -> None:
    """Starts made 2 at once ran both orders in each launch: where the guard judges launch means, no fit."""
    pcts = [[20.0], [25.0], [30.0], [35.0], [40.0], [45.0]]
    d = decide_nested(_blocks(pcts), threshold=0.0, alpha=0.01, launches=[1, 1, 2, 2, 3, 3], sequences=_orders(6))
    assert "launch guard: the 3 launches' means spread more" in d.reason
    assert "first-arm effect" not in d.reason


def test_the_planner_counts_the_df_the_fit_takes() -> None:
    s, w = 0.01, 0.02
    for b in (4, 5, 6, 8):
        plain = expected_halfwidth(s, w, b, 2, 0.005)
        alt = expected_halfwidth(s, w, b, 2, 0.005, alternating=True)
        assert (alt > plain) == fits_sequences(b)
    odd = expected_halfwidth(s, w, 7, 2, 0.005, alternating=True)
    assert odd > expected_halfwidth(s, w, 8, 2, 0.005, alternating=True)
    assert pairs_for(0.01, 0.005, 0.01, extra_df=-1) is not None  # 1 df at least, never t on 0 df


@pytest.mark.parametrize(("starts", "status"), [(3, "too few"), (6, "fitted")])
def test_a_resident_campaign_records_its_first_arm_fit(tmp_path: Path, starts: int, status: str) -> None:
    """Through the real path (the stand-in, two resident servers): run.json keeps the fit next to the decision,
    and the decision's reason says what was fitted."""
    res = _runner(tmp_path, starts=starts, windows=1).run()
    assert res.status == "complete", res.errors
    meta = json.loads((res.run_dir / "run.json").read_text())
    for point, dec in meta["decisions"].items():
        fit = dec["first_arm"]
        assert fit["status"] == status, (point, fit)
        assert [g["first"] for g in fit["groups"]] == ["p2p_on first", "p2p_off first"]
        assert sum(g["starts"] for g in fit["groups"]) == dec["n"]
        assert ("first-arm effect fitted" in dec["reason"]) == (status == "fitted")
        kind = str(res.uplift[point]["kind"])  # aggregate's interval: the same fit
        assert ("df = starts - 2, the first arm's effect fitted" in kind) == (status == "fitted"), kind


def test_with_three_arms_a_start_s_sequence_names_the_uplift_s_own_arms() -> None:
    """Three resident arms run A, B, C in one start and C, B, A in the next: the uplift of A over B is labelled by
    which of A and B went first, never by C."""
    arms = ["p2p_on", "p2p_off", "nvlink_off"]
    assert [first_arm(arms, s) for s in (1, 2)] == ["p2p_on", "nvlink_off"]
    assert [first_arm(arms, s, arms[:2]) for s in range(1, 5)] == ["p2p_on", "p2p_off", "p2p_on", "p2p_off"]
    assert [first_arm(arms, s, ["p2p_off", "nvlink_off"]) for s in (1, 2)] == ["p2p_off", "nvlink_off"]
    with pytest.raises(ValueError, match="none of"):
        first_arm(arms, 1, ["sleep"])
