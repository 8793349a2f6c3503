"""``python -m pytest_p2p report DIR``: re-render from files, no GPU; errors name the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_p2p.errors import ResultsError
from pytest_p2p.report.report_cli import main
from pytest_p2p.results.write import RunDir


def _run_dir(root: Path, run_id: str = "r1", *, reps: int = 2, simulated: bool = True) -> RunDir:
    rd = RunDir.create(root, "demo-h200", "gpu0-gpu1", "model", run_id=run_id)
    rd.write_run_meta({"arms": {"p2p_on": {"expect_transport": "P2P/CUMEM"}, "p2p_off": {"expect_transport": "SHM"}},
                       "points": ["c1"], "reps": 3, "simulated": simulated, "status": "interrupted"})
    for k in range(1, reps + 1):
        rd.write_rep("p2p_on", "c1", k, {"output_throughput": 110.0 + k, "total_token_throughput": 220.0})
        rd.write_rep("p2p_off", "c1", k, {"output_throughput": 100.0 + k, "total_token_throughput": 200.0})
    return rd


def test_report_renders_and_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rd = _run_dir(tmp_path)
    assert main([str(rd.path), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("SIMULATED — p2p results at a glance: demo-h200 gpu0-gpu1 (r1) [interrupted]")
    assert "SIMULATED — P2P output-throughput uplift: c1 +" in out
    assert "missing: p2p_on-c1: run 3 of 3 missing" in out
    assert f"wrote {rd.path / 'summary.md'}" in out and "plots" not in out
    s = json.loads((rd.path / "summary.json").read_text())
    assert s["scenarios"][0]["metrics"]["output_throughput"]["values"] == [111.0, 112.0]


def test_report_over_a_results_root_renders_every_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run_dir(tmp_path, "a")
    _run_dir(tmp_path, "b", reps=1)
    (tmp_path / "not-a-run").mkdir()
    assert main([str(tmp_path), "--no-plots", "-q"]) == 0
    out = capsys.readouterr().out
    assert "glance" not in out
    assert (tmp_path / "a" / "summary.csv").is_file() and (tmp_path / "b" / "summary.csv").is_file()


def test_report_rejects_a_non_results_dir(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="neither a run directory"):
        main([str(tmp_path)])
    with pytest.raises(ResultsError, match="no such results directory"):
        main([str(tmp_path / "missing")])


def test_module_entry_point_exit_codes(tmp_path: Path) -> None:
    """Through ``python -m pytest_p2p``: 0 on success, 2 with the corrupt file named."""
    rd = _run_dir(tmp_path)
    ok = subprocess.run([sys.executable, "-m", "pytest_p2p", "report", str(rd.path), "--no-plots"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "wrote" in ok.stdout
    (rd.path / "scenarios" / "p2p_off-c1" / "run_1.json").write_text("{")
    bad = subprocess.run([sys.executable, "-m", "pytest_p2p", "report", str(rd.path), "--no-plots"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "p2p_off-c1/run_1.json: corrupt JSON" in bad.stderr and "Traceback" not in bad.stderr


def test_no_plots_never_imports_matplotlib(tmp_path: Path) -> None:
    rd = _run_dir(tmp_path)
    code = ("import sys; from pytest_p2p.report.report_cli import main; "
            f"main([{str(rd.path)!r}, '--no-plots', '-q']); print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "False"
