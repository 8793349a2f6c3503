from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_p2p import stats

# Two-sided 95 % critical values from standard t tables.
T975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 9: 2.2622, 10: 2.2281, 30: 2.0423,
        120: 1.9799}


@pytest.mark.parametrize("df,expected", sorted(T975.items()))
def test_t_quantile_matches_tables(df: int, expected: float) -> None:
    assert stats.t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_t_quantile_other_levels_and_symmetry() -> None:
    assert stats.t_quantile(0.95, 4) == pytest.approx(2.1318, abs=1e-4)
    assert stats.t_quantile(0.995, 2) == pytest.approx(9.9248, abs=1e-4)
    assert stats.t_quantile(0.025, 3) == pytest.approx(-3.1824, abs=1e-4)
    assert stats.t_quantile(0.5, 7) == 0.0
    # large df tends to the normal quantile
    assert stats.t_quantile(0.975, 1e7) == pytest.approx(1.95996, abs=1e-4)


@pytest.mark.parametrize("p,df", [(0.0, 3), (1.0, 3), (0.5, 0)])
def test_t_quantile_rejects_bad_input(p: float, df: float) -> None:
    with pytest.raises(stats.StatsError):
        stats.t_quantile(p, df)


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-3, 60.0), st.booleans(), st.one_of(st.integers(1, 400), st.floats(0.5, 2000.0)))
def test_t_cdf_matches_scipy(size: float, negative: bool, df: float) -> None:
    """scipy is the oracle (a dev-only dependency): checking t_cdf against a quantile found by
    bisection on t_cdf itself was circular and could not catch a wrong t_cdf."""
    from scipy.stats import t as scipy_t

    x = -size if negative else size
    assert stats.t_cdf(x, df) == pytest.approx(float(scipy_t.cdf(x, df)), abs=1e-10)


@pytest.mark.xfail(strict=True, reason="t_cdf loses precision for |t| << sqrt(df): x = df/(df+t^2) rounds to "
                   "1 and 1-x keeps ~3 digits; fixing it moves ci95 bounds in their last bits, so it waits "
                   "for a deliberate change (behaviour unchanged in issue 25)")
def test_t_cdf_near_zero_matches_scipy() -> None:
    from scipy.stats import t as scipy_t

    x, df = -3.3706567132460564e-07, 1294.9624964577251  # found by the oracle: 1.3e-7 off
    assert stats.t_cdf(x, df) == pytest.approx(float(scipy_t.cdf(x, df)), abs=1e-10)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0001, 0.9999), st.one_of(st.integers(1, 400), st.floats(0.5, 2000.0)))
def test_t_quantile_matches_scipy(p: float, df: float) -> None:
    from scipy.stats import t as scipy_t

    expected = float(scipy_t.ppf(p, df))
    assert stats.t_quantile(p, df) == pytest.approx(expected, rel=1e-8, abs=1e-8)


def test_summarize_seed_values() -> None:
    # seed 000/001: p2p_on-c1 output throughput per rep; the seed printed 60.3 +- 4.8, which is the
    # *population* std (ddof=0). We state and use the sample std (ddof=1): 5.8.
    s = stats.summarize([63.9867, 63.3248, 53.5476])
    assert round(s["mean"], 1) == 60.3
    assert round(s["std"], 1) == 5.8
    assert round(statistics.pstdev([63.9867, 63.3248, 53.5476]), 1) == 4.8
    assert s["std"] == pytest.approx(statistics.stdev([63.9867, 63.3248, 53.5476]))
    assert s["n"] == 3 and s["median"] == 63.3248
    half = 4.3027 * s["std"] / math.sqrt(3)
    assert s["ci95"] == pytest.approx([s["mean"] - half, s["mean"] + half], abs=1e-3)


def test_summarize_small_and_bad() -> None:
    one = stats.summarize([5.0])
    assert one["std"] is None and one["ci95"] is None and one["mean"] == 5.0
    assert stats.summarize([])["n"] == 0
    with pytest.raises(stats.StatsError):
        stats.summarize([1.0, float("nan")])
    with pytest.raises(stats.StatsError):
        stats.summarize([1.0, "2"])  # type: ignore[list-item]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=20))
def test_summarize_agrees_with_statistics(xs: list[float]) -> None:
    s = stats.summarize(xs)
    assert s["mean"] == pytest.approx(statistics.fmean(xs), abs=1e-6)
    assert s["std"] == pytest.approx(statistics.stdev(xs), rel=1e-6, abs=1e-6)
    assert s["median"] == pytest.approx(statistics.median(xs))
    lo, hi = s["ci95"]
    assert lo <= s["mean"] + 1e-9 and s["mean"] <= hi + 1e-9


def test_paired_uplift_pairs_by_rep() -> None:
    # A is 10 % above B in every rep while both drift: pairing sees a constant ratio.
    b = [100.0, 120.0, 90.0]
    a = [x * 1.10 for x in b]
    up = stats.paired_uplift(a, b)
    assert up["estimate"] == pytest.approx(0.10)
    assert up["ci95"] == pytest.approx([0.10, 0.10])
    assert up["n"] == 3


def test_paired_uplift_lower_is_better_and_missing() -> None:
    up = stats.paired_uplift([10.0, None, 10.0], [11.0, 11.0, 11.5], higher_is_better=False)
    assert up["n"] == 2
    assert up["estimate"] == pytest.approx(math.sqrt(1.1 * 1.15) - 1)
    assert up["ci95"][0] < up["estimate"] < up["ci95"][1]
    one = stats.paired_uplift([2.0], [1.0])
    assert one["estimate"] == pytest.approx(1.0) and one["ci95"] is None
    assert stats.paired_uplift([None], [1.0])["n"] == 0


def test_paired_uplift_errors() -> None:
    with pytest.raises(stats.StatsError):
        stats.paired_uplift([1.0, 2.0], [1.0])
    with pytest.raises(stats.StatsError):
        stats.paired_uplift([0.0], [1.0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 1e4), st.floats(0.1, 1e4)), min_size=2, max_size=12))
def test_paired_uplift_ci_contains_estimate_and_is_antisymmetric(pairs: list[tuple[float, float]]) -> None:
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    up = stats.paired_uplift(a, b)
    lo, hi = up["ci95"]
    assert lo <= up["estimate"] * (1 + 1e-9) + 1e-9 and up["estimate"] <= hi * (1 + 1e-9) + 1e-9
    down = stats.paired_uplift(b, a)
    assert (1 + up["estimate"]) * (1 + down["estimate"]) == pytest.approx(1.0, rel=1e-9)
