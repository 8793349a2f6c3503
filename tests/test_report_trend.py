"""The metric-trend attachment: drawn from the baseline store's history of this rig and pair (issue 14 item 1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_p2p.report.trend import history, trend_png
from pytest_p2p.verdict.store import save_campaign_runs

OURS = Path(__file__).resolve().parent.parent / "fixtures" / "results" / "20261122-122102_h200x2-vllm_gpu0-gpu1"


def _night(tmp_path: Path, n: int, scale: float) -> Path:
    """A copy of the recorded H200 run as night ``n``, its throughput scaled (another run id and time)."""
    d = tmp_path / f"night{n}"
    shutil.copytree(OURS, d)
    meta = json.loads((d / "run.json").read_text())
    meta["run_id"] = f"night-{n}"
    meta["started_at"] = f"2026-11-2{n}T03:17:00+00:00"
    (d / "run.json").write_text(json.dumps(meta))
    for f in d.glob("scenarios/*/run_*.json"):
        rep = json.loads(f.read_text())
        rep["output_throughput"] = rep["output_throughput"] * scale
        f.write_text(json.dumps(rep))
    for f in d.glob("scenarios/*/aggregate.json"):
        agg = json.loads(f.read_text())
        st = agg["metrics"]["output_throughput"]
        st["mean"] *= scale
        st["values"] = [v * scale for v in st["values"]]
        f.write_text(json.dumps(agg))
    return d


def test_trend_over_stored_nights(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    assert history(db, "h200x2-vllm", "gpu0-gpu1", "c4", "output_throughput") == []  # no store: no trend
    save_campaign_runs(db, [_night(tmp_path, 1, 1.0), _night(tmp_path, 2, 0.9)])
    points = history(db, "h200x2-vllm", "gpu0-gpu1", "c4", "output_throughput")
    by_run = {(p.run_id, p.arm): p.mean for p in points}
    assert set(by_run) == {("night-1", "p2p_on"), ("night-1", "p2p_off"), ("night-2", "p2p_on"), ("night-2", "p2p_off")}
    assert by_run[("night-2", "p2p_on")] == pytest.approx(by_run[("night-1", "p2p_on")] * 0.9, rel=1e-6)
    assert history(db, "other-rig", "gpu0-gpu1", "c4", "output_throughput") == []
    pytest.importorskip("matplotlib")
    png = trend_png(points, "output_throughput at c4")
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"
    assert trend_png([p for p in points if p.run_id == "night-1"], "one run") is None  # a trend needs two
