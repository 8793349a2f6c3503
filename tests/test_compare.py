from __future__ import annotations

import random

import pytest
from synthetic_runs import baseline_runs, write_run

from pytest_p2p.errors import ConfigError
from pytest_p2p.stats.tdist import t_cdf, t_quantile
from pytest_p2p.verdict.campaign_judge import compare_scenario
from pytest_p2p.verdict.compare import (
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_BASELINE,
    NOT_COMPARABLE,
    REGRESSION,
    UNCHANGED,
    UNJUDGED,
    Sample,
    compare_links,
    direction,
    judge,
)
from pytest_p2p.verdict.config import BaselineConfig, Tolerance, parse_baseline
from pytest_p2p.verdict.fingerprint import build_fingerprint
from pytest_p2p.verdict.store import Store


def _runs(rng, mu, cv, n, k):
    return [Sample.of([mu * rng.lognormvariate(0, cv) for _ in range(n)]) for _ in range(k)]


@pytest.mark.parametrize(("p", "df", "expected"), [(0.975, 9, 2.262157), (0.995, 2, 9.924843),
                                                    (0.95, 1, 6.313752), (0.99, 30, 2.457262)])
def test_t_quantile_matches_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-5)
    assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


def test_directions():
    assert direction("output_throughput") == "higher"
    assert direction("p99_ttft_ms") == "lower"
    assert direction("busbw_gbs") == "higher" and direction("time_us") == "lower"
    assert direction("avg_watts") == "info" and direction("frobnication") is None
    assert direction("frobnication", {"frobnication": "lower"}) == "lower"


def test_verdicts_on_clear_cases():
    rng = random.Random(3)
    base = _runs(rng, 190.9, 0.02, 3, 10)
    assert judge(base, _runs(rng, 190.9, 0.02, 3, 1)[0], "higher", Tolerance()).verdict == UNCHANGED
    drop = judge(base, _runs(rng, 171.8, 0.02, 3, 1)[0], "higher", Tolerance())
    assert drop.verdict == REGRESSION and drop.change < -0.07 and drop.ci[1] < 0
    assert judge(base, _runs(rng, 215.0, 0.02, 3, 1)[0], "higher", Tolerance()).verdict == IMPROVEMENT
    # a latency rise is a regression, a latency fall an improvement
    lat = _runs(rng, 45.0, 0.02, 3, 10)
    assert judge(lat, _runs(rng, 52.0, 0.02, 3, 1)[0], "lower", Tolerance()).verdict == REGRESSION
    assert judge(lat, _runs(rng, 39.0, 0.02, 3, 1)[0], "lower", Tolerance()).verdict == IMPROVEMENT
    assert judge(lat, lat[0], None, Tolerance()).verdict == UNJUDGED


def test_small_significant_change_within_tolerance_is_not_a_regression():
    rng = random.Random(4)
    base = _runs(rng, 100.0, 0.005, 5, 10)
    j = judge(base, _runs(rng, 97.0, 0.005, 5, 1)[0], "higher", Tolerance(rel=0.05))
    assert j.ci[1] < 0 and j.verdict == UNCHANGED


def test_noisy_drop_is_inconclusive_with_reps_needed():
    base = [Sample.of([100 * f for f in (0.92, 1.0, 1.08)]) for _ in range(10)]
    j = judge(base, Sample.of([85.0, 97.0, 88.0]), "higher", Tolerance())
    assert j.verdict == INCONCLUSIVE
    assert j.needed_reps is not None and j.needed_reps > 3
    assert "reps would give 95 % power" in j.reason


def test_absolute_tolerance_widens_threshold():
    rng = random.Random(5)
    base = _runs(rng, 2.0, 0.01, 3, 10)
    cur = _runs(rng, 2.3, 0.01, 3, 1)[0]
    assert judge(base, cur, "lower", Tolerance(rel=0.05)).verdict == REGRESSION
    assert judge(base, cur, "lower", Tolerance(rel=0.05, abs=0.5)).verdict == UNCHANGED


def test_fixed_rule_and_min_reps():
    base = [Sample.of([100.0, 101.0, 99.0])]
    assert judge(base, Sample.of([90.0]), "higher", Tolerance(), BaselineConfig(rule="fixed")).verdict == REGRESSION
    j = judge(base, Sample.of([90.0]), "higher", Tolerance(), BaselineConfig(min_reps=3))
    assert j.verdict == INCONCLUSIVE and j.needed_reps == 3


def test_parse_baseline_section():
    cfg = parse_baseline({"name": "pre-driver-upgrade", "depth": 10, "tolerance": {
        "default": "4%", "mean_ttft_ms": {"rel": "10%", "abs": 2}}, "directions": {"x": "lower"}}, "rig.yaml",
        "baseline")
    assert cfg.tolerance("output_throughput") == Tolerance(0.04, 0.0)
    assert cfg.tolerance("mean_ttft_ms") == Tolerance(0.10, 2.0)
    assert parse_baseline(None, "rig.yaml", "baseline") == BaselineConfig()
    with pytest.raises(ConfigError, match=r"rig.yaml: baseline.rule: expected one of noise, fixed"):
        parse_baseline({"rule": "magic"}, "rig.yaml", "baseline")
    with pytest.raises(ConfigError, match="baseline name"):
        parse_baseline({"name": "tests/"}, "rig.yaml", "baseline")


@pytest.fixture
def store(tmp_path):
    st = Store(tmp_path / "h.db")
    for d in baseline_runs(tmp_path / "base"):
        st.accept(st.save_run_dir(d), "accepted")
    yield st
    st.close()


def test_scenario_unchanged_rerun_passes(store, tmp_path):
    cur = write_run(tmp_path / "cur", "now", started_at="2026-06-25T10:00:00Z", seed=999)
    r = compare_scenario(store, cur, "p2p_on", "c8", BaselineConfig())
    assert r.verdict == UNCHANGED, r.lines()
    assert len(r.baseline_runs) == 10
    assert r.metrics["avg_watts"].verdict == UNJUDGED


def test_scenario_slower_server_is_a_regression(store, tmp_path):
    cur = write_run(tmp_path / "cur", "now", started_at="2026-06-25T10:00:00Z", seed=999,
                    scale={"output_throughput": 0.9})
    r = compare_scenario(store, cur, "p2p_on", "c8", BaselineConfig())
    assert r.verdict == REGRESSION and set(r.regressions) == {"output_throughput"}
    assert "output_throughput c8 p2p_on" in r.message and "no fingerprint change" in r.message


def test_scenario_not_comparable_or_no_baseline(store, tmp_path):
    cur = write_run(tmp_path / "cur", "now", model="other/model", started_at="2026-06-25T10:00:00Z")
    r = compare_scenario(store, cur, "p2p_on", "c8", BaselineConfig())
    assert r.verdict == NOT_COMPARABLE and "model" in r.message
    r = compare_scenario(store, cur, "p2p_on", "c8", BaselineConfig(), name="pre-driver-upgrade")
    assert r.verdict == NO_BASELINE and "--p2p-save-baseline=pre-driver-upgrade" in r.message


def test_probe_metrics_are_judged(tmp_path):
    st = Store(tmp_path / "h.db")
    for d in baseline_runs(tmp_path / "base", count=5, kind="probe", points=("s8KiB", "s256MiB")):
        st.accept(st.save_run_dir(d), "accepted")
    cur = write_run(tmp_path / "cur", "now", kind="probe", points=("s8KiB", "s256MiB"), seed=5,
                    transport={"p2p_on": "SHM"}, scale={"busbw_gbs": 0.5, "time_us": 2.0})
    r = compare_scenario(st, cur, "p2p_on", "s256MiB", BaselineConfig())
    # only the primary fails (busbw at a bandwidth size); time is reported as information
    assert set(r.regressions) == {"busbw_gbs"} and set(r.worse_info) == {"time_us"}
    small = compare_scenario(st, cur, "p2p_on", "s8KiB", BaselineConfig())
    assert set(small.regressions) == {"time_us"}
    assert "arm p2p_on NCCL transport P2P/CUMEM -> SHM" in r.message
    st.close()


def test_link_facts_compared_like_metrics(tmp_path):
    a = build_fingerprint(write_run(tmp_path, "a"))
    b = build_fingerprint(write_run(tmp_path, "b", gen=(4, 3)))
    facts = {f: v for f, v, _ in compare_links(a, b)}
    assert facts["0000:0A:00.0.loaded_gen"] == REGRESSION
    assert facts["0000:09:00.0.loaded_gen"] == UNCHANGED


def test_one_baseline_run_is_too_short_unless_far_beyond_tolerance():
    # K=1: the run-to-run spread cannot be estimated: a 9 % drop is inconclusive, "baseline too short"
    j = judge([Sample.of([1400.0, 1500.0])], Sample.of([1300.0, 1330.0]), "higher", Tolerance())
    assert j.verdict == INCONCLUSIVE and "baseline too short: 1 run(s)" in j.reason
    # ... while a transport change (busbw 350 -> 20 GB/s) is a regression even against one run
    j = judge([Sample.of([351.0, 349.0, 352.0])], Sample.of([20.5, 20.1, 20.3]), "higher", Tolerance())
    assert j.verdict == REGRESSION
