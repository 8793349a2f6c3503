"""Probe trials and the bounds the probe checks judge on, without a GPU.

The real NVLink failure this guards against (issue 24): one cold batch of p2p_on
(18.5 us at 8 KiB) against a warm p2p_off (15.7 us) failed the uplift check while the
pair's true uplift was +30 % (11.8 vs 15.3 us over repeated runs).
"""

from __future__ import annotations

import itertools
import json
import math
import random
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_p2p.probes.allreduce import AllReduceResult, Row, run_allreduce
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.probes.config import ProbeConfig, Thresholds
from pytest_p2p.probes.judge import judge_busbw, judge_copy, judge_latency, judge_uplift, overall
from pytest_p2p.probes.p2pcopy import P2PCopyResult
from pytest_p2p.probes.trials import Trial, TrialRecord, run_trials
from pytest_p2p.stats.decide import Outcome, decide_uplift_unpaired

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "logs"
DEMO = ROOT / "pytest_p2p" / "demo" / "probes" / "gpu0-gpu1"
KiB = 1024


def scripted(values: list[float], clean: list[bool] | None = None):
    it = iter(values)
    flags = iter(clean) if clean is not None else itertools.repeat(True)
    return lambda: Trial(next(it), next(flags))


def noisy(centre: float, n: int, cv: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [centre * math.exp(rng.gauss(0, cv)) for _ in range(n)]


# -- the warm-up and the cold trial ---------------------------------------------------------------
def test_a_cold_first_trial_is_set_aside_with_its_cause():
    rec = run_trials(scripted([18.5, 12.4, 11.8, 11.9, 11.7, 11.8, 11.8]), 3)
    assert rec.warmup == (18.5, 12.4, 11.8, 11.9) and rec.settled  # 12.4 vs 11.8 is 5 %: not yet settled
    assert rec.kept == (11.7, 11.8, 11.8)
    assert rec.set_aside[0].cause == "cold: first trial 18.5 us vs warm median 11.8 us"
    assert rec.set_aside[1].cause.startswith("warm-up: not yet settled")
    assert rec.set_aside[3].cause.startswith("warm-up: settle check")
    assert 18.5 not in rec.kept


def test_a_warm_first_trial_is_still_set_aside_but_not_called_cold():
    rec = run_trials(scripted([11.9, 11.8, 11.8, 11.9]), 2)
    assert rec.kept == (11.8, 11.9)
    assert rec.set_aside[0].cause.startswith("warm-up: first trial 11.9 us, within 3% of the warm median")


def test_a_measurement_that_never_settles_is_kept_and_marked():
    values = [10.0 * (1.1 ** i) for i in range(8)] + [20.0, 20.0]
    rec = run_trials(scripted(values), 2, max_warmup=8)
    assert not rec.settled and len(rec.warmup) == 8 and rec.kept == (20.0, 20.0)


def test_host_bound_trials_are_repeated_then_kept_and_counted():
    values = [10.0, 10.0, 30.0, 10.0, 31.0, 32.0, 10.0]
    clean = [True, True, False, True, False, False, True]
    rec = run_trials(scripted(values, clean), 3, max_retries=2)
    assert rec.kept == (10.0, 32.0, 10.0) and rec.host_bound_kept == 1
    bound = [a for a in rec.set_aside if a.cause.startswith("host-bound")]
    assert [a.value for a in bound] == [30.0, 31.0]


@settings(deadline=None, max_examples=60)
@given(st.lists(st.floats(1.0, 1000.0), min_size=12, max_size=12), st.integers(1, 4))
def test_every_trial_is_kept_or_set_aside_exactly_once(values, trials):
    rec = run_trials(scripted(values), trials, max_warmup=6)
    assert len(rec.kept) == trials
    assert list(rec.warmup) + list(rec.kept) == values[:len(rec.warmup) + trials]
    assert [a.value for a in rec.set_aside] == list(rec.warmup)


# -- the false failure of issue 24: one cold value flipped the point comparison ----------------------
def _row(nbytes: int, record: TrialRecord) -> Row:
    return Row.from_trials(nbytes, record, 2)


def _result(arm: str, rows: list[Row]) -> AllReduceResult:
    return AllReduceResult((0, 1), arm, rows, True, [], None)


def test_a_cold_first_measurement_no_longer_fails_the_uplift():
    on_values = [18.5, *noisy(11.8, 14, 0.015, 1)]  # cold first batch, then a true 11.8 us
    off_values = noisy(15.3, 15, 0.015, 2)
    # the old probe timed one batch per size: the cold one; its point comparison failed a true +30 %
    old = judge_uplift(_result("p2p_on", [Row.from_time(8 * KiB, on_values[0], 2)]),
                       _result("p2p_off", [Row.from_time(8 * KiB, off_values[0], 2)]), (8 * KiB,), 0.05, 0.01)
    assert old[0].outcome is Outcome.FAIL
    on = _result("p2p_on", [_row(8 * KiB, run_trials(scripted(on_values), 10))])
    off = _result("p2p_off", [_row(8 * KiB, run_trials(scripted(off_values), 10))])
    assert on.rows[0].set_aside[0].cause.startswith("cold: first trial 18.5 us vs warm median 11.")
    (j,) = judge_uplift(on, off, (8 * KiB,), 0.05, 0.01)
    assert j.outcome is Outcome.PASS, j.line
    assert j.line.startswith("8KiB: p2p_on 11.")
    assert "vs p2p_off 15." in j.line and "-> uplift +2" in j.line and "(98 % CI +2" in j.line
    assert j.line.endswith(", 10 trials) >= min 5 %")


def test_uplift_fails_only_when_the_upper_bound_is_below_the_margin():
    on = _result("p2p_on", [_row(8 * KiB, run_trials(scripted(noisy(15.0, 15, 0.01, 3)), 10))])
    off = _result("p2p_off", [_row(8 * KiB, run_trials(scripted(noisy(15.3, 15, 0.01, 4)), 10))])
    (j,) = judge_uplift(on, off, (8 * KiB,), 0.05, 0.01)
    assert j.outcome is Outcome.FAIL and "< min 5 %" in j.line


def test_uplift_on_the_margin_is_inconclusive_and_says_what_would_decide():
    on = _result("p2p_on", [_row(8 * KiB, TrialRecord((10.0, 10.6, 9.5), (10.0,)))])
    off = _result("p2p_off", [_row(8 * KiB, TrialRecord((10.3, 10.9, 11.4), (10.0,)))])
    (j,) = judge_uplift(on, off, (8 * KiB,), 0.05, 0.01)
    assert j.outcome is Outcome.INCONCLUSIVE and "straddles" in j.line and "3 trials" in j.line


def test_thresholds_are_judged_on_bounds_over_the_trials():
    big = 128 * 1024**2
    row = _row(big, TrialRecord(tuple(noisy(470.0, 10, 0.01, 5)), (480.0,)))  # ~286 GB/s
    res = _result("p2p_on", [row, _row(8 * KiB, TrialRecord(tuple(noisy(11.8, 10, 0.01, 6)), (18.0,)))])
    ok = judge_busbw(res, Thresholds({big: 280.0}), 0.01)
    assert ok[0].outcome is Outcome.PASS and ", 10 trials) >= min 280 GB/s" in ok[0].line
    assert judge_busbw(res, Thresholds({big: 300.0}), 0.01)[0].outcome is Outcome.FAIL
    near = judge_busbw(res, Thresholds({big: row.busbw_gbs}), 0.01)[0]
    assert near.outcome is Outcome.INCONCLUSIVE and "straddles" in near.line
    assert judge_latency(res, Thresholds({}, {8 * KiB: 12.5}), 0.01)[0].outcome is Outcome.PASS
    late = judge_latency(res, Thresholds({}, {8 * KiB: 11.0}), 0.01)[0]
    assert late.outcome is Outcome.FAIL and "> max 11 us" in late.line
    assert overall(ok + [late]) is Outcome.FAIL and overall([near, *ok]) is Outcome.INCONCLUSIVE


def test_copy_judged_on_paired_rounds_and_recordings_without_rounds_by_the_labelled_point_rule():
    data = json.loads((DEMO / "p2pcopy.json").read_text())
    old = judge_copy(P2PCopyResult.from_dict(data, "demo"), 0.01)
    assert old.outcome is Outcome.PASS and "point comparison of one recorded value" in old.line
    peer, staged = noisy(360.0, 10, 0.01, 7), noisy(52.0, 10, 0.02, 8)
    data["modes"]["peer"]["unidir_trials_gbs"] = {"0->1": peer, "1->0": [x * 1.01 for x in peer]}
    data["modes"]["host_staged"]["unidir_trials_gbs"] = {"0->1": staged, "1->0": staged}
    res = P2PCopyResult.from_dict(data, "demo")
    assert res.unidir_trials("peer") == peer
    j = judge_copy(res, 0.01)
    assert j.outcome is Outcome.PASS and "10 rounds) > 0 %" in j.line
    data["modes"]["host_staged"]["unidir_trials_gbs"] = {"0->1": staged, "1->0": staged[:3]}
    with pytest.raises(Exception, match="different trial counts"):
        P2PCopyResult.from_dict(data, "demo")


# -- the unpaired (Welch) decision ---------------------------------------------------------------
def test_welch_matches_a_hand_computation():
    on, off = [10.0, 11.0, 12.0], [14.0, 15.0, 17.0, 16.0]
    d = decide_uplift_unpaired(on, off, threshold=0.05, higher_is_better=False, alpha=0.01)
    la, lb = [math.log(x) for x in on], [math.log(x) for x in off]
    ma, mb = sum(la) / 3, sum(lb) / 4
    assert d.estimate == pytest.approx(math.exp(mb - ma) - 1)
    va = sum((x - ma) ** 2 for x in la) / 2 / 3
    vb = sum((x - mb) ** 2 for x in lb) / 3 / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    from pytest_p2p.stats.tdist import t_quantile

    half = t_quantile(0.99, df) * math.sqrt(va + vb)
    assert d.lower == pytest.approx(math.expm1(mb - ma - half)) and d.upper == pytest.approx(math.expm1(mb - ma + half))
    assert d.outcome is Outcome.PASS and d.n == 3


def test_welch_wrong_verdicts_stay_below_alpha_under_normal_trials():
    """A true uplift exactly at the margin fails at most ~alpha of the time, never passes more than that."""
    rng = random.Random(11)
    fails = passes = 0
    runs = 1000
    for _ in range(runs):
        on = [10.0 * math.exp(rng.gauss(0, 0.02)) for _ in range(10)]
        off = [10.5 * math.exp(rng.gauss(0, 0.04)) for _ in range(10)]
        d = decide_uplift_unpaired(on, off, threshold=0.05, higher_is_better=False, alpha=0.01)
        fails += d.outcome is Outcome.FAIL
        passes += d.outcome is Outcome.PASS
    assert fails <= 0.03 * runs and passes <= 0.03 * runs


# -- the launcher keeps the worker's trials, and the checks judge them -----------------------------
FAKE_TRIAL_WORKER = r'''
import json, os, sys
from pytest_p2p.probes.trials import Trial, run_trials
spec = json.load(open(sys.argv[1]))
rank = int(os.environ["RANK"])
if rank == 0 and os.environ.get("FAKE_LOG"):
    sys.stdout.write(open(os.environ["FAKE_LOG"]).read())
if rank == 0:
    base = float(os.environ["FAKE_US"])
    rows = []
    for k, b in enumerate(spec["sizes"]):
        seq = iter([base * 1.6] + [base * (1 + 0.01 * ((i * 7 + k) % 5 - 2)) for i in range(40)])
        rec = run_trials(lambda: Trial(next(seq)), spec["trials"])
        rows.append({"bytes": b, "time_us": rec.median, "trials_us": list(rec.kept), "warmup_us": list(rec.warmup),
                     "set_aside": [a.to_dict("time_us") for a in rec.set_aside], "settled": rec.settled})
    checks = [{"bytes": b, "graph": False, "wrong": 0, "first_wrong": None} for b in spec["check_sizes"]]
    json.dump({"rows": rows, "checks": checks, "world_size": 2, "graph": spec["graph"], "iters": spec["iters"],
               "warmup": spec["warmup"], "graph_launches": spec["graph_launches"], "trials": spec["trials"],
               "timing_method": "direct-events", "gate": "fake", "torch_version": "fake", "nccl_version": "2.28.9",
               "device_names": ["NVIDIA H200", "NVIDIA H200"]}, open(spec["out"], "w"))
'''


def _run_arm(tmp_path: Path, root: Path, arm: str, us: float) -> AllReduceResult:
    worker = tmp_path / "fake_trial_worker.py"
    worker.write_text(FAKE_TRIAL_WORKER)
    log = FIXTURES / f"h200x2_nccl-2.28.9_{arm}.log"
    cfg = ProbeConfig(sizes=(8 * KiB, 128 * KiB), decode_sizes=(8 * KiB, 128 * KiB), trials=6, timeout_s=60.0)
    out = root / "probes" / "gpu0-gpu1" / arm
    return run_allreduce((0, 1), PRESETS[arm], cfg, {"FAKE_LOG": str(log), "FAKE_US": str(us)}, out,
                         worker=[sys.executable, str(worker)])


def test_launcher_keeps_trials_and_causes_and_they_read_back(tmp_path):
    pytest.importorskip("pytest_p2p.probes.transport")
    res = _run_arm(tmp_path, tmp_path / "rec", "p2p_on", 11.8)
    row = res.row(8 * KiB)
    assert row is not None and len(row.trials_us) == 6 and row.settled
    assert row.set_aside[0].cause.startswith("cold: first trial 18.88 us vs warm median 11.")
    assert res.meta["trials"] == 6 and "gate kernel" in str(res.meta["timing"])
    written = json.loads((tmp_path / "rec" / "probes" / "gpu0-gpu1" / "p2p_on" / "allreduce.json").read_text())
    assert written["rows"][0]["set_aside"][0]["cause"].startswith("cold:")
    back = AllReduceResult.from_dict(written, None, "allreduce.json")
    assert back.rows == res.rows


SNAPSHOT = ROOT / "fixtures" / "snapshots" / "h200x2-nvlink.snapshot.json"


def _checks(pytester: pytest.Pytester, replay: Path, *args: str):
    rig = yaml.safe_load((ROOT / "fixtures" / "rigs" / "h200x2-nvlink.yaml").read_text())
    rig = {**rig, "arms": {"p2p_on": "p2p_on", "p2p_off": "p2p_off"},
           "probe": {"sizes": ["8KiB", "128KiB"], "decode_sizes": ["8KiB", "128KiB"]}}
    rig.pop("campaign", None)
    path = pytester.makefile(".yaml", rig=yaml.safe_dump(rig))
    return pytester.runpytest("-p", "pytest_p2p.plugin.probes", "--pyargs", "pytest_p2p.checks.test_probes",
                              "-p", "no:cacheprovider", "-p", "no:randomly", "-rs", "--p2p-rig", str(path),
                              "--p2p-snapshot", str(SNAPSHOT), "--p2p-probe-replay", str(replay), "-k", "uplift",
                              *args)


def test_uplift_check_passes_on_trials_and_prints_the_interval(pytester, tmp_path):
    pytest.importorskip("pytest_p2p.probes.transport")
    _run_arm(tmp_path, tmp_path / "rec", "p2p_on", 11.8)
    _run_arm(tmp_path, tmp_path / "rec", "p2p_off", 15.3)
    result = _checks(pytester, tmp_path / "rec")
    result.assert_outcomes(passed=1)


def test_an_undecided_uplift_skips_and_fails_under_strict(pytester, tmp_path):
    pytest.importorskip("pytest_p2p.probes.transport")
    _run_arm(tmp_path, tmp_path / "rec", "p2p_on", 11.8)
    _run_arm(tmp_path, tmp_path / "rec", "p2p_off", 11.8 * 1.05)  # exactly on the 5 % margin
    result = _checks(pytester, tmp_path / "rec")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*INCONCLUSIVE: uplift of p2p_on over p2p_off*", "*8KiB: p2p_on 11.* straddles*"])
    strict = _checks(pytester, tmp_path / "rec", "--p2p-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*INCONCLUSIVE (strict mode)*"])
