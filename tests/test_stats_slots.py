"""The slot screen (issue 9): a server start off at every point together, seen by pooling the points."""

from __future__ import annotations

import math
import random

import pytest

from pytest_p2p.stats import StatsError, outliers, outlying_slots


def test_a_bad_start_hidden_at_each_point_is_found_across_points() -> None:
    rows = [[100.0, 90.0, 80.0, 110.0], [108.0, 95.0, 82.0, 100.0], [92.0, 104.0, 78.0, 100.0],
            [105.0, 110.0, 81.0, 94.0]]
    assert all(outliers(row) == [] for row in rows)  # no point alone flags rep 3
    assert outlying_slots(rows) == [2]


def test_small_shifts_and_too_many_flags_are_not_bad_slots() -> None:
    # 6 % low everywhere, perfectly consistent: significant but below the 10 % minimum size
    assert outlying_slots([[100.0, 100.0, 94.0, 100.0], [50.0, 50.0, 47.0, 50.0]]) == []
    assert outlying_slots([[100.0, 100.0, 85.0, 100.0], [50.0, 50.0, 42.5, 50.0]]) == [2]
    # two of four slots off: noise, not one bad start
    assert outlying_slots([[100.0, 70.0, 70.0, 100.0], [100.0, 70.0, 70.0, 100.0]]) == []


def test_nothing_to_pool_gives_no_flags_and_bad_input_is_a_stats_error() -> None:
    assert outlying_slots([[100.0, 80.0, 100.0]]) == []  # one point: the per-point screen's job
    assert outlying_slots([[100.0, 80.0], [100.0, 80.0]]) == []  # two reps
    with pytest.raises(StatsError, match="same reps"):
        outlying_slots([[1.0, 2.0, 3.0], [1.0, 2.0]])
    with pytest.raises(StatsError, match="positive"):
        outlying_slots([[1.0, 0.0, 3.0], [1.0, 2.0, 3.0]])


def test_null_flag_rate_is_near_the_stated_alpha() -> None:
    """Pure noise (CV 5 %, 4 points x 4 reps), min size off: the per-slot rate sits near alpha (1 %); with
    the 10 % minimum size it is far below (a false flag costs a re-run, never a verdict)."""
    rng = random.Random(3)
    trials, flags_alpha, flags_default = 3000, 0, 0
    for _ in range(trials):
        rows = [[math.exp(rng.gauss(0, 0.05)) for _ in range(4)] for _ in range(4)]
        flags_alpha += len(outlying_slots(rows, min_size=0.0))
        flags_default += len(outlying_slots(rows))
    rate = flags_alpha / (trials * 4)
    assert 0.003 < rate < 0.02, rate
    assert flags_default / (trials * 4) < 0.005
