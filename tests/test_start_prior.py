"""The start spread learned from earlier nights (issue 24, item 2): the prior, its guard, and the campaign path.

Error rates under known truth (>= 4000 trials a cell) are benchmarks/verdict_prior.py's job; here each rule
is pinned by hand-computed numbers, so a change to the arithmetic fails a test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from test_campaign_resident import _runner

from pytest_p2p.campaign import adaptive
from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.stats import (
    Outcome,
    StartPrior,
    StatsError,
    decide_nested,
    expected_halfwidth,
    plan_for,
    plan_with_prior,
    prior_use,
    spread_prior,
    start_prior,
    t_quantile,
)
from pytest_p2p.stats.nested import GUARD_LEVEL, GUARD_LEVEL_MANY, f_sf, guard_level, look_alpha

Blocks = list[list[tuple[float, float]]]


def _blocks(means: list[float], windows: int = 2, spread: float = 0.01) -> Blocks:
    """Starts whose window pairs' log ratios average to ``means`` exactly (window noise +-``spread``)."""
    out: Blocks = []
    for m in means:
        devs = [spread * (1 if w % 2 == 0 else -1) for w in range(windows)]
        if windows % 2:
            devs[-1] = 0.0
        out.append([(1000.0 * math.exp(m + d), 1000.0) for d in devs])
    return out


def _var(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


# three nights of three starts whose start means spread exactly alike (variance 1e-4): they agree
AGREE = [[0.10, 0.11, 0.12], [0.05, 0.06, 0.07], [-0.01, 0.0, 0.01]]


def test_the_prior_pools_nights_that_agree() -> None:
    p = start_prior([_blocks(n) for n in AGREE])
    assert p is not None and not p.moderated
    assert p.var == pytest.approx(1e-4, rel=1e-9) and p.df == 6 and p.nights == 3 and p.windows == 2
    assert p.describe() == "start spread from 3 earlier nights (6 df)"
    # unequal spreads that still agree within chance: pooled is the df-weighted mean of the variances
    nights = [[0.0, 0.01, 0.02], [0.0, 0.012, 0.024, 0.03], [0.0, 0.009, 0.02]]
    q = start_prior([_blocks(n) for n in nights])
    s2 = [_var(n) for n in nights]
    assert q is not None and not q.moderated and q.df == 7
    assert q.var == pytest.approx((2 * s2[0] + 3 * s2[1] + 2 * s2[2]) / 7, rel=1e-9)


def test_nights_that_disagree_give_the_moderated_prior() -> None:
    """Spreads 100x apart: the empirical-Bayes fit lends fewer df than pooling would (moderate.spread_prior)."""
    nights = [[0.0, 0.001, 0.002], [0.0, 0.01, 0.02], [0.0, 0.1, 0.2], [0.0, 0.003, 0.006]]
    p = start_prior([_blocks(n) for n in nights])
    fit = spread_prior([(_var(n), 2.0) for n in nights])
    assert p is not None and fit is not None and p.moderated
    assert (p.var, p.df) == pytest.approx((fit.var, fit.df), rel=1e-12)
    assert p.df < 6 and "moderated" in p.describe()


def test_too_few_nights_or_df_give_no_prior_and_other_designs_are_left_out() -> None:
    assert start_prior([_blocks(n) for n in AGREE[:2]]) is None  # 2 nights
    assert start_prior([_blocks(n[:2]) for n in AGREE]) is None  # 3 nights of 2 starts: 3 df < 4
    one_start = [_blocks([0.1])] * 5
    assert start_prior(one_start) is None  # a night of one start has no spread
    mixed = [_blocks(n, windows=2) for n in AGREE] + [_blocks(n, windows=4) for n in AGREE[:2]]
    p = start_prior(mixed)
    assert p is not None and p.windows == 2 and p.nights == 3  # the design most nights ran
    assert start_prior(mixed, windows=4) is None  # only 2 nights of 4 window pairs
    with pytest.raises(StatsError, match="earlier night 2"):
        start_prior([_blocks(AGREE[0]), [[(1.0, 1.0)], []]])


def test_a_prior_without_spread_or_design_is_refused_when_built() -> None:
    for bad in ({"var": 0.0}, {"var": math.nan}, {"df": 0.0}, {"df": math.inf}, {"windows": 0}, {"nights": 0}):
        with pytest.raises(StatsError, match="start prior needs"):
            StartPrior(**{"var": 1e-4, "df": 6.0, "nights": 3, "windows": 2, **bad})


def test_f_sf_matches_published_critical_values() -> None:
    assert f_sf(4.3512, 1, 20) == pytest.approx(0.05, abs=1e-4)  # F(0.95; 1, 20)
    assert f_sf(4.1028, 2, 10) == pytest.approx(0.05, abs=1e-4)  # F(0.95; 2, 10)
    assert f_sf(1.0, 2, 2) == pytest.approx(0.5, abs=1e-12)
    assert f_sf(0.0, 1, 5) == 1.0


TONIGHT = [0.050, 0.065]  # 2 starts: s2 = 1.125e-4, mean 0.0575
PRIOR = StartPrior(var=1e-4, df=18.0, nights=9, windows=2)


def test_the_prior_is_borrowed_with_its_df_added() -> None:
    alpha = 0.005
    d = decide_nested(_blocks(TONIGHT), threshold=0.0, alpha=alpha, prior=PRIOR)
    var = (18 * 1e-4 + 1 * 1.125e-4) / 19
    half = t_quantile(1 - alpha, 19) * math.sqrt(var / 2)
    assert math.log1p(d.lower) == pytest.approx(0.0575 - half, abs=1e-12)
    assert math.log1p(d.upper) == pytest.approx(0.0575 + half, abs=1e-12)
    assert d.outcome is Outcome.PASS and d.n == 2
    assert "start spread from 9 earlier nights (18 df)" in d.reason
    own = decide_nested(_blocks(TONIGHT), threshold=0.0, alpha=alpha)  # df 1: t = 63.7
    assert own.outcome is Outcome.INCONCLUSIVE and "earlier nights" not in own.reason
    use = prior_use(_blocks(TONIGHT), PRIOR)
    assert use.status == "used" and use.total_df == 19 and use.guard_p is not None and use.guard_p > GUARD_LEVEL


def test_pairs_needed_counts_the_prior_df() -> None:
    """Near the threshold: with 18 borrowed df a few starts decide what tonight's own df needs many more for."""
    means = [0.022, 0.008]  # s2 = 9.8e-5, about the prior's: the same spread, 18 more df
    with_prior = decide_nested(_blocks(means), threshold=0.0, alpha=0.005, prior=PRIOR)
    own = decide_nested(_blocks(means), threshold=0.0, alpha=0.005)
    assert with_prior.outcome is own.outcome is Outcome.INCONCLUSIVE
    assert with_prior.pairs_needed is not None and own.pairs_needed is not None
    assert with_prior.pairs_needed < own.pairs_needed
    assert f"about {with_prior.pairs_needed} starts of 2 window pairs" in with_prior.reason


def test_the_guard_refuses_the_prior_of_a_night_that_got_noisier() -> None:
    noisy = [0.00, 0.09]  # s2 = 4.05e-3, 40x the prior's: F(1, 18) p ~ 0.0003
    d = decide_nested(_blocks(noisy), threshold=0.0, alpha=0.005, prior=PRIOR)
    own = decide_nested(_blocks(noisy), threshold=0.0, alpha=0.005)
    assert (d.outcome, d.lower, d.upper, d.pairs_needed) == (own.outcome, own.lower, own.upper, own.pairs_needed)
    assert "is not borrowed" in d.reason and "F test p =" in d.reason and "noise grew" in d.reason
    use = prior_use(_blocks(noisy), PRIOR)
    assert use.status == "refused" and use.guard_p is not None and use.guard_p < GUARD_LEVEL
    assert use.as_json()["guard_level"] == GUARD_LEVEL


def test_the_guard_is_stricter_where_tonight_has_many_df() -> None:
    """Tonight's spread twice the prior's (F = 2, 18 prior df): on the committed rig's 8 starts, the first arm
    fitted (6 df), p ~ 0.1 is below the 20 % guard and the prior is refused; on 3 plain starts (2 df) the same
    F has p ~ 0.16, above the 5 % guard, and the prior is borrowed (benchmarks/verdict_prior_committed.py)."""
    assert (guard_level(1), guard_level(5), guard_level(6), guard_level(27)) == (
        GUARD_LEVEL, GUARD_LEVEL, GUARD_LEVEL_MANY, GUARD_LEVEL_MANY)
    a = math.sqrt(1.5e-4)  # each order's 4 start means at +-a about its mean: within-order ss 8 a^2 on 6 df = 2e-4
    means = [c + d for c, d in ((0.06, -a), (0.05, -a), (0.06, -a), (0.05, -a),
                                (0.06, a), (0.05, a), (0.06, a), (0.05, a))]
    orders = ["p2p_on", "p2p_off"] * 4
    p = f_sf(2.0, 6, 18)
    assert GUARD_LEVEL < p < GUARD_LEVEL_MANY
    use = prior_use(_blocks(means), PRIOR, sequences=orders)
    assert use.status == "refused" and use.guard_p == pytest.approx(p, rel=1e-9)
    assert use.as_json()["guard_level"] == GUARD_LEVEL_MANY
    d = decide_nested(_blocks(means), threshold=0.0, alpha=0.005, prior=PRIOR, sequences=orders)
    assert f"< {GUARD_LEVEL_MANY:g})" in d.reason and "is not borrowed" in d.reason
    few = [0.05, 0.05 + math.sqrt(2e-4), 0.05 + 2 * math.sqrt(2e-4)]  # 3 starts, s2 = 2e-4 on 2 df
    assert f_sf(2.0, 2, 18) > GUARD_LEVEL
    used = prior_use(_blocks(few), PRIOR)
    assert used.status == "used" and used.as_json()["guard_level"] == GUARD_LEVEL


def test_a_prior_of_another_design_is_ignored_and_one_start_stays_undecided() -> None:
    other = StartPrior(var=1e-4, df=18.0, nights=9, windows=8)
    d = decide_nested(_blocks(TONIGHT), threshold=0.0, alpha=0.005, prior=other)
    own = decide_nested(_blocks(TONIGHT), threshold=0.0, alpha=0.005)
    assert (d.outcome, d.lower, d.upper) == (own.outcome, own.lower, own.upper)
    assert "of 8 window pairs per start, tonight's starts have 2 window pairs" in d.reason
    assert prior_use(_blocks(TONIGHT), other).status == "ignored"
    one = decide_nested(_blocks([0.2]), threshold=0.0, alpha=0.005, prior=PRIOR)
    assert one.outcome is Outcome.INCONCLUSIVE and "at least 2 starts are needed" in one.reason
    assert "a second start is needed" in one.reason


def test_expected_halfwidth_and_the_plan_take_the_prior_df() -> None:
    sd = math.sqrt(0.01 ** 2 + 0.035 ** 2 / 8)
    df = 2 - 1 + 20
    c = math.sqrt(2 / df) * math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2))
    got = expected_halfwidth(0.01, 0.035, 2, 8, 0.005, prior_df=20)
    assert got == pytest.approx(t_quantile(0.995, df) * c * sd / math.sqrt(2), rel=1e-12)
    assert got < expected_halfwidth(0.01, 0.035, 2, 8, 0.005) / 10  # df 1 -> 21
    assert expected_halfwidth(0.01, 0.035, 2, 8, 0.005, prior_df=60) < got
    few = plan_with_prior(StartPrior(sd ** 2, 6.0, 3, 8), 0.02, 0.005, 130.0, 26.0, 40, points=2)
    many = plan_with_prior(StartPrior(sd ** 2, 60.0, 30, 8), 0.02, 0.005, 130.0, 26.0, 40, points=2)
    plain = plan_for(0.01, 0.035, 0.02, 0.005, 130.0, 26.0, 40, points=2)
    assert few.windows == many.windows == 8 and few.meets_target and many.meets_target
    assert many.starts < few.starts and many.seconds < plain.seconds
    assert many.halfwidth == pytest.approx(expected_halfwidth(sd, 0.0, many.starts, 8, 0.005, prior_df=60))
    assert "start spread from 30 earlier nights (60 df)" in many.describe()
    with pytest.raises(StatsError, match="prior df"):
        expected_halfwidth(0.01, 0.035, 2, 8, 0.005, prior_df=-1)


def test_a_plan_is_judged_at_the_alpha_its_first_look_spends_with_the_rig_s_max_starts() -> None:
    """Night 4 of the 7B rig's chain (2x H200) printed "c64: +-2 % would take 9 starts ..., expected 99 % CI
    half-width 1.9 %" beside "expected 99.2 % CI half-width ~2.1 %" at its 8 planned starts: with ``max_starts:
    10`` kept, 9 starts are judged at 99.1 % (``adaptive.start_plan``), and the advice now says so and is priced
    at it; without added starts the whole alpha is spent at once, as before."""
    prior = StartPrior(0.0209 ** 2, 21.0, 3, 2)
    kept = plan_with_prior(prior, 0.02, 0.005, 120.0, 15.0, 40, points=2, alternating=True, spent_over=10)
    whole = plan_with_prior(prior, 0.02, 0.005, 120.0, 15.0, 40, points=2, alternating=True)
    assert whole.alpha == 0.005 and kept.alpha == pytest.approx(0.005 * kept.starts / 10)
    assert kept.starts >= whole.starts
    assert kept.halfwidth == pytest.approx(expected_halfwidth(0.0209, 0.0, kept.starts, 2, kept.alpha, prior_df=21.0,
                                                              alternating=True))
    assert f"expected {(1 - 2 * kept.alpha) * 100:.4g} % CI" in kept.describe()
    assert "expected 99 % CI" in whole.describe()
    # beyond max_starts a plan's first look spends the whole alpha again (max_starts rises to the starts)
    assert plan_for(0.02, 0.035, 0.02, 0.005, 120.0, 15.0, 40, points=2, spent_over=3).alpha == 0.005
    sp = adaptive.start_plan(parse_campaign({"kind": "model", "concurrency": [16], "starts": 9, "max_starts": 10},
                                            "test"), 0.005)
    assert sp.alpha_at(9) == pytest.approx(look_alpha(0.005, 9, 10))


# ----------------------------------------------------------------------------- the campaign path


def _reps(means: list[float], windows: int) -> tuple[dict[int, dict[str, object]], dict[int, dict[str, object]]]:
    a: dict[int, dict[str, object]] = {}
    b: dict[int, dict[str, object]] = {}
    for s, (on_off) in enumerate(_blocks(means, windows), start=1):
        for w, (on, off) in enumerate(on_off, start=1):
            k = (s - 1) * windows + w
            meta = {"start": s, "window": w}
            a[k] = {"output_throughput": on, "completed": 8, "meta": meta}
            b[k] = {"output_throughput": off, "completed": 8, "meta": meta}
    return a, b


def test_decide_starts_borrows_the_runners_prior_and_records_it() -> None:
    cfg = parse_campaign({"kind": "model", "concurrency": [16], "starts": 2, "windows": 2, "min_uplift": "0%"},
                         "r.yaml")
    a, b = _reps(TONIGHT, 2)
    reps = sorted(a)
    d = adaptive.decide_starts(a, b, cfg, "model", reps, 0.0, 0.005, PRIOR)
    own = adaptive.decide_starts(a, b, cfg, "model", reps, 0.0, 0.005)
    assert d.outcome is Outcome.PASS and own.outcome is Outcome.INCONCLUSIVE
    assert d.upper - d.lower < (own.upper - own.lower) / 10
    rec = adaptive.prior_json(a, b, cfg, "model", reps, PRIOR)
    assert rec["status"] == "used" and rec["nights"] == 9 and rec["df"] == 18.0 and rec["windows"] == 2
    assert adaptive.prior_json(a, b, cfg, "model", reps, None) == {"status": "none"}
    noisy_a, noisy_b = _reps([0.0, 0.09], 2)
    assert adaptive.prior_json(noisy_a, noisy_b, cfg, "model", reps, PRIOR)["status"] == "refused"


def test_a_campaign_given_a_prior_decides_with_it_and_says_so(tmp_path: Path) -> None:
    """The stand-in, through the real path: c1 borrows a (wide, so never refused) prior; c2's is of another design."""
    wide = StartPrior(var=1.0, df=40.0, nights=20, windows=2)
    runner: Any = _runner(tmp_path, starts=2, concurrency=[1, 2])
    runner.start_priors = {"c1": wide, "c2": StartPrior(var=1e-4, df=18.0, nights=9, windows=4)}
    res = runner.run()
    assert res.status == "complete", res.errors
    c1, c2 = res.decisions["c1"], res.decisions["c2"]
    assert c1["start_prior"]["status"] == "used" and c1["start_prior"]["nights"] == 20
    assert "start spread from 20 earlier nights (40 df)" in str(c1["reason"])
    assert c2["start_prior"]["status"] == "ignored" and "of 4 window pairs per start" in str(c2["reason"])
    # a prior of variance 1 (log units) makes the interval +-t(41) * sqrt(~40/41 / 2) wide: borrowed, not tonight's
    lo, hi = math.log1p(float(c1["lower"])), math.log1p(float(c1["upper"]))
    assert (hi - lo) / 2 == pytest.approx(t_quantile(1 - 0.005, 41) * math.sqrt((40 + 1 * 0.0) / 41 / 2), rel=0.01)
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["decisions"]["c1"]["start_prior"]["df"] == 40.0
    # aggregate.json's descriptive 95 % interval borrows it where the decision does, and says so
    assert "+ 40 from a start spread of 20 earlier nights" in str(res.uplift["c1"]["kind"])
    assert str(res.uplift["c2"]["kind"]).endswith("(df = starts - 1)")
    plan = next(n for n in res.notes if n.startswith("plan: resident arms"))
    assert "c1: +-2 % would take " in plan
    assert "as on earlier nights (start spread from 20 earlier nights (40 df))" in plan
    assert "c2: the start spread from 9 earlier nights (18 df) is of 4 window pairs per start" in plan


def test_the_plan_leads_with_what_the_borrowed_spread_lets_tonight_expect(tmp_path: Path) -> None:
    """Night 4 of the committed 7B rig's chain (2x H200, 2026-11-28) printed "expected ... ~3.3 %" and "+-2 % would
    take 14 starts": its own starts' figures, while both points borrowed a spread that expected ~1.0 and ~2.1 %.
    With a prior at every point the line leads with each point's expected half-width with it and drops the
    own-starts +-2 % plan; with a prior at one point it names that point's beside tonight's own figure."""
    from pytest_p2p.campaign.blocks import plan_line

    runner: Any = _runner(tmp_path, starts=8, concurrency=[1, 2])
    priors = {"c1": StartPrior(var=0.0096 ** 2, df=21.0, nights=3, windows=2),
              "c2": StartPrior(var=0.0209 ** 2, df=21.0, nights=3, windows=2)}
    look = adaptive.start_plan(runner.config, runner.config.uplift_rule_for("model").family_alpha(2)).alpha_at(8)
    want = {p: expected_halfwidth(v.var ** 0.5, 0.0, 8, 2, look, prior_df=21.0, alternating=True)
            for p, v in priors.items()}
    runner.start_priors = priors
    both = plan_line(runner, ["c1", "c2"])
    assert (f"CI half-width ~{want['c1'] * 100:.1f} % (c1), ~{want['c2'] * 100:.1f} % (c2) of the ratio with the "
            "start spread of earlier nights (unless tonight's starts spread more: the guard), ~") in both
    assert "on tonight's starts alone" in both and "+-2 % would take 1" not in both.split("; c1:")[0]
    assert "; c1: +-2 % would take " in both and "; c2: +-2 % would take " in both
    runner.start_priors = {"c2": priors["c2"]}
    one = plan_line(runner, ["c1", "c2"])
    assert f"% ({'H100 figures'}), ~{want['c2'] * 100:.1f} % (c2) with the start spread of earlier nights; " \
           "+-2 % would take " in one
    runner.start_priors = {}
    assert "with the start spread" not in plan_line(runner, ["c1", "c2"])
