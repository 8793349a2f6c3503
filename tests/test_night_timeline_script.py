"""benchmarks/night_timeline.py: a night's timeline read from a compact file of real windows, and a file that is not
one (the campaign's log, a run directory) named in one line with exit 2 instead of a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import night_timeline  # noqa: E402

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def test_the_thirteenth_night_reads_as_documented(capsys: pytest.CaptureFixture[str]) -> None:
    assert night_timeline.main([str(RESULTS / "campaign2_compact-h200-8x2x6.5-thirteenth-2026-11-28.json")]) == 0
    out = capsys.readouterr().out
    kept = (RESULTS / "night_timeline-h200-thirteenth-2026-11-28.txt").read_text()
    assert "64 windows, status complete" in out
    for line in out.splitlines():
        assert line in kept, line  # the file docs/gpu-runs.md quotes, line for line


def test_what_is_not_a_compact_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "campaign2.txt"
    log.write_text("[p2p] model campaign gpu0-gpu1: scenario 1/64 ...\n")
    assert night_timeline.main([str(log)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{log}: not a compact file of benchmarks/campaign_compact.py (JSONDecodeError")
    assert night_timeline.main([str(tmp_path)]) == 2
    assert "not a compact file" in capsys.readouterr().err
