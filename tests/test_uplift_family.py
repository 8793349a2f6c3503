"""One error budget per check and per campaign: a check or a campaign that judges ``k`` sizes or points judges each
at its alpha / ``k``, wherever it is judged (the campaign, its check, its report, the probe checks).

Why: a check fails when any of its sizes fails, and a campaign's verdict is red when any point fails. At the
rig's alpha each, 4 sizes of the probe uplift at a true value on the margin failed the check 3.4 % of the time
(0.8 % split), and 4 points of a restart-per-rep campaign at a true 0 % failed 2.3-4.5 % of campaigns (0.7-1.05 %)
(``benchmarks/verdict_family.py``, 4000 trials a cell). The resident campaign already split its alpha.
"""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path
from typing import Any

from campaign_fakes import forget_decisions
from test_campaign_demo import FakeBackend, _runner
from test_probe_trials import KiB, _result, noisy

from pytest_p2p.probes.allreduce import Row
from pytest_p2p.probes.config import Thresholds
from pytest_p2p.probes.judge import judge_busbw, judge_latency, judge_uplift, per_size
from pytest_p2p.report.render import build_summary
from pytest_p2p.results.read import RunReader


class NoisyBackend(FakeBackend):
    """p2p_on 10 % faster, each window with 3 % of seeded noise: decisions with a spread to bound."""

    def __init__(self) -> None:
        super().__init__()
        self.rng = random.Random(7)

    def measure(self, handle: Any, point: str, rep: int) -> dict[str, Any]:
        got = super().measure(handle, point, rep)
        got["output_throughput"] *= math.exp(self.rng.gauss(0.0, 0.03))
        return got


def test_a_restart_campaign_decides_each_point_at_its_share_of_the_alpha(tmp_path: Path) -> None:
    res = _runner(tmp_path, NoisyBackend(), schedule="abba", reps=4, min_uplift="0%").run()
    assert res.status == "complete" and res.points == ["c1", "c4"]
    for point in res.points:
        d = res.decisions[point]
        assert d["level"] == 0.99, d  # 1 % over 2 points: each one-sided at 0.5 %
        v = res.uplift_verdict(point)
        assert v.level == 0.99 and v.ci95 == (d["lower"], d["upper"])
    entries = {e["point"]: e for e in build_summary(RunReader(res.run_dir))["uplift"]}
    assert all(e["level"] == 0.99 for e in entries.values()), entries


def test_the_report_and_the_check_agree_on_a_restart_run_without_decisions(tmp_path: Path) -> None:
    """A run cut short before it decided: both judge its pairs at the campaign's alpha split over its points."""
    res = _runner(tmp_path, NoisyBackend(), schedule="abba", reps=4, min_uplift="0%").run()
    forget_decisions(res)
    entries = {e["point"]: e for e in build_summary(RunReader(res.run_dir))["uplift"]}
    for point in res.points:
        v, e = res.uplift_verdict(point), entries[point]
        assert v.level == e["level"] == 0.99
        assert v.ci95 is not None and e["interval"] is not None
        assert math.isclose(v.ci95[0], e["interval"][0]) and math.isclose(v.ci95[1], e["interval"][1])
        assert v.outcome == e["outcome"]


def _arm(arm: str, centre: float, sizes: tuple[int, ...], seed: int) -> Any:
    return _result(arm, [dataclasses.replace(Row.from_time(s, centre, 2),
                                             trials_us=tuple(noisy(centre, 10, 0.02, seed + i)))
                         for i, s in enumerate(sizes)])


def test_the_probe_checks_split_their_alpha_over_their_sizes() -> None:
    assert per_size(0.01, 4) == 0.0025 and per_size(0.01, 0) == 0.01
    sizes = (8 * KiB, 32 * KiB, 128 * KiB, 512 * KiB)
    on, off = _arm("p2p_on", 11.8, sizes, 1), _arm("p2p_off", 15.3, sizes, 20)
    four = judge_uplift(on, off, sizes, 0.05, 0.01)
    assert len(four) == 4 and all("(99.5 % CI " in j.line for j in four), [j.line for j in four]
    (one,) = judge_uplift(on, off, sizes[:1], 0.05, 0.01)
    assert "(98 % CI " in one.line  # one size: the check's alpha itself
    # the interval of a size judged among four is wider than judged alone
    lo4 = float(four[0].line.split("% CI ")[1].split(" %")[0])
    lo1 = float(one.line.split("% CI ")[1].split(" %")[0])
    assert lo4 < lo1
    bus = judge_busbw(on, Thresholds({8 * KiB: 0.1, 32 * KiB: 0.1}), 0.01)
    assert all("(99 % CI " in j.line for j in bus), [j.line for j in bus]
    (lat,) = judge_latency(on, Thresholds({}, {8 * KiB: 50.0}), 0.01)
    assert "(98 % CI " in lat.line
