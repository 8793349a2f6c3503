"""The terminal summary fits a screen: ~30 lines within 100 columns, the verdict line last (issue 26).

The demo's summary was 57 lines, up to 127 columns (150 in the issue): serving keys, every probe
arm, the all-reduce per size and quoted NCCL lines came before the verdict. By default they now
live in summary.md, and ``-v`` prints them. Only the deterministic parts are measured: how many
lines and how wide, never the numbers, which vary from run to run of the stand-in.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_RUN = ROOT / "fixtures" / "results" / "20261122-122102_h200x2-vllm_gpu0-gpu1"
DEMO_PROBES = ROOT / "pytest_p2p" / "demo" / "probes" / "gpu0-gpu1"
WIDTH, LINES = 100, 30


def _lines(run: Path, verbose: bool = False) -> list[str]:
    """The summary as the session prints it, from the run's summary.json (the glue only reads it)."""
    import json

    from pytest_p2p.report.terminal_summary import summary_lines

    return summary_lines(json.loads((run / "summary.json").read_text()), run, verbose=verbose)


def _recorded_run(tmp_path: Path) -> Path:
    """A recorded H200 run with the demo's probes beside it, as a session's results directory holds them."""
    from pytest_p2p.report.render import render_report

    run = Path(shutil.copytree(FIXTURE_RUN, tmp_path / "results" / FIXTURE_RUN.name))
    shutil.copytree(DEMO_PROBES, tmp_path / "results" / "probes" / "gpu0-gpu1")
    render_report(run, plots=False)
    return run


def test_the_default_summary_is_short_and_narrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _recorded_run(tmp_path)
    monkeypatch.chdir(tmp_path)  # the results path is shown relative to where pytest runs
    lines = _lines(run)
    assert len(lines) <= LINES and max(map(len, lines)) <= WIDTH, "\n".join(lines)
    assert lines[-1].startswith("verdict: INCONCLUSIVE") and lines[-2] == f"results: results/{run.name}/summary.md"
    assert any(ln.startswith("Point | Uplift of") and ln.endswith("Verdict") for ln in lines)  # the verdict table
    assert lines[0].startswith("p2p results at a glance: h200x2-vllm gpu0-gpu1")
    assert not any(ln.startswith(("size (B)", "serving", "setup:")) for ln in lines)  # in summary.md, or -v
    assert not any("| ipc " in ln or "| socket " in ln for ln in lines)  # the campaign's own arms only
    assert any(ln.startswith("more with -v or in summary.md") for ln in lines)


def test_verbose_prints_the_rest(tmp_path: Path) -> None:
    lines = _lines(_recorded_run(tmp_path), verbose=True)
    for start in ("serving (vllm bench serve's keys", "size (B)", "setup: ", "transport p2p_on: expected"):
        assert any(ln.startswith(start) for ln in lines), start
    assert any("| socket " in ln for ln in lines) and lines[-1].startswith("verdict: ")


def test_a_title_past_100_columns_drops_the_run_id() -> None:
    from pytest_p2p.report.summary_types import Summary
    from pytest_p2p.report.terminal import title

    summary: Summary = {"rig": "r" * 40, "pair": {"key": "gpu0-gpu1"}, "run_id": "x" * 60, "status": "complete"}
    assert len(title(summary)) > WIDTH and title(summary, run_id=False).endswith(f"{'r' * 40} gpu0-gpu1")


def test_the_demo_summary_fits_30_lines_at_100_columns(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """The README's first command on the demo rig (2 starts instead of 4, for time): the summary section."""
    from pytest_p2p.evidence.live import nvml_available

    if nvml_available()[0]:
        pytest.skip("a GPU is present: the demo rig is only the default without one")
    for var in ("PYTEST_P2P_RIG", "PYTEST_P2P_SNAPSHOT", "PYTEST_P2P_CAMPAIGN", "PYTEST_P2P_REPS",
                "PYTEST_P2P_ARMS", "PYTEST_P2P_RESULTS", "PYTEST_P2P_DB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTEST_P2P_LOCK_DIR", str(tmp_path / "locks"))
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "p2p", "--pyargs", "pytest_p2p", "-rs",
                                      "--p2p-reps", "2", timeout=600)
    out = r.stdout.lines
    start = next(i for i, ln in enumerate(out) if "p2p results at a glance" in ln and ln.startswith("="))
    end = next(i for i, ln in enumerate(out) if i > start and ln.startswith("="))
    section = out[start + 1:end]
    assert len(section) <= LINES, "\n".join(section)
    assert max(len(ln) for ln in section) <= WIDTH, max(section, key=len)
    assert section[0].startswith("SIMULATED — p2p results at a glance: demo-h200x2-nvlink gpu0-gpu1")
    assert section[-1].startswith("SIMULATED — verdict: ")
    assert any(ln.startswith("Point | Uplift of") for ln in section)
    assert any(ln.startswith("note: probe rows are a replay of pytest_p2p/demo/probes/gpu0-gpu1 ") for ln in section)
    skipped = [ln for ln in out[end:] if "not requested" in ln]
    assert len(skipped) == 1 and re.match(r"SKIPPED \[\d+\] pytest-p2p: baseline comparison not requested", skipped[0])


def test_missing_reps_fold_into_a_few_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A campaign cut short at start 3 of 4 (as a saturated client on a busy box left it): 20 reps, not 20 lines."""
    import json

    run = _recorded_run(tmp_path)
    missing = [f"{arm}-c{c} rep {r}" for arm in ("p2p_off", "p2p_on") for c in (1, 2, 4, 8) for r in (7, 8)]
    missing += ["p2p_off-c8 rep 5", "p2p_on-c8 rep 5", "a scenario never started"]
    summary = json.loads((run / "summary.json").read_text())
    summary["missing"] = missing
    (run / "summary.json").write_text(json.dumps(summary))
    monkeypatch.chdir(tmp_path)
    lines = _lines(run)
    folded = [ln for ln in lines if ln.startswith(("missing", "  "))]
    assert folded[0].startswith("missing (19): p2p_off-c1 reps 7, 8 · p2p_off-c2 reps 7, 8 · ")
    assert "p2p_on-c8 reps 5, 7, 8 · " in " ".join(folded) and folded[-1].endswith("· a scenario never started")
    assert len(folded) <= 3
    assert len(lines) <= LINES + 1 and max(map(len, lines)) <= WIDTH  # the recorded run's 26 lines + 3 folded
