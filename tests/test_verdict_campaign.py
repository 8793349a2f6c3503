"""A campaign judged as a whole: primaries only, Holm over the family, the uplift's history, the screen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import baseline_runs, write_run

from pytest_p2p.verdict.campaign_judge import compare_campaign, screen_run
from pytest_p2p.verdict.compare import INCONCLUSIVE, NO_BASELINE, NOT_COMPARABLE, REGRESSION, UNCHANGED
from pytest_p2p.verdict.config import BaselineConfig
from pytest_p2p.verdict.store import Store

POINTS = ("c1", "c8")


def _scale_arm(run_dir: Path, arm: str, metric: str, factor: float) -> None:
    for agg in (run_dir / "scenarios").glob(f"{arm}-*/aggregate.json"):
        data = json.loads(agg.read_text())
        m = data["metrics"][metric]
        m["values"] = [v * factor for v in m["values"]]
        m["mean"] *= factor
        m["std"] *= factor
        agg.write_text(json.dumps(data))


@pytest.fixture
def store(tmp_path: Path):
    st = Store(tmp_path / "h.db")
    for d in baseline_runs(tmp_path / "base", count=8, points=POINTS, cv=0.01):
        st.accept(st.save_run_dir(d), "accepted")
    yield st
    st.close()


def _cur(tmp_path: Path, **kw: object) -> Path:
    return write_run(tmp_path / "cur", "now", started_at="2026-06-25T10:00:00Z", seed=999, points=POINTS,
                     cv=0.01, **kw)  # type: ignore[arg-type]


def test_unchanged_campaign_passes_everywhere(store: Store, tmp_path: Path) -> None:
    camp = compare_campaign(store, _cur(tmp_path), BaselineConfig())
    assert camp.verdict == UNCHANGED, [sc.lines() for sc in camp.scenarios.values()]
    assert set(camp.scenarios) == {(a, p) for a in ("p2p_on", "p2p_off") for p in POINTS}
    # 4 scenario primaries + 2 uplift histories under one Holm family
    assert camp.family == 6
    assert all(sc.primaries == ("output_throughput",) for sc in camp.scenarios.values())
    assert camp.uplift_verdict("c8")[0] == UNCHANGED


def test_p2p_only_loss_is_an_uplift_regression(store: Store, tmp_path: Path) -> None:
    cur = _cur(tmp_path)
    _scale_arm(cur, "p2p_on", "output_throughput", 0.90)
    camp = compare_campaign(store, cur, BaselineConfig())
    verdict, text = camp.uplift_verdict("c8")
    assert verdict == REGRESSION and "uplift(output_throughput)" in text
    assert camp.scenarios[("p2p_off", "c8")].verdict == UNCHANGED


def test_both_arms_slower_moves_levels_not_the_uplift(store: Store, tmp_path: Path) -> None:
    camp = compare_campaign(store, _cur(tmp_path, scale={"output_throughput": 0.85}), BaselineConfig())
    assert camp.uplift_verdict("c1")[0] == UNCHANGED
    assert camp.scenarios[("p2p_on", "c1")].verdict == REGRESSION


def test_non_primary_metrics_never_fail(store: Store, tmp_path: Path) -> None:
    camp = compare_campaign(store, _cur(tmp_path, scale={"mean_ttft_ms": 1.5}), BaselineConfig())
    sc = camp.scenarios[("p2p_on", "c8")]
    assert sc.verdict == UNCHANGED and not sc.regressions
    assert "mean_ttft_ms" in sc.worse_info and sc.metrics["mean_ttft_ms"].adjusted_p is not None
    assert any("[info" in line for line in sc.lines())


def test_rig_primary_override(store: Store, tmp_path: Path) -> None:
    cfg = BaselineConfig(primary=("output_throughput", "mean_ttft_ms"))
    camp = compare_campaign(store, _cur(tmp_path, scale={"mean_ttft_ms": 1.5}), cfg)
    assert set(camp.scenarios[("p2p_on", "c8")].regressions) == {"mean_ttft_ms"}


def test_short_baseline_is_inconclusive(tmp_path: Path) -> None:
    st = Store(tmp_path / "h.db")
    for d in baseline_runs(tmp_path / "base", count=2, points=POINTS, cv=0.01):
        st.accept(st.save_run_dir(d), "accepted")
    camp = compare_campaign(st, _cur(tmp_path, scale={"output_throughput": 0.95}), BaselineConfig())
    sc = camp.scenarios[("p2p_on", "c8")]
    assert sc.verdict == INCONCLUSIVE and "baseline too short: 2 run(s)" in sc.message
    st.close()


def test_no_baseline(tmp_path: Path) -> None:
    st = Store(tmp_path / "h.db")
    camp = compare_campaign(st, _cur(tmp_path), BaselineConfig())
    assert camp.scenarios[("p2p_on", "c1")].verdict == NO_BASELINE
    assert camp.uplift_verdict("c1")[0] == NO_BASELINE
    st.close()


def test_a_pair_of_other_gpu_models_in_the_same_slots_is_not_judged_against_the_baseline(
        store: Store, tmp_path: Path) -> None:
    """A cloud runner hands out H100s one night and H200s the next at the same virtual bus ids (2026-11-27):
    the pair ident names the slots only, and the H200s' throughput is no evidence about the H100s' links."""
    cur = _cur(tmp_path, gpu_names=("NVIDIA H200", "NVIDIA H200"), scale={"output_throughput": 1.6})
    camp = compare_campaign(store, cur, BaselineConfig())
    sc = camp.scenarios[("p2p_on", "c8")]
    assert sc.verdict == NOT_COMPARABLE and not sc.baseline_runs
    assert "gpu models ['NVIDIA GeForce RTX 5060 Ti', 'NVIDIA GeForce RTX 5060 Ti'] -> " \
           "['NVIDIA H200', 'NVIDIA H200']" in sc.message
    assert camp.uplift_verdict("c8")[0] == NO_BASELINE


def test_once_a_run_on_the_new_gpus_is_accepted_they_are_judged_against_their_own(
        store: Store, tmp_path: Path) -> None:
    h200 = ("NVIDIA H200", "NVIDIA H200")
    first = write_run(tmp_path / "h200", "h200-1", started_at="2026-06-24T10:00:00Z", seed=7, points=POINTS,
                      cv=0.01, gpu_names=h200)
    store.accept(store.save_run_dir(first), "accepted")  # what a person does, once
    camp = compare_campaign(store, _cur(tmp_path, gpu_names=h200), BaselineConfig())
    sc = camp.scenarios[("p2p_on", "c8")]
    assert sc.baseline_runs == ["h200-1"] and sc.verdict != NOT_COMPARABLE
    assert len(sc.excluded) == 8 and all("gpu models" in why for why in sc.excluded)


def test_newer_runs_on_other_gpus_neither_crowd_the_baseline_out_nor_explain_its_regression(
        store: Store, tmp_path: Path) -> None:
    """The newest accepted runs are H200 nights in the same slots: the 5060 Tis' regression is judged against the
    5060 Ti runs behind them (the baseline's depth counts comparable runs), and explained against the newest of
    those (a downtrained link), not against an H200 night's fingerprint (where the GPUs would be the change)."""
    for i in range(3):
        d = write_run(tmp_path / "h200", f"h200-{i}", started_at=f"2026-06-2{i}T10:00:00Z", seed=50 + i,
                      points=POINTS, cv=0.01, gpu_names=("NVIDIA H200", "NVIDIA H200"))
        store.accept(store.save_run_dir(d), "accepted")
    cur = _cur(tmp_path, gen=(4, 3), scale={"output_throughput": 0.85})
    camp = compare_campaign(store, cur, BaselineConfig(depth=4))
    sc = camp.scenarios[("p2p_on", "c8")]
    assert len(sc.baseline_runs) == 4 and not any(r.startswith("h200") for r in sc.baseline_runs)
    assert sc.verdict == REGRESSION
    assert "Gen4 x4 -> Gen3 x4 since baseline 2026-06-17" in sc.message, sc.message
    assert "GPU replaced" not in sc.message, sc.message


def test_a_night_of_other_requests_is_not_comparable_and_says_which_entry_changed(tmp_path: Path) -> None:
    shape = {"input_len": 128, "output_len": 128, "endpoint": "completions", "request_rate": "inf",
             "burstiness": 1.0, "extra_body": {}}
    with Store(tmp_path / "h.db") as st:
        for d in baseline_runs(tmp_path / "base", count=3, points=POINTS, cv=0.01, load=shape):
            st.accept(st.save_run_dir(d), "accepted")
        camp = compare_campaign(st, _cur(tmp_path, load={**shape, "input_len": 1024}), BaselineConfig())
    sc = camp.scenarios[("p2p_on", "c8")]
    assert sc.verdict == NOT_COMPARABLE
    assert sc.message.endswith("load input_len 128 -> 1024"), sc.message  # the entry, not the whole shape


def test_a_gpu_replaced_by_one_of_the_same_model_is_still_judged(store: Store, tmp_path: Path) -> None:
    cur = _cur(tmp_path, uuids=("GPU-bbbbbbbb-0000-0000-0000-000000000009", "GPU-aaaaaaaa-0000-0000-0000-000000000002"),
               scale={"output_throughput": 0.85})
    camp = compare_campaign(store, cur, BaselineConfig())
    sc = camp.scenarios[("p2p_on", "c8")]
    assert len(sc.baseline_runs) == 8 and sc.verdict == REGRESSION


def test_screen_flags_throttled_and_outlying_reps(tmp_path: Path) -> None:
    clean = write_run(tmp_path, "clean", cv=0.01, reps=4)
    assert screen_run(clean) == []
    hot = write_run(tmp_path, "hot", cv=0.01, throttled={"p2p_on-c8": [2]})
    assert screen_run(hot) == ["p2p_on-c8: throttled reps [2]"]
    odd = write_run(tmp_path, "odd", cv=0.01, reps=4)
    agg = odd / "scenarios" / "p2p_off-c8" / "aggregate.json"
    data = json.loads(agg.read_text())
    data["metrics"]["output_throughput"]["values"][1] *= 0.7
    agg.write_text(json.dumps(data))
    problems = screen_run(odd)
    assert len(problems) == 1 and "p2p_off-c8: output_throughput rep(s) [2] outlying" in problems[0]


def test_ten_baseline_runs_moderate_the_spread_over_the_campaign(tmp_path: Path) -> None:
    """From 10 baseline runs (and 4 reps) the 8 primary scenarios lend each other their run-to-run spread,
    and so do the 4 uplift histories; with 8 runs (the other tests) nothing is moderated."""
    points = ("c1", "c2", "c4", "c8")
    st = Store(tmp_path / "h.db")
    for d in baseline_runs(tmp_path / "base", count=10, points=points, cv=0.01, reps=4):
        st.accept(st.save_run_dir(d), "accepted")
    cur = write_run(tmp_path / "cur", "now", started_at="2026-06-25T10:00:00Z", seed=999, points=points, cv=0.01,
                    reps=4)
    camp = compare_campaign(st, cur, BaselineConfig())
    st.close()
    assert camp.family == 12
    prims = [j for sc in camp.scenarios.values() for j in sc.metrics.values() if j.primary]
    assert len(prims) == 8 and all("spread moderated over 8 tests" in j.reason for j in prims), prims[0].reason
    ups = [j for u in camp.uplifts.values() for j in u.values()]
    assert len(ups) == 4 and all("spread moderated over 4 tests" in j.reason for j in ups), ups[0].reason
    others = [j for sc in camp.scenarios.values() for j in sc.metrics.values() if not j.primary and j.decision]
    assert others and not any("moderated" in j.reason for j in others)


def test_fewer_than_ten_baseline_runs_are_not_moderated(store: Store, tmp_path: Path) -> None:
    camp = compare_campaign(store, _cur(tmp_path), BaselineConfig())
    assert not any("moderated" in j.reason for sc in camp.scenarios.values() for j in sc.metrics.values())
