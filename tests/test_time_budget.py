"""``campaign.max_time_s`` is a slot that ends: a unit added while undecided must end inside it.

Why: checked only as "has the time run out", a campaign began one more unit with a few seconds left and overran its
nightly slot by all of it: a launch of one start and its windows took 96 s on 2x H100 and 2x H200 (twelfth and
eleventh sessions), a restart pair 2-4 min. A clock that jumps stands in for those units here, so nothing depends
on this box's speed."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from campaign_fakes import run_campaign
from test_campaign_adaptive import TableBackend
from test_campaign_resident import _runner

import pytest_p2p.campaign.blocks as blocks
import pytest_p2p.campaign.runner as runner_mod
from pytest_p2p.campaign.adaptive import TimeBudget
from pytest_p2p.stats import Outcome


class JumpingClock:
    """``time.monotonic`` plus an offset the test moves: a unit "takes" what the test says it does."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    @staticmethod
    def sleep(s: float) -> None:
        time.sleep(s)


def test_a_unit_is_begun_only_where_it_ends_inside_the_slot() -> None:
    b = TimeBudget(max_time_s=900.0, started=0.0, unit="start")
    assert b.refuses(800.0) is None  # nothing measured yet: only a spent slot refuses
    b.took(700.0, 796.0)
    assert b.refuses(803.0) is None  # 96 s fit in the 97 s left
    why = b.refuses(805.0)
    assert why == ("time budget campaign.max_time_s=900 s: another start (~96 s, as the last took) would end past "
                   "it (95 s left)")
    assert b.refuses(900.0) == "time budget campaign.max_time_s=900 s spent"
    b.took(0.0, 100.0, size=2)  # a launch of two starts made at once: a launch of four costs about twice that
    assert b.refuses(650.0, size=2) is None and b.refuses(750.0, size=4) is not None
    assert "another 4 starts (~200 s" in str(b.refuses(750.0, size=4))
    assert TimeBudget(None, 0.0, "pair").refuses(1e9) is None


def test_a_restart_campaign_adds_no_pair_that_would_overrun_its_slot(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    clock = JumpingClock()
    monkeypatch.setattr(runner_mod, "time", clock)

    class Slow(TableBackend):
        def measure(self, handle: tuple[str, int, int], point: str, rep: int) -> dict[str, Any]:
            clock.offset += 1000.0  # a slot: 1000 s, a pair 2000 s (and what this box took: far less)
            return super().measure(handle, point, rep)

    # +5.5 % against +5 %: undecided for many more pairs than the slot holds
    table = {("p2p_on", k + 1): [v] for k, v in enumerate([106.5, 104.5, 106.0])}
    res = run_campaign(tmp_path, Slow(table, {"p2p_on": 105.5, "p2p_off": 100.0}), "budget", reps=3, max_reps=50,
                       max_time_s=7500)
    # 6000 s spent on the 3 planned pairs, 1500 s left: a 4th pair (2000 s) would end past the slot
    d = res.decisions["c1"]
    assert res.reps == 3 and d["outcome"] == "inconclusive", (res.reps, d)
    assert d["stopped"].startswith("time budget campaign.max_time_s=7500 s: another pair (~2"), d["stopped"]


def test_a_resident_campaign_adds_no_start_that_would_overrun_its_slot(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    clock = JumpingClock()
    monkeypatch.setattr(blocks, "time", clock)
    monkeypatch.setattr(runner_mod, "time", clock)
    real_launch = blocks._start_with_retries

    def launch(*args: Any, **kwargs: Any) -> None:
        real_launch(*args, **kwargs)
        if not kwargs.get("rerun"):  # a start the screen runs again (this loaded box can make one odd) takes no jump
            clock.offset += 10_000.0  # a launch and its windows: 10 000 s more than this box took

    monkeypatch.setattr(blocks, "_start_with_retries", launch)
    real_decide = blocks.adaptive.decide_starts

    def undecided(*args: Any, **kwargs: Any) -> Any:  # what the stand-in's alike arms decide is not the point here
        return dataclasses.replace(real_decide(*args, **kwargs), outcome=Outcome.INCONCLUSIVE)

    monkeypatch.setattr(blocks.adaptive, "decide_starts", undecided)
    res = _runner(tmp_path, starts=3, max_starts=6, windows=1, concurrency=[1], max_time_s=35_000).run()
    assert res.status == "complete", res.errors
    # 3 launches: 30 000 s and what this box took; a 4th (10 000 s and more) would end past 35 000 s
    assert not [n for n in res.notes if n.startswith("uplift inconclusive at")], res.notes
    stopped = res.decisions["c1"]["stopped"]
    assert stopped.startswith("time budget campaign.max_time_s=35000 s: another start (~1"), stopped
    assert "would end past it" in stopped
