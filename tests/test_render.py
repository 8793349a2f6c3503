"""render_report: summary files from rep files, interrupted campaigns, corrupt files, plots."""

from __future__ import annotations

import csv
import importlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_p2p.errors import ResultsError
from pytest_p2p.report.render import render_report
from pytest_p2p.results.write import RunDir

ON = [100.0, 104.0, 98.0]
OFF = [90.0, 92.0, 89.0]


def _rep(value: float, *, throttled: bool = False) -> dict[str, Any]:
    return {"output_throughput": value, "total_token_throughput": 2 * value, "mean_ttft_ms": 50.0,
            "mean_tpot_ms": 10.0, "p99_tpot_ms": 12.0, "mean_itl_ms": 11.0, "completed": 8, "failed": 0,
            "energy": {"tokens_per_joule": value / 200, "joules_per_token": 200 / value, "avg_watts": 200.0,
                       "method": "nvml energy counter"},
            "flags": {"throttled": throttled, "downtrained": False}}


def _campaign(tmp_path: Path, *, reps_done: int = 3, simulated: bool = False, status: str = "complete") -> RunDir:
    rd = RunDir.create(tmp_path, "demo-h200", "gpu0-gpu1", "model", run_id="run")
    rd.write_run_meta({
        "arms": {"p2p_on": {"expect_transport": "P2P/CUMEM"}, "p2p_off": {"expect_transport": "SHM"}},
        "points": ["c1", "c4"], "reps": 3, "schedule": "interleaved", "simulated": simulated, "status": status,
        "pair": {"key": "gpu0-gpu1", "gpus": [{"index": 0, "bus_id": "0000:18:00.0", "uuid": "GPU-a",
                                               "name": "NVIDIA H200"}]},
    })
    # AB-AB-AB: rep k of each arm, each point, in schedule order; stop after reps_done
    for k in range(1, reps_done + 1):
        for point in ("c1", "c4"):
            rd.write_rep("p2p_on", point, k, _rep(ON[k - 1]))
            rd.write_rep("p2p_off", point, k, _rep(OFF[k - 1]))
    for arm, t in (("p2p_on", "P2P/CUMEM"), ("p2p_off", "SHM")):
        for point in ("c1", "c4"):
            rd.write_proof(arm, point, {"transport": t})
    return rd


def test_complete_campaign_summary(tmp_path: Path) -> None:
    rd = _campaign(tmp_path)
    r = render_report(rd.path, plots=False)
    s = json.loads(r.summary_json.read_text())
    assert s["status"] == "complete" and s["missing"] == [] and s["kind"] == "model"
    assert [(x["arm"], x["point"]) for x in s["scenarios"]] == [
        ("p2p_on", "c1"), ("p2p_on", "c4"), ("p2p_off", "c1"), ("p2p_off", "c4")]
    m = s["scenarios"][0]["metrics"]["output_throughput"]
    assert m["values"] == ON and m["n"] == 3 and m["mean"] == pytest.approx(302 / 3)
    assert s["scenarios"][0]["energy"]["avg_watts"]["mean"] == 200.0
    assert s["scenarios"][0]["energy"]["method"] == "nvml energy counter"
    up = s["uplift"][0]
    ratios = [a / b for a, b in zip(ON, OFF, strict=True)]
    geo = (ratios[0] * ratios[1] * ratios[2]) ** (1 / 3) - 1
    assert (up["point"], up["faster_arm"], up["slower_arm"], up["n"]) == ("c1", "p2p_on", "p2p_off", 3)
    assert up["estimate"] == pytest.approx(geo) and up["threshold"] == 0.05
    # judged at the campaign's 1 % split over its 2 points: +3.2 .. +20.3 % straddles 5 % (at 98 % it cleared it)
    assert up["level"] == 0.99 and up["outcome"] == "inconclusive" and up["passed"] is None
    assert s["transport"] == {"p2p_on": {"expected": "P2P/CUMEM", "observed": ["P2P/CUMEM"]},
                              "p2p_off": {"expected": "SHM", "observed": ["SHM"]}}
    assert r.plots == [] and r.summary_md.is_file()
    md = r.summary_md.read_text()
    assert "| Concurrency | Arm | Output tok/s |" in md
    assert "nothing: every expected rep is on disk" in md
    assert "SIMULATED" not in md


def test_interrupted_at_rep_3_keeps_reps_1_2_and_says_what_is_missing(tmp_path: Path) -> None:
    rd = _campaign(tmp_path, reps_done=2, status="interrupted")
    # the campaign died while writing rep 3 of p2p_on-c1: only an atomic temp file can be left
    (rd.path / "scenarios" / "p2p_on-c1" / ".run_3.json.abc.tmp").write_text('{"output_thr')
    r = render_report(rd.path, plots=False)
    s = r.summary
    assert s["status"] == "interrupted"
    assert s["missing"] == [f"{a}-{p}: run 3 of 3 missing" for a in ("p2p_on", "p2p_off") for p in ("c1", "c4")]
    sc = s["scenarios"][0]
    assert sc["reps"] == [1, 2] and sc["metrics"]["output_throughput"]["values"] == ON[:2]
    assert s["uplift"][0]["n"] == 2
    md = r.summary_md.read_text()
    assert "[interrupted]" in md.splitlines()[0]
    assert "- p2p_off-c4: run 3 of 3 missing" in md
    rows = list(csv.DictReader(io.StringIO(r.summary_csv.read_text())))
    assert rows[0]["n_reps"] == "2" and rows[0]["output_tok_s"] == "102.0"


def test_scenario_never_started_and_meta_missing_are_listed(tmp_path: Path) -> None:
    rd = _campaign(tmp_path)
    rd.write_run_meta({"points": ["c1", "c4", "c8"], "missing": ["p2p_off-c8: server failed to start (see log)"]})
    s = render_report(rd.path, plots=False).summary
    assert "p2p_on-c8: no rep completed (expected 3)" in s["missing"]
    assert "p2p_off-c8: server failed to start (see log)" in s["missing"]
    assert [u["point"] for u in s["uplift"]] == ["c1", "c4"]


def test_corrupt_rep_file_is_named(tmp_path: Path) -> None:
    rd = _campaign(tmp_path)
    bad = rd.path / "scenarios" / "p2p_off-c4" / "run_2.json"
    bad.write_text("{not json")
    with pytest.raises(ResultsError, match=r"p2p_off-c4/run_2\.json: corrupt JSON"):
        render_report(rd.path, plots=False)
    assert not (rd.path / "summary.json").exists()  # nothing half-rendered


def test_aggregate_only_scenario_is_used(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "model", run_id="agg")
    rd.write_run_meta({"arms": {"a": {}, "b": {}}, "points": ["c2"], "reps": 2, "status": "complete"})
    for arm, vals in (("a", [11.0, 13.0]), ("b", [10.0, 10.0])):
        rd.write_aggregate(arm, "c2", {"metrics": {"output_throughput": {"mean": sum(vals) / 2, "std": 1.0,
                                                                         "n": 2, "values": vals}}})
    s = render_report(rd.path, plots=False).summary
    assert [x["source"] for x in s["scenarios"]] == ["aggregate.json", "aggregate.json"]
    assert s["missing"] == []
    assert s["uplift"][0]["estimate"] == pytest.approx((1.1 * 1.3) ** 0.5 - 1)
    assert s["uplift"][0]["faster_arm"] == "a"  # the campaign's first arm is A


def test_throttled_rep_excluded_but_flagged(tmp_path: Path) -> None:
    rd = _campaign(tmp_path)
    rd.write_rep("p2p_on", "c1", 2, _rep(50.0, throttled=True))
    s = render_report(rd.path, plots=False).summary
    sc = s["scenarios"][0]
    assert sc["excluded_reps"] == [2] and sc["flags"]["throttled_reps"] == [2]
    assert sc["metrics"]["output_throughput"]["values"] == [ON[0], ON[2]]
    assert s["uplift"][0]["n"] == 2
    rd.write_run_meta({"campaign": {"exclude_throttled": False}})
    s = render_report(rd.path, plots=False).summary
    assert s["scenarios"][0]["metrics"]["output_throughput"]["values"] == [ON[0], 50.0, ON[2]]
    assert "p2p_on-c1: throttled in run 2" in (rd.path / "summary.md").read_text()


def _telemetry(rd: RunDir, arm: str, point: str) -> None:
    cols = ["wall_epoch", "index", "pcie.link.gen.current", "pcie.link.width.current", "temperature.gpu",
            "utilization.gpu", "utilization.memory", "memory.used", "power.draw", "clocks.current.sm",
            "clocks.current.memory", "throttle_reasons", "energy_mj", "simulated"]
    lines = [",".join(cols)]
    for i in range(10):
        for g in (0, 1):
            lines.append(f"{1000 + i * 0.5},{g},5,16,{40 + i},{90 + g},30,1000,{300 + i},1980,2619,0x0,{i},True")
    lines.append("1010,0,5,16,[N/A],,30,1000,[N/A],1980,2619,0x0,0,True")  # NVML gaps are skipped
    rd.telemetry_path(arm, point, 1).write_text("\n".join(lines) + "\n")


def test_plots_are_written_and_labelled_simulated(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rd = _campaign(tmp_path, simulated=True)
    _telemetry(rd, "p2p_on", "c4")
    r = render_report(rd.path)
    names = sorted(p.name for p in r.plots)
    assert names == ["latency_tpot_itl.png", "latency_ttft.png", "pcie_link.png", "telemetry_p2p_on.png",
                     "throughput.png", "tokens_per_joule.png", "uplift.png"]
    for p in r.plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    assert r.notes == ["latency_ttft.png: p99 TTFT is not recorded in this layout (mean TTFT only)",
                       "no telemetry timeline for arm p2p_off: no telemetry CSV on disk",
                       "p2p_matrix.png skipped: no P2P copy probe result (p2pcopy.json) and no "
                       "p2pBandwidthLatencyTest output"]
    md = r.summary_md.read_text()
    assert md.startswith("# SIMULATED — ") and "![uplift](plots/uplift.png)" in md
    assert "**SIMULATED**" in md


def test_simulated_label_is_drawn_into_every_plot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    plots = importlib.import_module("pytest_p2p.report.plots")  # the renderer's (see test_report_seed._spy_figures)

    seen: list[str] = []
    real_save = plots._save

    def spy(fig: Any, path: Path) -> Path:
        texts = [t.get_text() for t in fig.texts]
        seen.append(path.name)
        assert any(t.startswith("SIMULATED — ") for t in texts), texts  # the title
        assert "SIMULATED" in texts  # the corner stamp
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    rd = _campaign(tmp_path, simulated=True)
    _telemetry(rd, "p2p_off", "c1")
    render_report(rd.path)
    assert len(seen) == 7


def test_probe_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rd = RunDir.create(tmp_path, "r", "gpu0-gpu1", "probe", run_id="p")
    rd.write_run_meta({"arms": {"p2p": {}, "shm": {}}, "points": ["s8KiB", "s1MiB"], "reps": 2})
    for arm, t in (("p2p", 10.0), ("shm", 25.0)):
        for point in ("s8KiB", "s1MiB"):
            for k in (1, 2):
                rd.write_rep(arm, point, k, {"time_us": t + k, "busbw_gbs": 100 / t, "algbw_gbs": 50 / t})
    r = render_report(rd.path)
    assert sorted(p.name for p in r.plots) == ["probe_time_busbw.png", "uplift.png"]
    assert "size_bytes" in r.summary_csv.read_text().splitlines()[0]
    assert r.summary_csv.read_text().splitlines()[1].startswith("p2p,8192,s8KiB,2,")


def test_without_matplotlib_the_summary_still_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rd = _campaign(tmp_path)
    r = render_report(rd.path)
    assert r.plots == [] and r.summary_md.is_file()
    assert r.notes == ["plots skipped: matplotlib is not importable (it is a dependency of pytest-p2p: reinstall it)"]
    assert "plots skipped: matplotlib is not importable" in r.summary_md.read_text()


def test_rerender_is_stable(tmp_path: Path) -> None:
    rd = _campaign(tmp_path)
    first = render_report(rd.path, plots=False).summary_json.read_text()
    assert render_report(rd.path, plots=False).summary_json.read_text() == first


def test_campaign_uplift_meta_is_honoured(tmp_path: Path) -> None:
    """run.json as campaign/runner.py writes it: uplift arms, rule, exclusion; its own missing list."""
    rd = _campaign(tmp_path, reps_done=2, status="interrupted")
    rd.write_rep("p2p_off", "c4", 2, {**_rep(OFF[1]), "flags": {"throttled": False, "downtrained": True}})
    rd.write_run_meta({
        "uplift": {"metric": "output_throughput", "direction": "higher", "exclude_throttled": True,
                   "rule": {"default": 0.05, "per_point": {"c4": 0.5}, "rule": "point"},
                   "faster_arm": "p2p_off", "slower_arm": "p2p_on"},
        "missing": ["p2p_off-c1 rep 3", "p2p_off-c4 rep 3", "p2p_on-c1 rep 3", "p2p_on-c4 rep 3",
                    "env: snapshot not recorded"],
    })
    s = render_report(rd.path, plots=False).summary
    assert {(u["faster_arm"], u["slower_arm"]) for u in s["uplift"]} == {("p2p_off", "p2p_on")}
    c4 = next(u for u in s["uplift"] if u["point"] == "c4")
    # downtrained rep 2 dropped: one pair left, which cannot decide (inconclusive, never a pass)
    assert c4["threshold"] == 0.5 and c4["passed"] is None and c4["outcome"] == "inconclusive" and c4["n"] == 1
    off_c4 = next(x for x in s["scenarios"] if (x["arm"], x["point"]) == ("p2p_off", "c4"))
    assert off_c4["excluded_reps"] == [2] and off_c4["flags"]["downtrained_reps"] == [2]
    assert s["missing"] == [f"{a}-{p}: run 3 of 3 missing" for a in ("p2p_on", "p2p_off") for p in ("c1", "c4")] + [
        "env: snapshot not recorded"]
    assert "p2p_off-c4: run 2 excluded from means and uplift" in (rd.path / "summary.md").read_text()


def test_no_second_arm_no_uplift(tmp_path: Path) -> None:
    rd = _campaign(tmp_path)
    rd.write_run_meta({"uplift": {"faster_arm": "p2p_on", "slower_arm": None}})
    assert render_report(rd.path, plots=False).summary["uplift"] == []


def test_zero_throughput_rep_gives_no_uplift_not_a_crash(tmp_path: Path) -> None:
    rd = _campaign(tmp_path)
    rd.write_rep("p2p_off", "c4", 1, {**_rep(1.0), "output_throughput": 0.0, "failed": 8, "completed": 0})
    s = render_report(rd.path, plots=False).summary
    c4 = next(u for u in s["uplift"] if u["point"] == "c4")
    assert c4["estimate"] is None and c4["passed"] is None and "positive values" in c4["message"]
    assert "c4 n/a" in (rd.path / "summary.md").read_text()


def test_uplift_direction_fallback_is_the_campaigns() -> None:
    """A run.json without a recorded direction gets the campaign's rule for the metric (watts: lower)."""
    from pytest_p2p.campaign.config import metric_direction
    from pytest_p2p.report.render import _uplift_settings

    for metric in ("avg_watts", "mean_ttft_ms", "busbw_gbs", "joules_per_token", "tokens_per_joule"):
        _, higher, _, _ = _uplift_settings({"campaign": {"uplift_metric": metric}}, "model")
        assert higher == (metric_direction(metric) != "lower"), metric
