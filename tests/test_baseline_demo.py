"""Issue 6 end to end on the demo rig: baseline, then injected changes, judged by real campaigns.

Three campaigns on the stand-in are saved as the accepted baseline; then an unchanged re-run
passes, a re-run on a snapshot whose GPU 1 link trained down (Gen5 -> Gen4) with a matching
slowdown is a regression attributed to that link, and a slower server alone is a regression
with no fingerprint change to blame. Everything is SIMULATED (stand-in server, replayed snapshot).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pytest_p2p.plugin.session import demo_path

CHECKS = ("--pyargs", "pytest_p2p.checks.test_campaign", "pytest_p2p.checks.test_baseline")


@pytest.fixture
def demo(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    for var in ("PYTEST_P2P_RIG", "PYTEST_P2P_SNAPSHOT", "PYTEST_P2P_DB", "PYTEST_P2P_RESULTS",
                "PYTEST_P2P_STANDIN_SLOWDOWN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTEST_P2P_LOCK_DIR", str(tmp_path / "locks"))
    rig = yaml.safe_load(demo_path("rig.yaml").read_text())
    rig["campaign"].update({"concurrency": [1, 4], "reps": 3, "prompts_per_concurrency": 2})
    rig["arms"] = {"p2p_on": "p2p_on", "p2p_off": "p2p_off"}
    rig.pop("probe", None)
    rig_file = tmp_path / "rig.yaml"
    rig_file.write_text(yaml.safe_dump(rig))
    snapshot = json.loads(demo_path("h200x2-nvlink.snapshot.json").read_text())
    db = tmp_path / "history.db"

    def run(*extra: str, snapshot_data: dict | None = None, slowdown: float | None = None) -> pytest.RunResult:
        snap = tmp_path / f"snap{len(list(tmp_path.glob('snap*')))}.json"
        snap.write_text(json.dumps(snapshot_data or snapshot))
        if slowdown is None:
            monkeypatch.delenv("PYTEST_P2P_STANDIN_SLOWDOWN", raising=False)
        else:
            monkeypatch.setenv("PYTEST_P2P_STANDIN_SLOWDOWN", str(slowdown))
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *CHECKS, "-rf", f"--p2p-rig={rig_file}",
                                             f"--p2p-snapshot={snap}", f"--p2p-db={db}",
                                             f"--p2p-results={tmp_path / 'res'}", *extra, timeout=240)

    return run, snapshot


def test_baseline_then_unchanged_downtrain_and_slower_server(demo):
    run, snapshot = demo
    for _ in range(3):
        r = run("--p2p-save-baseline")
        assert r.ret == 0, r.stdout.str()[-2000:]
        assert "accepted as baseline 'accepted'" in r.stdout.str()

    unchanged = run("--p2p-compare")
    out = unchanged.stdout.str()
    assert unchanged.ret == 0, out[-3000:]
    assert "PerformanceRegression" not in out

    down = json.loads(json.dumps(snapshot))
    down["evidence"]["gpus"][1]["pcie"]["loaded"] = {"gen": 4, "width": 16}
    downtrained = run("--p2p-compare", snapshot_data=down, slowdown=1.25)
    out = downtrained.stdout.str()
    assert downtrained.ret == 1
    assert "test_links_not_downtrained[gpu0-gpu1] FAILED" in out or "FAILED" in out
    assert "PerformanceRegression: " in out and "output_throughput" in out
    assert "0000:00:07.0" in out and "Gen5 x16 -> Gen4 x16" in out

    slower = run("--p2p-compare", slowdown=1.25)
    out = slower.stdout.str()
    assert slower.ret == 1
    assert "PerformanceRegression: " in out and "output_throughput" in out
    assert "Gen4" not in out  # nothing in the fingerprint changed: no link is blamed
