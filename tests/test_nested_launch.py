"""The launch guard of the nested verdict: starts made at once (``campaign.starts_at_once``) share their launch.

Why: the starts of one launch come up at the same moment on the same pair. A launch effect on the on/off ratio
would make them agree too well, and judging their means with df = starts - 1 would then cry wolf (up to 13 % of
unchanged campaigns at a launch sd of 1 %, benchmarks/verdict_nested.py table 4). The guard looks for one.
"""

from __future__ import annotations

import math

import pytest

from pytest_p2p.stats import Outcome, StatsError, decide_nested, launch_check
from pytest_p2p.stats.nested import LAUNCH_GUARD_LEVEL, f_sf


def _blocks(ratios: list[float], windows: int = 2) -> list[list[tuple[float, float]]]:
    """One block per start whose windows all have the on/off ratio ``exp(r)`` (window noise 0 within a start,
    a little between windows so the window spread is defined)."""
    return [[(100.0 * math.exp(r + (0.001 if w % 2 else -0.001)), 100.0) for w in range(windows)] for r in ratios]


def test_the_f_statistic_is_the_one_way_anova_of_start_means_by_launch() -> None:
    # launch means 0.11 and 0.31 around 0.21: MS between = 2 x (0.1^2 + 0.1^2) / 1 = 0.04;
    # MS within = 4 x 0.01^2 / (4 - 2) = 0.0002; F = 200 on (1, 2) df
    check = launch_check([0.10, 0.12, 0.30, 0.32], ["a", "a", "b", "b"])
    assert check.status == "fired" and (check.launches, check.starts) == (2, 4)
    assert check.f == pytest.approx(200.0) and check.p == pytest.approx(f_sf(200.0, 1, 2))
    # unbalanced launches: 3 + 1 starts
    check = launch_check([0.10, 0.11, 0.12, 0.105], [1, 1, 1, 2])
    grand = (0.10 + 0.11 + 0.12 + 0.105) / 4
    msb = (3 * (0.11 - grand) ** 2 + (0.105 - grand) ** 2) / 1
    msw = (0.01 ** 2 + 0 + 0.01 ** 2) / 2
    assert check.f == pytest.approx(msb / msw) and check.status == "passed"


def test_starts_of_their_own_launch_or_no_labels_leave_the_guard_out() -> None:
    assert launch_check([0.1, 0.2, 0.3], None).status == "none"
    assert launch_check([0.1, 0.2, 0.3], [1, 2, 3]).status == "none"
    assert launch_check([0.1, 0.2, 0.3], [7, 7, 7]).status == "one launch"
    with pytest.raises(StatsError, match="3 start means but 2 launch labels"):
        launch_check([0.1, 0.2, 0.3], [1, 1])


def test_launches_that_agree_leave_the_starts_as_the_unit() -> None:
    ratios = [0.20, 0.24, 0.22, 0.21, 0.23, 0.19, 0.25, 0.22]  # two launches of 4, alike
    plain = decide_nested(_blocks(ratios), threshold=0.0, alpha=0.005)
    guarded = decide_nested(_blocks(ratios), threshold=0.0, alpha=0.005, launches=[1] * 4 + [2] * 4)
    assert launch_check(ratios, [1] * 4 + [2] * 4).p > LAUNCH_GUARD_LEVEL
    assert (guarded.n, guarded.lower, guarded.upper) == (8, plain.lower, plain.upper)
    assert guarded.outcome is plain.outcome is Outcome.PASS
    assert "launch guard: 8 starts in 2 launches agree" in guarded.reason


def test_launches_that_differ_send_the_verdict_to_the_launch_means() -> None:
    # starts agree within each launch, the launches do not: a launch effect of 10 % on the ratio
    ratios = [0.100, 0.102, 0.098, 0.101, 0.200, 0.199, 0.201, 0.202]
    d = decide_nested(_blocks(ratios), threshold=0.0, alpha=0.005, launches=["x"] * 4 + ["y"] * 4)
    assert d.n == 2  # two launch means, df = 1
    assert d.outcome is Outcome.INCONCLUSIVE  # t(0.995, 1) = 63.7: two launches 10 % apart decide nothing
    assert "judged on the launch means, df = 1" in d.reason and "launches of 2 window pairs would decide" in d.reason
    plain = decide_nested(_blocks(ratios), threshold=0.0, alpha=0.005)
    assert plain.outcome is Outcome.PASS  # what the starts alone would have claimed


def test_several_starts_of_one_launch_are_inconclusive_as_one_start_is() -> None:
    d = decide_nested(_blocks([0.2, 0.21, 0.19, 0.2]), threshold=0.0, alpha=0.005, launches=[3, 3, 3, 3])
    assert d.outcome is Outcome.INCONCLUSIVE
    assert "made at once, in one launch" in d.reason and "at least 2 launches are needed" in d.reason


def test_where_the_guard_fires_the_model_says_the_prior_was_set_aside_as_the_decision_did() -> None:
    """``run.json`` records the prior's use beside the decision (``stats.nested_model``, one pass). Asked apart,
    without the launches, the prior looked borrowed on a night the guard had judged on launch means; the model
    answers what the decision did."""
    from pytest_p2p.stats import StartPrior, nested_model, prior_use

    ratios = [0.100, 0.102, 0.098, 0.101, 0.200, 0.199, 0.201, 0.202, 0.150, 0.151, 0.149, 0.150]
    labels = ["x"] * 4 + ["y"] * 4 + ["z"] * 4
    prior = StartPrior(var=0.05 ** 2, df=18.0, nights=9, windows=2)
    d = decide_nested(_blocks(ratios), threshold=0.0, alpha=0.005, prior=prior, launches=labels)
    model = nested_model(_blocks(ratios), prior=prior, launches=labels)
    assert d.n == 3 and model.launch.status == "fired" and model.fit.status == "none"
    assert model.prior.status == "ignored" and "launch guard fired" in model.prior.reason
    assert prior_use(_blocks(ratios), prior, launches=labels) == model.prior
    assert prior_use(_blocks(ratios), prior).status == "used"  # the same night, the launches not given
    assert "start spread from 9 earlier nights (18 df))" not in d.reason
