"""The summary's types (report/summary_types.py) and the narrowing at the report's disk boundaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_p2p.errors import ResultsError
from pytest_p2p.plugin.report import _load_summary, summary_lines
from pytest_p2p.report.render import _uplift_settings, render_report
from pytest_p2p.report.summary_types import Scenario, is_stat, is_summary, stat_at
from pytest_p2p.results.write import RunDir


def test_is_stat_accepts_what_summarize_gives_and_rejects_other_shapes() -> None:
    from pytest_p2p.stats.summary import summarize

    assert is_stat(summarize([1.0, 2.0, 4.0])) and is_stat(summarize([]))
    assert is_stat({"mean": 3, "n": None}) and is_stat({})
    for bad in ({"mean": "3"}, {"mean": True}, {"n": [1]}, {"values": 5}, {"ci95": "x"}, 3.0, "P2P", None, [1.0]):
        assert not is_stat(bad), bad


def test_stat_at_reads_metrics_and_energy_and_skips_the_rest() -> None:
    sc: Scenario = {"arm": "a", "point": "c1", "metrics": {"x": {"mean": 1.0}},
                    "energy": {"avg_watts": {"mean": 200.0}, "method": "nvml", "simulated": False}}
    assert stat_at(sc, "metrics", "x") == {"mean": 1.0}
    assert stat_at(sc, "energy", "avg_watts") == {"mean": 200.0}
    assert stat_at(sc, "energy", "method") is None and stat_at(sc, "energy", "simulated") is None
    assert stat_at(sc, "metrics", "absent") is None and stat_at({}, "energy", "avg_watts") is None


def test_is_summary_checks_the_containers_the_readers_iterate() -> None:
    assert is_summary({})  # every key is optional: the readers use .get
    assert is_summary({"scenarios": [{"arm": "a", "point": "c1"}], "uplift": [], "missing": ["x"], "pair": {}})
    assert not is_summary([])
    assert not is_summary({"scenarios": "a-c1"})
    assert not is_summary({"scenarios": [{"arm": "a"}]})  # no point: the table indexes it
    assert not is_summary({"uplift": [{"point": "c1", "faster_arm": "a", "slower_arm": 2}]})
    assert not is_summary({"pair": "gpu0-gpu1"})
    assert not is_summary({"missing": "rep 3"})


def _run(tmp_path: Path) -> RunDir:
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="run")
    rd.write_run_meta({"arms": {"a": {}, "b": {}}, "points": ["c1"], "reps": 2, "status": "complete"})
    for arm, vals in (("a", [11.0, 13.0]), ("b", [10.0, 10.0])):
        for k, v in enumerate(vals, 1):
            rd.write_rep(arm, "c1", k, {"output_throughput": v})
    return rd


def test_a_summary_json_of_a_wrong_shape_is_rendered_again(tmp_path: Path) -> None:
    rd = _run(tmp_path)
    (rd.path / "summary.json").write_text(json.dumps({"scenarios": "broken"}))
    summary = _load_summary(rd.path)  # not trusted: rebuilt from the rep files
    assert [(s["arm"], s["point"]) for s in summary["scenarios"]] == [("a", "c1"), ("b", "c1")]
    (rd.path / "summary.json").write_text(json.dumps({"scenarios": [{"arm": "a"}]}))  # no point
    lines = summary_lines(rd.path)  # the terminal table, not a traceback
    assert any("| a   |    12.0 ±1.4 |" in line for line in lines), lines
    (rd.path / "summary.json").write_text(json.dumps({"run_id": "kept", "scenarios": []}))
    assert _load_summary(rd.path) == {"run_id": "kept", "scenarios": []}  # a good one is used as it is


def test_aggregate_entries_of_a_wrong_shape_are_left_out(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="agg")
    rd.write_run_meta({"arms": {"a": {}, "b": {}}, "points": ["c2"], "reps": 2, "status": "complete"})
    good = {"mean": 12.0, "std": 1.0, "median": 12.0, "ci95": [3.0, 21.0], "n": 2, "values": [11.0, 13.0]}
    rd.write_aggregate("a", "c2", {
        "metrics": {"output_throughput": good, "bogus": "fast", "also": {"mean": "12"}},
        "energy": {"avg_watts": {"mean": 200.0, "n": 2, "values": [200.0, 200.0]}, "method": None,
                   "simulated": True, "junk": [1]},
        "flags": {"throttled_reps": [2], "downtrained_reps": [], "excluded_reps": [2], "note": "x"},
    })
    rd.write_aggregate("b", "c2", {"metrics": {"output_throughput": {"mean": 10.0, "n": 2, "values": [10.0, 10.0]}}})
    sc = render_report(rd.path, plots=False).summary["scenarios"][0]
    assert sc["metrics"] == {"output_throughput": good}  # the good entry verbatim, every key kept
    assert sc["energy"] == {"avg_watts": {"mean": 200.0, "n": 2, "values": [200.0, 200.0]}, "method": None,
                            "simulated": True}
    assert sc["flags"] == {"throttled_reps": [2], "downtrained_reps": [], "excluded_reps": [2]}
    other = render_report(rd.path, plots=False).summary["scenarios"][1]
    assert other["flags"] == {"throttled_reps": [], "downtrained_reps": []}  # none on disk: the default


@pytest.mark.parametrize(("default", "ok"), [(0.1, True), (1, True), ("0.1", True), (None, False), ([0.1], False),
                                             ("ten", False)])
def test_uplift_rule_default_reads_as_float_did(default: object, ok: bool) -> None:
    meta = {"uplift": {"rule": {"rule": "point", "default": default, "per_point": {"c1": "0.2"}}}}
    if ok:
        _metric, _higher, rule, _excl = _uplift_settings(meta, "model")
        assert rule.threshold("c2") == pytest.approx(float(str(default)))
        assert rule.threshold("c1") == pytest.approx(0.2)
    else:
        with pytest.raises(ResultsError, match="is not an UpliftRule dict"):
            _uplift_settings(meta, "model")


@pytest.mark.parametrize("per_point", [[0.1], "c1=0.1", 3])
def test_uplift_rule_per_point_of_a_wrong_shape_is_a_results_error(per_point: object) -> None:
    meta = {"uplift": {"rule": {"rule": "point", "per_point": per_point}}}
    with pytest.raises(ResultsError, match="is not an UpliftRule dict"):
        _uplift_settings(meta, "model")


@pytest.mark.parametrize("rule", ["nonsense", 3, ["point"]])
def test_an_unknown_rule_name_is_a_results_error(rule: object) -> None:
    with pytest.raises(ResultsError, match="expected one of"):
        _uplift_settings({"uplift": {"rule": {"rule": rule}}}, "model")


@pytest.mark.parametrize(("extra", "alpha", "plan"), [({}, 0.01, None), ({"alpha": 0.02, "plan": [4, 8]}, 0.02, (4, 8)),
                                                      ({"alpha": 0.7}, None, None), ({"alpha": "x"}, None, None),
                                                      ({"plan": [4]}, None, None), ({"plan": "4..8"}, None, None)])
def test_the_rule_s_alpha_and_plan_are_read_back(extra: dict[str, object], alpha: float | None,
                                                 plan: tuple[int, int] | None) -> None:
    """The report judges a run without decisions at the alpha and looks the campaign had (run.json uplift.rule)."""
    meta = {"uplift": {"rule": {"rule": "bounds", "default": 0.05, **extra}}}
    if alpha is None:
        with pytest.raises(ResultsError, match="is not an UpliftRule dict"):
            _uplift_settings(meta, "model")
        return
    _metric, _higher, rule, _excl = _uplift_settings(meta, "model")
    assert (rule.alpha, rule.plan) == (alpha, plan)
