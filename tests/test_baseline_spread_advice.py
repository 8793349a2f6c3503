"""When the baseline's run-to-run spread keeps a run from passing, the verdict says what would help.

The committed 7B rig's chain on 2x H200 (a fresh cloud machine every night) moved c64 throughput 2.3-2.5 % from
night to night against a 3 % tolerance. Night 5 (twentieth session) was inconclusive against four runs and
waited for a person. "Save more baseline runs" is the right advice only up to a point: past it, the spread of
the runs' means itself decides how often an unchanged run passes (benchmarks/acceptance_cloud.py).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from pytest_p2p.stats import Outcome, RunStats, decide_change
from pytest_p2p.stats.baseline import HONEST_PASS, _spread_dominates
from pytest_p2p.verdict.compare import Sample
from pytest_p2p.verdict.store import Store

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
NIGHT_5_DB = RESULTS / "history-h200-7b-window-at-16x5-64x8.5-night1-twentieth-2026-11-28.db"
NIGHT_5 = "20261128-202502_nvlink-pair-vllm-7b_gpu0-gpu1"


def _throughput(store: Store, run_id: str, arm: str, point: str) -> RunStats:
    row = next(m for m in store.metrics(run_id, arm, point) if m.metric == "output_throughput")
    got = Sample.of(row.values, row.mean, row.std, row.n).run_stats()
    assert got is not None
    return got


def test_night_5_at_c64_is_the_spread_of_four_fresh_machines_and_says_what_would_pass_it() -> None:
    """The kept store replayed: the c64 intervals night 5 printed (98 %: -12.5 .. +13.4 % and -13.0 .. +16.2 %),
    and a reason that prices the spread instead of asking only for more baseline runs."""
    with Store(str(NIGHT_5_DB), create=False) as store:
        base = [r.run_id for r in store.runs(name="accepted")]
        assert len(base) == 4 and NIGHT_5 not in base
        got = {arm: decide_change([_throughput(store, b, arm, "c64") for b in base],
                                  _throughput(store, NIGHT_5, arm, "c64"), tolerance=0.03, alpha=0.01)
               for arm in ("p2p_on", "p2p_off")}
    on, off = got["p2p_on"], got["p2p_off"]
    assert on.outcome is off.outcome is Outcome.INCONCLUSIVE
    assert (round(on.lower * 100, 1), round(on.upper * 100, 1)) == (-12.5, 13.4)
    assert (round(off.lower * 100, 1), round(off.upper * 100, 1)) == (-13.0, 16.2)
    assert "the runs' means spread 2.6 % from run to run" in on.reason, on.reason
    assert "pass on its own about 77 % of the time" in on.reason, on.reason
    assert "a tolerance of 3.7 % or more (baseline.tolerance) would pass 90 %" in on.reason, on.reason
    assert "pass on its own about 69 % of the time" in off.reason, off.reason


def test_a_spread_well_inside_the_tolerance_keeps_the_old_advice() -> None:
    assert "(save more baseline runs or reduce noise)" in _spread_dominates(0.005, -0.061)
    assert "(save more baseline runs or reduce noise)" in _spread_dominates(0.0, -0.061)
    assert "would pass 90 %" in _spread_dominates(0.03, -0.061)


def test_the_share_it_names_is_what_a_long_baseline_lets_pass() -> None:
    """Unchanged runs against 60 baseline runs of the same spread: the share that passes is the one the reason
    names (its K -> infinity limit; at K = 60 the t quantile and 1 + 1/K cost a point or two)."""
    rng = random.Random(7)
    tau, cv, n, k = 0.025, 0.025, 16, 60

    def run() -> RunStats:
        level = rng.gauss(0.0, tau)
        return RunStats.of([math.exp(level + rng.gauss(0.0, cv)) for _ in range(n)])

    passed, named = 0, []
    trials = 500
    for _ in range(trials):
        d = decide_change([run() for _ in range(k)], run(), tolerance=0.03, alpha=0.01)
        passed += d.outcome is Outcome.PASS
        if d.outcome is Outcome.INCONCLUSIVE and "pass on its own about " in d.reason:
            named.append(int(d.reason.split("pass on its own about ")[1].split(" %")[0]))
    assert named, "no inconclusive run named a share"
    expected = sorted(named)[len(named) // 2]
    assert expected / 100 < HONEST_PASS
    assert abs(100 * passed / trials - expected) <= 5, (passed, expected)
