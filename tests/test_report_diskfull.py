"""Disk full / read-only while a campaign writes its results (issue 11 item 4).

A fake filesystem fault: from the N-th write on, every atomic write raises ENOSPC (or
EROFS) until the run directory's reserve file is deleted, as a real full disk would
after a few KiB are freed. What must hold: one WriteError paragraph naming the file
(no raw OSError), run.json never left at ``running``, completed reps intact. The writer is
the production one (results/write.py), the reads go through the one reader.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_p2p.errors import P2PError, ResultsError, WriteError
from pytest_p2p.results import write as write_mod
from pytest_p2p.results.layout import RESERVE
from pytest_p2p.results.read import RunReader
from pytest_p2p.results.write import RunDir
from pytest_p2p.util import atomic_write_json


class FullDisk:
    """Fails every write after ``full_after`` successful ones, until the reserve is freed."""

    def __init__(self, full_after: int, err: int = errno.ENOSPC) -> None:
        self.left = full_after
        self.err = err
        self.reserve: Path | None = None

    def write_json(self, path: Any, obj: Any, *, compact: bool = False) -> Path:
        p = Path(path)
        freed = self.reserve is not None and not self.reserve.exists() and self.err == errno.ENOSPC
        if self.left <= 0 and not freed:
            raise OSError(self.err, "No space left on device" if self.err == errno.ENOSPC
                          else "Read-only file system", str(p))
        self.left -= 1
        return atomic_write_json(p, obj, compact=compact)


def _campaign(tmp_path: Path, disk: FullDisk, monkeypatch: pytest.MonkeyPatch) -> tuple[RunDir, str]:
    rd = RunDir.create(tmp_path, "rig", "gpu0-gpu1", "model", run_id="r1")
    disk.reserve = rd.path / RESERVE
    assert disk.reserve.is_file()
    monkeypatch.setattr(write_mod, "atomic_write_json", disk.write_json)
    message = ""
    try:
        for rep in (1, 2, 3):
            for arm in ("p2p_on", "p2p_off"):
                rd.write_rep(arm, "c1", rep, {"output_throughput": 100.0 + rep})
        rd.write_run_meta({"status": "complete"})
    except P2PError as exc:
        message = str(exc)
    return rd, message


def test_enospc_is_one_paragraph_and_run_json_says_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rd, message = _campaign(tmp_path, FullDisk(full_after=3), monkeypatch)
    target = rd.path / "scenarios" / "p2p_off-c1" / "run_2.json"
    assert str(target) in message and "No space left on device" in message
    assert "\n" not in message and "Traceback" not in message
    assert "Files already written are intact" in message
    meta = json.loads((rd.path / "run.json").read_text())
    assert meta["status"] == "failed"
    assert any("run_2.json" in e for e in meta["errors"])
    assert meta["finished_at"]
    assert not (rd.path / RESERVE).exists()
    # completed reps are whole
    assert json.loads((rd.path / "scenarios" / "p2p_on-c1" / "run_1.json").read_text()) == {"output_throughput": 101.0}
    assert sorted(RunReader.open(rd.path).reps("p2p_on", "c1")) == [1, 2]
    assert not list(rd.path.rglob("*.tmp"))


def test_a_later_complete_cannot_hide_a_lost_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rd = RunDir.create(tmp_path, "rig", "gpu0-gpu1", "model", run_id="r1")
    disk = FullDisk(full_after=0)
    disk.reserve = rd.path / RESERVE
    monkeypatch.setattr(write_mod, "atomic_write_json", disk.write_json)
    with pytest.raises(WriteError, match=r"p2p_on-c1/run_1\.json"):
        rd.write_rep("p2p_on", "c1", 1, {"x": 1.0})
    rd.write_run_meta({"status": "complete", "errors": []})  # space freed: the caller says complete
    meta = RunReader.open(rd.path).read_run_meta()
    assert meta["status"] == "failed" and len(meta["errors"]) == 1 and "run_1.json" in meta["errors"][0]


def test_read_only_filesystem_names_the_path_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rd, message = _campaign(tmp_path, FullDisk(full_after=1, err=errno.EROFS), monkeypatch)
    assert "Read-only file system" in message and "point --p2p-results at a writable directory" in message
    assert str(rd.path / "scenarios" / "p2p_off-c1" / "run_1.json") in message
    assert (rd.path / "scenarios" / "p2p_on-c1" / "run_1.json").is_file()


def test_a_finished_run_releases_its_reserve(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "rig", "gpu0-gpu1", "model", run_id="r1")
    assert (rd.path / RESERVE).is_file()
    rd.write_run_meta({"status": "complete"})
    assert not (rd.path / RESERVE).exists()
    assert RunReader.open(rd.path).read_run_meta()["status"] == "complete"


def test_report_command_on_a_full_disk_is_one_paragraph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_p2p.report import render as render_mod
    from pytest_p2p.report.report_cli import main

    rd = RunDir.create(tmp_path, "rig", "gpu0-gpu1", "model", run_id="r1")
    rd.write_run_meta({"arms": {"a": {}, "b": {}}, "points": ["c1"], "reps": 1, "status": "complete"})
    rd.write_rep("a", "c1", 1, {"output_throughput": 2.0})

    def full(path: Any, obj: Any) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(render_mod, "atomic_write_json", full)
    with pytest.raises(ResultsError, match=r"r1: cannot write the summary files \(No space left on device\)"):
        main([str(rd.path), "--no-plots"])
    assert json.loads((rd.path / "scenarios" / "a-c1" / "run_1.json").read_text()) == {"output_throughput": 2.0}
