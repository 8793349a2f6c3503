"""The nested variance model (pytest_p2p.stats.nested): windows within server starts, the start as the unit."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_p2p.stats import (
    Components,
    Outcome,
    SequentialPlan,
    StatsError,
    components,
    decide_nested,
    decide_uplift,
    expected_halfwidth,
    pairs_for,
    plan_for,
    screen_starts,
    screen_windows,
    windows_for,
)
from pytest_p2p.stats.nested import DEFAULT_WINDOWS, MAX_WINDOWS, MIN_WINDOWS

Blocks = list[list[tuple[float, float]]]


def _blocks(ratios: list[list[float]]) -> Blocks:
    """Window pairs whose log ratios are exactly ``ratios`` (off = 100)."""
    return [[(100.0 * math.exp(r), 100.0) for r in block] for block in ratios]


# ----------------------------------------------------------------------------- hand-computed


HAND = [[0.01, 0.03], [0.00, 0.02], [0.04, 0.06]]  # block means 0.02, 0.01, 0.05


def test_components_balanced_by_hand() -> None:
    c = components(_blocks(HAND))
    # within: each start (+-0.01)**2 * 2 -> SSW 0.0006 on 6 - 3 df; between: MSB = 2 * 0.00086667 / 2
    assert c.window_sd == pytest.approx(math.sqrt(0.0002), rel=1e-9)
    assert c.start_sd == pytest.approx(math.sqrt((0.00086667 - 0.0002) / 2), rel=1e-4)
    assert c.block_sd == pytest.approx(math.sqrt(0.00086667 / 2), rel=1e-4)
    assert (c.blocks, c.windows, c.mean_windows_per_block) == (3, 6, 2.0)
    assert c.mean == pytest.approx(0.08 / 3)


def test_components_unbalanced_by_hand() -> None:
    c = components(_blocks([[0.0], [0.0, 0.2], [0.2, 0.3, 0.4]]))
    # SSW = 0 + 0.02 + 0.02 on 3 df; weighted grand mean 1.1 / 6; n0 = (6 - 14/6) / 2
    msw = 0.04 / 3
    g = 1.1 / 6
    msb = (1 * (0.0 - g) ** 2 + 2 * (0.1 - g) ** 2 + 3 * (0.3 - g) ** 2) / 2
    n0 = (6 - 14 / 6) / 2
    assert c.window_sd == pytest.approx(math.sqrt(msw))
    assert c.start_sd == pytest.approx(math.sqrt((msb - msw) / n0))
    assert c.start_sd == pytest.approx(0.12968, abs=1e-5)
    assert c.mean_windows_per_block == 2.0 and c.windows == 6


def test_components_truncate_at_zero_and_say_unknown() -> None:
    assert components(_blocks([[0.0, 0.02], [0.02, 0.0]])).start_sd == 0.0  # equal means: no start effect
    one = components(_blocks([[0.01, 0.03, 0.02]]))
    assert one.start_sd is None and one.block_sd is None and one.window_sd == pytest.approx(0.01)
    singles = components(_blocks([[0.01], [0.03], [0.02]]))  # no start has 2 windows: no split
    assert singles.window_sd is None and singles.start_sd is None and singles.block_sd == pytest.approx(0.01)


def test_decision_by_hand() -> None:
    # block means 0.02, 0.01, 0.05: mean 0.026667, sd 0.020817, se 0.012019
    d = decide_nested(_blocks(HAND), threshold=0.0, alpha=0.1)
    lo = 0.08 / 3 - 1.885618 * math.sqrt(0.00086667 / 2) / math.sqrt(3)  # t(0.90, 2) = 1.885618
    assert d.outcome is Outcome.PASS and d.n == 3 and d.level == pytest.approx(0.8)
    assert d.estimate == pytest.approx(math.expm1(0.08 / 3))
    assert d.lower == pytest.approx(math.expm1(lo), abs=1e-5)
    assert d.reason.startswith("uplift +2.7 % (80 % CI +0.4 % .. ")
    assert "3 starts x 2 window pairs; start sd 1.8 %, window sd 1.4 %) vs threshold +0.0 %: the lower bound " \
           "clears it" in d.reason
    inc = decide_nested(_blocks(HAND), threshold=0.0, alpha=0.05)  # t(0.95, 2) = 2.92: lower bound -0.8 %
    assert inc.outcome is Outcome.INCONCLUSIVE and inc.lower < 0 < inc.upper
    need = pairs_for(math.sqrt(0.00086667 / 2), 0.08 / 3, 0.05)
    assert need is not None and inc.pairs_needed == pytest.approx(need, abs=1)
    assert f"about {inc.pairs_needed} starts of 2 window pairs would decide it" in inc.reason
    fail = decide_nested(_blocks(HAND), threshold=0.20, alpha=0.05)
    assert fail.outcome is Outcome.FAIL and "the upper bound is below it" in fail.reason


def test_one_start_is_inconclusive_even_when_its_windows_agree() -> None:
    """A window-level interval passes this (+10 % every window); it ignores the start-to-start spread."""
    one = _blocks([[0.10, 0.101, 0.099, 0.10, 0.102, 0.098, 0.10, 0.10]])
    assert decide_uplift([p[0] for p in one[0]], [p[1] for p in one[0]], threshold=0.0,
                         alpha=0.01).outcome is Outcome.PASS
    d = decide_nested(one, threshold=0.0, alpha=0.01)
    assert d.outcome is Outcome.INCONCLUSIVE and d.n == 1 and d.pairs_needed is None
    assert "one server start: the start-to-start spread is unknown, at least 2 starts are needed" in d.reason
    assert "8 window pairs" in d.reason and d.estimate == pytest.approx(math.expm1(0.10), abs=1e-3)
    assert decide_nested([], threshold=0.0, alpha=0.01).reason == "uplift: no server starts measured"


def test_start_spread_is_not_hidden_by_many_windows() -> None:
    """Three starts at +6 %, -2 %, +2 % with tight windows: 24 window pairs look decisive, 3 starts are not."""
    blocks = _blocks([[s + w for w in (-0.002, 0.0, 0.001, 0.002, -0.001, 0.0, 0.001, -0.001)]
                      for s in (0.06, -0.02, 0.02)])
    flat_on = [on for b in blocks for on, _ in b]
    assert decide_uplift(flat_on, [100.0] * 24, threshold=0.0, alpha=0.01).outcome is Outcome.PASS
    d = decide_nested(blocks, threshold=0.0, alpha=0.01)
    assert d.outcome is Outcome.INCONCLUSIVE
    c = components(blocks)
    assert c.start_sd is not None and c.window_sd is not None and c.start_sd > 10 * c.window_sd


def test_unbalanced_uses_the_mean_of_block_means() -> None:
    d = decide_nested(_blocks([[0.0], [0.0, 0.2], [0.2, 0.3, 0.4]]), threshold=-0.5, alpha=0.05)
    assert d.estimate == pytest.approx(math.expm1(0.4 / 3))  # not the window mean 1.1 / 6
    assert "3 starts x 1-3 window pairs" in d.reason and d.outcome is Outcome.PASS


def test_lower_is_better_and_bad_input_names_the_start() -> None:
    lat = [[(90.0, 100.0), (91.0, 100.0)], [(89.0, 100.0), (90.0, 100.0)], [(90.5, 100.0), (90.0, 100.0)]]
    d = decide_nested(lat, threshold=0.05, higher_is_better=False, alpha=0.01)
    assert d.outcome is Outcome.PASS and d.estimate == pytest.approx(100 / 90 - 1, rel=1e-2)
    with pytest.raises(StatsError, match="start 2: no window pairs"):
        decide_nested([[(1.0, 1.0)], []], threshold=0.0, alpha=0.01)
    with pytest.raises(StatsError, match="start 1: on: expected positive"):
        components([[(-1.0, 1.0)]])
    with pytest.raises(StatsError, match="alpha"):
        decide_nested(_blocks(HAND), threshold=0.0, alpha=0.5)


# ----------------------------------------------------------------------------- the scipy oracle


@pytest.mark.parametrize("seed", range(12))
def test_balanced_equals_a_t_test_on_block_means(seed: int) -> None:
    sst = pytest.importorskip("scipy.stats")
    rng = random.Random(seed)
    b, w = rng.choice([2, 3, 4, 6]), rng.choice([1, 2, 4, 8])
    start_sd, window_sd = rng.choice([0.0, 0.005, 0.02]), rng.choice([0.005, 0.02])
    up, alpha, thr = rng.uniform(-0.03, 0.05), rng.choice([0.01, 0.025, 0.05]), rng.choice([0.0, 0.02])
    ratios = []
    for _ in range(b):
        s = rng.gauss(0, start_sd)
        ratios.append([up + s + rng.gauss(0, window_sd) for _ in range(w)])
    means = [sum(r) / w for r in ratios]
    d = decide_nested(_blocks(ratios), threshold=thr, alpha=alpha)
    lo, hi = sst.t.interval(1 - 2 * alpha, b - 1, loc=sum(means) / b, scale=sst.sem(means))
    p = sst.ttest_1samp(means, math.log1p(thr), alternative="less").pvalue
    assert d.lower == pytest.approx(math.expm1(lo), abs=1e-8) and d.upper == pytest.approx(math.expm1(hi), abs=1e-8)
    assert d.p_value == pytest.approx(p, abs=1e-7)
    want = (Outcome.PASS if lo >= math.log1p(thr) else Outcome.FAIL if hi < math.log1p(thr)
            else Outcome.INCONCLUSIVE)
    assert d.outcome is want and d.n == b


# ----------------------------------------------------------------------------- properties

_ratio = st.floats(-0.3, 0.3, allow_nan=False)
_nested = st.lists(st.lists(_ratio, min_size=1, max_size=6), min_size=2, max_size=6)


def _swap(blocks: Blocks) -> Blocks:
    return [[(off, on) for on, off in b] for b in blocks]


@settings(deadline=None, max_examples=150)
@given(_nested, st.floats(-0.1, 0.1))
def test_swapping_arms_negates(ratios: list[list[float]], thr: float) -> None:
    blocks = _blocks(ratios)
    d = decide_nested(blocks, threshold=thr, alpha=0.01)
    same = decide_nested(_swap(blocks), threshold=thr, higher_is_better=False, alpha=0.01)
    assert same == d  # on/off swapped and the direction turned: the very same log ratios
    s = decide_nested(_swap(blocks), threshold=0.0, alpha=0.01)
    z = decide_nested(blocks, threshold=0.0, alpha=0.01)
    assert math.log1p(s.estimate) == pytest.approx(-math.log1p(z.estimate), abs=1e-9)
    assert math.log1p(s.lower) == pytest.approx(-math.log1p(z.upper), abs=1e-9)
    if z.outcome is Outcome.FAIL:
        assert s.outcome is Outcome.PASS
    cs, cz = components(_swap(blocks)), components(blocks)  # the spread does not care which arm is which
    for a, b in ((cs.start_sd, cz.start_sd), (cs.window_sd, cz.window_sd), (cs.block_sd, cz.block_sd)):
        assert (a is None) == (b is None) and (a is None or a == pytest.approx(b, abs=1e-12))


@settings(deadline=None, max_examples=150)
@given(_nested, st.lists(st.floats(0.01, 100.0), min_size=6, max_size=6), st.floats(0.5, 2.0))
def test_a_start_that_slows_both_arms_changes_nothing(ratios: list[list[float]], scale: list[float],
                                                      one_arm: float) -> None:
    """Both arms of a start scaled together (a slower day) cancel; one arm scaled shifts the estimate only."""
    blocks = _blocks(ratios)
    d = decide_nested(blocks, threshold=0.02, alpha=0.01)
    scaled = [[(on * scale[b], off * scale[b]) for on, off in blk] for b, blk in enumerate(blocks)]
    e = decide_nested(scaled, threshold=0.02, alpha=0.01)
    assert e.estimate == pytest.approx(d.estimate, abs=1e-9) and e.lower == pytest.approx(d.lower, abs=1e-9)
    shifted = decide_nested([[(on * one_arm, off) for on, off in b] for b in blocks], threshold=0.02, alpha=0.01)
    assert math.log1p(shifted.upper) - math.log1p(d.upper) == pytest.approx(math.log(one_arm), abs=1e-9)


@settings(deadline=None, max_examples=150)
@given(st.integers(2, 6), st.integers(2, 8), st.data())
def test_balanced_components_add_up_to_the_block_mean_spread(b: int, w: int, data: st.DataObject) -> None:
    ratios = [data.draw(st.lists(_ratio, min_size=w, max_size=w)) for _ in range(b)]
    c = components(_blocks(ratios))
    assert c.start_sd is not None and c.window_sd is not None and c.block_sd is not None
    if c.start_sd > 0:  # not truncated: start var + window var / W is exactly the block-mean variance
        assert c.start_sd ** 2 + c.window_sd ** 2 / w == pytest.approx(c.block_sd ** 2, rel=1e-6, abs=1e-15)
    else:
        assert c.block_sd ** 2 <= c.window_sd ** 2 / w * (1 + 1e-9) + 1e-15
    d = decide_nested(_blocks(ratios), threshold=0.0, alpha=0.01)
    assert d.lower <= d.estimate <= d.upper and d.p_value is not None and 0 <= d.p_value <= 1
    rev = decide_nested(_blocks([list(reversed(r)) for r in reversed(ratios)]), threshold=0.0, alpha=0.01)
    assert rev.outcome is d.outcome and rev.estimate == pytest.approx(d.estimate, abs=1e-12)


# ----------------------------------------------------------------------------- screens


def test_screen_windows_flags_a_window_within_its_start() -> None:
    calm = [0.02, 0.025, 0.018, 0.022, 0.021, 0.019]
    bad = [*calm[:3], 0.02 + math.log(0.8), *calm[4:]]
    assert screen_windows(_blocks([calm, bad, calm[:2]])) == [(1, 3)]
    assert screen_windows(_blocks([calm[:2], [0.0, -0.3]])) == []  # < 3 windows: nothing to compare with
    # a start off as a whole is not an odd window: each window is judged within its own start
    assert screen_windows(_blocks([calm, [x - 0.22 for x in calm], calm])) == []


def test_screen_starts_flags_a_start_off_as_a_whole() -> None:
    calm = [0.02, 0.025, 0.018, 0.022]
    low = [x + math.log(0.8) for x in calm]
    assert screen_starts(_blocks([calm, low, [x + 0.005 for x in calm]])) == [1]
    assert screen_starts(_blocks([calm, low])) == []  # 2 starts: which one is odd?
    # 3 starts within a few % of each other: the floor keeps noise from being flagged
    assert screen_starts(_blocks([calm, [x + 0.03 for x in calm], [x + 0.0005 for x in calm]])) == []
    noisy = _blocks([[s] for s in (0.0, 0.3, -0.3, 0.2, -0.2, 0.1)])
    assert screen_starts(noisy) == []


# ----------------------------------------------------------------------------- planning


def test_windows_for_is_the_two_stage_optimum_clamped() -> None:
    def comp(s: float | None, w: float | None) -> Components:
        return Components(s, w, 3, 24, 8.0, None, 0.0)

    assert windows_for(comp(0.01, 0.02), 80.0, 20.0) == 4  # sqrt(80 / 20) * 0.02 / 0.01
    assert windows_for(comp(0.005, 0.02), 90.0, 10.0) == 12  # sqrt(9) * 4
    assert windows_for(comp(0.05, 0.001), 80.0, 20.0) == MIN_WINDOWS
    assert windows_for(comp(1e-6, 0.02), 80.0, 20.0) == MAX_WINDOWS
    assert windows_for(comp(0.0, 0.02), 80.0, 20.0) == MAX_WINDOWS
    assert windows_for(comp(None, 0.02), 80.0, 20.0) == DEFAULT_WINDOWS
    with pytest.raises(StatsError, match="window cost"):
        windows_for(comp(0.01, 0.02), 80.0, 0.0)


def test_expected_halfwidth_by_hand() -> None:
    # sigma = sqrt(0.01**2 + 0.02**2 / 4); c4(4) = 0.921318; t(0.99, 3) = 4.540703
    assert expected_halfwidth(0.01, 0.02, 4, 4, 0.01) == pytest.approx(4.540703 * 0.921318 * math.sqrt(2e-4) / 2,
                                                                      rel=1e-5)
    assert expected_halfwidth(0.01, 0.02, 6, 4, 0.01) < expected_halfwidth(0.01, 0.02, 4, 4, 0.01)
    assert expected_halfwidth(0.01, 0.02, 4, 8, 0.01) < expected_halfwidth(0.01, 0.02, 4, 4, 0.01)
    with pytest.raises(StatsError, match="2 starts"):
        expected_halfwidth(0.01, 0.02, 1, 4, 0.01)


def test_expected_halfwidth_is_the_mean_halfwidth() -> None:
    """Against simulation: the mean of decide_nested's half-widths (log units) over 3000 seeded campaigns."""
    rng = random.Random(7)
    b, w, s_sd, w_sd = 3, 4, 0.01, 0.02
    total = 0.0
    trials = 3000
    for _ in range(trials):
        ratios = []
        for _ in range(b):
            s = rng.gauss(0, s_sd)
            ratios.append([s + rng.gauss(0, w_sd) for _ in range(w)])
        d = decide_nested(_blocks(ratios), threshold=0.0, alpha=0.01)
        total += (math.log1p(d.upper) - math.log1p(d.lower)) / 2
    assert total / trials == pytest.approx(expected_halfwidth(s_sd, w_sd, b, w, 0.01), rel=0.03)


def test_plan_for_is_the_cheapest_plan_that_reaches_the_target() -> None:
    p = plan_for(0.005, 0.015, 0.016, 0.01, 80.0, 17.5, 10, points=2)
    assert p.meets_target and p.halfwidth <= 0.016
    assert p.seconds == pytest.approx(p.starts * (80.0 + 2 * p.windows * 17.5))
    for b in range(2, 11):  # brute force: nothing cheaper reaches the target
        for w in range(MIN_WINDOWS, MAX_WINDOWS + 1):
            if b * (80.0 + 2 * w * 17.5) < p.seconds:
                assert expected_halfwidth(0.005, 0.015, b, w, 0.01) > 0.016
    text = p.describe()
    assert text.startswith(f"{p.starts} starts x {p.windows} window pairs x 2 points ~ ")
    assert "expected 98 % CI half-width 1." in text and "if start sd <= 0.5 % and window sd <= 1.5 %" in text
    far = plan_for(0.02, 0.02, 0.001, 0.01, 80.0, 17.5, 6)
    assert not far.meets_target and far.starts == 6 and "out of reach within 6 starts" in far.describe()
    # dear starts and a small start sd: more windows per start, fewer starts
    assert plan_for(0.002, 0.02, 0.01, 0.01, 300.0, 5.0, 20).windows > plan_for(0.002, 0.02, 0.01, 0.01, 10.0, 5.0,
                                                                                  20).windows


# ----------------------------------------------------------------------------- sequential looks over starts


def test_sequential_plan_spends_alpha_over_starts() -> None:
    """SequentialPlan with starts as its unit: 3..6 starts, a look after each, the truth on the threshold.

    Wrong verdicts of either kind over all looks stay near alpha (here 5 % per kind, 800 seeded campaigns);
    a window-level interval in the same loop (ignoring the start sd, 3x the window sd) is wrong far more often.
    """
    plan = SequentialPlan(0.05, 3, 6)
    assert sum(plan.alpha_at(k) for k in range(3, 7)) == pytest.approx(0.05)
    rng = random.Random(3)
    wrong = wrong_flat = 0
    trials = 800
    for _ in range(trials):
        ratios = []
        for _ in range(6):
            s = rng.gauss(0, 0.03)
            ratios.append([s + rng.gauss(0, 0.01) for _ in range(4)])
        for k in range(3, 7):
            d = decide_nested(_blocks(ratios[:k]), threshold=0.0, alpha=plan.alpha_at(k))
            if not plan.should_continue([d], k):
                wrong += d.decided
                break
        flat = [x for r in ratios[:3] for x in r]
        wrong_flat += decide_uplift([math.exp(x) for x in flat], [1.0] * len(flat), threshold=0.0,
                                    alpha=0.05).decided
    assert wrong / trials <= 0.075
    assert wrong_flat / trials > 0.3


def test_spread_seen_recovers_both_spreads_over_nights_and_counts_every_night() -> None:
    """Known truth: start sd 1 %, window pair sd 2 %, 40 nights of 3 starts x 5 window pairs."""
    from pytest_p2p.stats import spread_seen

    rng = random.Random(7)
    nights = []
    for _ in range(40):
        night = []
        for _ in range(3):
            effect = rng.gauss(0.0, 0.01)
            night.append([(1.2 * math.exp(effect + rng.gauss(0.0, 0.02)), 1.0) for _ in range(5)])
        nights.append(night)
    seen = spread_seen(nights)
    assert (seen.nights, seen.df, seen.windows) == (40, 80, 5)
    assert seen.start_sd == pytest.approx(0.01, abs=0.002) and seen.window_sd == pytest.approx(0.02, abs=0.001)
    # a night of one start counts (it is history) but has no spread; nights of another design are not pooled
    one_start = [[(1.2, 1.0), (1.21, 1.0)]]
    other = [[(1.2, 1.0)] * 4, [(1.3, 1.0)] * 4]
    mixed = spread_seen([*nights[:2], one_start, other])
    assert (mixed.nights, mixed.df, mixed.windows) == (4, 5, 5)
    assert mixed.start_sd == spread_seen(nights[:2]).start_sd
    assert spread_seen([one_start]).start_sd is None and spread_seen([]).describe() == "none"
    assert spread_seen(nights[:1]).describe() == "1 earlier night (2 df)"
    with pytest.raises(StatsError, match="earlier night 2: start 1"):
        spread_seen([nights[0], [[(1.0, 0.0)]]])
