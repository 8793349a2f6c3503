"""benchmarks/campaign_time.py: the share of a campaign's wall time under measured load, read back from its files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from test_campaign_resident import _runner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import campaign_time  # noqa: E402


def test_a_resident_campaign_is_accounted_from_its_rep_files_and_notes(tmp_path: Path) -> None:
    res = _runner(tmp_path).run()
    assert res.status == "complete", res.errors
    got = campaign_time.account(res.run_dir)
    kept = [json.loads(p.read_text())["meta"]["window_s"] for p in res.run_dir.glob("scenarios/*/run_*.json")
            if ".try" not in p.name]
    assert got["windows"] == len(kept) == 2 * 2 * 6  # two arms x two points x 6 window pairs
    assert abs(float(got["kept_s"]) - sum(kept)) < 1e-9
    assert isinstance(got["wall_s"], float) and float(got["wall_s"]) >= float(got["measured_s"]) > 0
    assert 0 < float(got["share_measured"]) <= 1
    starts = {k.split(".")[0] for k in got["starts_s"]}  # "start.attempt": a start the screen re-ran counts again
    assert starts == {"1", "2", "3"} and float(got["starts_total_s"]) > 0
    assert got["start_modes"] == ["parallel", "sequential"]  # start 1 learns the KV cache size, then parallel


def test_a_campaign_cut_short_is_accounted_up_to_its_last_window(tmp_path: Path) -> None:
    d = tmp_path / "run"
    (d / "scenarios" / "p2p_on-c16").mkdir(parents=True)
    for k, (t, w) in enumerate([("2026-11-26T10:00:00.000+00:00", 10.0), ("2026-11-26T10:00:30.000+00:00", 12.0)]):
        (d / "scenarios" / "p2p_on-c16" / f"run_{k + 1}.json").write_text(json.dumps(
            {"meta": {"started_at": t, "window_s": w}}))
    (d / "scenarios" / "p2p_on-c16" / "run_3.try1.json").write_text(json.dumps(
        {"meta": {"started_at": "2026-11-26T10:00:15.000+00:00", "window_s": 5.0}}))
    (d / "scenarios" / "p2p_on-c16" / "run_4.json").write_text("{not json")  # cut mid-write: not counted
    got = campaign_time.account(d)
    assert got["wall_s"] == 42.0  # first window's start to the end of the last one
    assert (got["kept_s"], got["set_aside_s"], got["windows_set_aside"]) == (22.0, 5.0, 1)
    assert campaign_time.main([str(d), "--until", "yesterday"]) == 2
