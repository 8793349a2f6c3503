"""Issue 9 items 4 and 6, campaign side: a screened rep is re-run (not averaged in), an inconclusive uplift
gets more interleaved pairs up to max_reps (alpha spent per look), and a budget that ends first records the
pairs that would decide it. Also issue 11 item 5 for the campaign section: absurd numbers are ConfigErrors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from campaign_fakes import SlotBackend, run_campaign

from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.errors import ConfigError


class TableBackend(SlotBackend):
    """Throughput per (arm, rep, attempt) from a table; unknown entries fall back to ``default``."""

    def __init__(self, table: dict[tuple[str, int], list[float]], default: dict[str, float]) -> None:
        self.table = table
        self.default = default
        super().__init__()

    def measure(self, handle: tuple[str, int, int], point: str, rep: int) -> dict[str, Any]:
        arm, rep, attempt = handle
        seq = self.table.get((arm, rep))
        v = seq[min(attempt, len(seq)) - 1] if seq else self.default[arm]
        return {"output_throughput": v, "completed": 4, "failed": 0, "total_output_tokens": 40}


def _run(tmp_path: Path, backend: TableBackend, **cfg: Any) -> Any:
    return run_campaign(tmp_path, backend, "adaptive", **cfg)


def test_outlying_pair_is_screened_set_aside_and_re_run(tmp_path: Path) -> None:
    # p2p_on rep 2 collapses to 70 on its first attempt (an unflagged bad rep); its re-run is normal
    ons = {1: 110.0, 2: 111.0, 3: 110.5, 4: 110.2, 5: 110.8}
    table = {("p2p_on", k): [v] for k, v in ons.items()}
    table[("p2p_on", 2)] = [70.0, 111.0]
    backend = TableBackend(table, {"p2p_on": 110.0, "p2p_off": 100.0})
    res = _run(tmp_path, backend, reps=5)
    assert res.status == "complete" and res.errors == []
    screened = [a for a in res.set_aside if a.kind == "screened"]
    assert {(a.arm, a.rep) for a in screened} == {("p2p_on", 2), ("p2p_off", 2)}  # the whole pair again
    assert all("outlying pair" in a.cause for a in screened)
    assert backend.slots.count(("p2p_on", 2)) == 2 and backend.slots.count(("p2p_off", 2)) == 2
    thr = res.aggregate("p2p_on", "c1")["metrics"]["output_throughput"]
    assert 70.0 not in thr["values"] and thr["n"] == 5
    scen = res.run_dir / "scenarios" / "p2p_on-c1"
    raw = json.loads((scen / "run_2.try1.screened.json").read_text())
    assert raw["output_throughput"] == 70.0 and raw["cause"].startswith("screened: c1: outlying pair")
    assert json.loads((scen / "run_2.json").read_text())["output_throughput"] == 111.0
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert {f["kind"] for f in meta["rep_failures"]} == {"screened"}


def test_inconclusive_uplift_adds_pairs_until_decided(tmp_path: Path) -> None:
    # a true ~+10 % against a 5 % threshold, noisy: 2 pairs cannot decide it, more pairs can
    on = [110.0, 104.0, 116.0, 109.0, 111.0, 110.0, 110.5, 109.5, 110.2, 109.8, 110.1, 109.9]
    table = {("p2p_on", k + 1): [v] for k, v in enumerate(on)}
    backend = TableBackend(table, {"p2p_on": 110.0, "p2p_off": 100.0})
    res = _run(tmp_path, backend, reps=2, max_reps=12)
    d = res.decisions["c1"]
    assert d["outcome"] == "pass" and res.reps > 2 and d["n"] == res.reps and d["stopped"] is None
    assert backend.slots[-2:] in ([("p2p_on", res.reps), ("p2p_off", res.reps)],
                                  [("p2p_off", res.reps), ("p2p_on", res.reps)])
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["reps"] == res.reps and meta["decisions"]["c1"]["outcome"] == "pass"
    assert res.uplift["c1"]["n"] == res.reps
    assert res.uplift_verdict("c1").passed  # the verdict stage's rule, with the plan's per-look alpha, agrees


def test_budget_ending_first_records_the_pairs_needed(tmp_path: Path) -> None:
    # a true +5.5 % against 5 %: far more pairs than max_reps would be needed
    on = [106.5, 104.5, 106.0, 105.0]
    table = {("p2p_on", k + 1): [v] for k, v in enumerate(on)}
    res = _run(tmp_path, TableBackend(table, {"p2p_on": 105.5, "p2p_off": 100.0}), reps=3, max_reps=4)
    d = res.decisions["c1"]
    assert res.reps == 4 and d["outcome"] == "inconclusive" and d["stopped"] == "max_reps=4 reached"
    assert isinstance(d["pairs_needed"], int) and d["pairs_needed"] > 4
    agg = json.loads((res.run_dir / "scenarios" / "p2p_on-c1" / "aggregate.json").read_text())
    assert agg["uplift_decision"]["pairs_needed"] == d["pairs_needed"]
    assert not res.uplift_verdict("c1").passed


def test_time_budget_stops_adding_pairs(tmp_path: Path) -> None:
    on = [106.5, 104.5, 106.0]
    table = {("p2p_on", k + 1): [v] for k, v in enumerate(on)}
    res = _run(tmp_path, TableBackend(table, {"p2p_on": 105.5, "p2p_off": 100.0}), reps=3, max_reps=50,
               max_time_s=0.001)
    assert res.reps == 3 and res.decisions["c1"]["stopped"].startswith("time budget campaign.max_time_s")


@pytest.mark.parametrize(("key", "value", "says"), [
    ("reps", 100_000_000, "campaign.reps: expected an integer 1..1000"),
    ("reps", 1e8, "campaign.reps: expected an integer"),
    ("concurrency", [10**29], "campaign.concurrency[0]: expected an integer 1..4096"),
    ("concurrency", 1e29, "campaign.concurrency"),
    ("scenario_timeout_s", 1e308, "campaign.scenario_timeout_s: expected a number 0.001..604800"),
    ("scenario_timeout_s", float("inf"), "campaign.scenario_timeout_s"),
    ("request_timeout_s", float("nan"), "campaign.request_timeout_s"),
    ("max_reps", 2, "max_reps (2) is below reps (4)"),
    ("prompts_per_concurrency", 10**9, "campaign.prompts_per_concurrency"),
    ("sizes", ["1TiB"], "campaign.sizes"),
    ("rep_retries", 99, "campaign.rep_retries"),
])
def test_absurd_campaign_numbers_are_clear_config_errors(key: str, value: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=r"^bad-rig\.yaml: ") as info:
        parse_campaign({key: value}, "bad-rig.yaml")
    assert says in str(info.value) and len(str(info.value)) < 300


def test_p2p_reps_override_is_range_checked() -> None:
    cfg = parse_campaign(None, "rig.yaml")
    with pytest.raises(ConfigError, match=r"--p2p-reps: expected an integer 1\.\.1000"):
        cfg.with_overrides(reps=10**8)
    assert cfg.with_overrides(reps=7).reps == 7


class PointTableBackend(TableBackend):
    """p2p_on's throughput per (point, rep, attempt); p2p_off a flat 100."""

    def __init__(self, on: dict[str, dict[int, list[float]]]) -> None:
        self.on = on
        super().__init__({}, {"p2p_on": 100.0, "p2p_off": 100.0})

    def measure(self, handle: tuple[str, int, int], point: str, rep: int) -> dict[str, Any]:
        arm, rep, attempt = handle
        seq = self.on[point][rep] if arm == "p2p_on" else [100.0]
        v = seq[min(attempt, len(seq)) - 1]
        return {"output_throughput": v, "completed": 4, "failed": 0, "total_output_tokens": 40}


def test_a_slot_low_at_every_point_is_re_run_even_when_no_point_alone_flags_it(tmp_path: Path) -> None:
    """CV ~8 %: p2p_on rep 3 is ~20 % low at all four points (one bad server start); at any one point it is
    within the noise of the other reps, so only the slot screen, pooling the points, sees it."""
    noisy = {"c1": [100.0, 90.0, 80.0, 110.0], "c2": [108.0, 95.0, 82.0, 100.0],
             "c4": [92.0, 104.0, 78.0, 100.0], "c8": [105.0, 110.0, 81.0, 94.0]}
    on = {p: {k + 1: [v] for k, v in enumerate(vals)} for p, vals in noisy.items()}
    for p in on:
        on[p][3] = [on[p][3][0], 101.0]  # the re-run of the bad start is normal
    backend = PointTableBackend(on)
    res = _run(tmp_path, backend, reps=4, concurrency=[1, 2, 4, 8], schedule="abba")
    assert res.status == "complete" and res.errors == []
    screened = [a for a in res.set_aside if a.kind == "screened"]
    assert {(a.arm, a.rep) for a in screened} == {("p2p_on", 3), ("p2p_off", 3)}
    assert all("off at all 4 points together" in a.cause for a in screened), [a.cause for a in screened]
    assert "outlying pair" not in " ".join(a.cause for a in screened)  # the per-point screen alone missed it
    for p in noisy:
        assert 101.0 in res.aggregate("p2p_on", p)["metrics"]["output_throughput"]["values"]


def test_slot_screen_leaves_ordinary_noise_and_drift_alone(tmp_path: Path) -> None:
    # the same noise without a bad start, plus a steady 0.5 %/rep drift: nothing is re-run
    noisy = {"c1": [100.0, 90.0, 99.0, 110.0], "c2": [108.0, 95.0, 101.0, 100.0],
             "c4": [92.0, 104.0, 97.0, 100.0], "c8": [105.0, 110.0, 100.0, 94.0]}
    on = {p: {k + 1: [v * (1 - 0.005 * k)] for k, v in enumerate(vals)} for p, vals in noisy.items()}
    res = _run(tmp_path, PointTableBackend(on), reps=4, concurrency=[1, 2, 4, 8], schedule="abba")
    assert res.status == "complete" and [a for a in res.set_aside if a.kind == "screened"] == []
