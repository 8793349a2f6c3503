"""Starts made ahead (issue 24): the next launch's servers start during this launch's last point and are held
(SIGSTOP) at their engine core's first line, before any GPU work, then continued when their launch begins.

The hold itself is checked on a script that writes vLLM's lines on a schedule; the campaign path on the SIMULATED
stand-in, launched by ``serve.server`` exactly as vLLM would be (half its start-up delay before its engine line,
half after, as a vLLM start is Python first and GPU work after).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_campaign_resident import _reps, _runner

from pytest_p2p.campaign.config import parse_campaign
from pytest_p2p.errors import ConfigError
from pytest_p2p.serve import hold as hold_mod
from pytest_p2p.serve.hold import HELD_MARK, RESUMED_MARK, Held
from pytest_p2p.serve.procs import kill_tree, proc_state
from pytest_p2p.serve.start_phases import start_phases

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "fixtures" / "logs"

# what a vLLM server writes, on a schedule: API server, engine core, then (after the given pause) a worker
SCRIPT = r'''
import sys, time
first = sys.argv[1]
def line(proc, msg):
    print(f"({proc} pid=1) INFO {time.strftime('%m-%d %H:%M:%S')} [x.py] {msg}", flush=True)
line(first, "first")
time.sleep(0.3)
line("EngineCore", "Initializing a V1 LLM engine")
time.sleep(float(sys.argv[2]))
line("Worker", "world_size=2 rank=0")
time.sleep(60)
'''


def _server(tmp_path: Path, first: str = "APIServer", pause_s: float = 1.5) -> Any:
    script = tmp_path / "fake_vllm.py"
    script.write_text(SCRIPT)
    log = tmp_path / "server.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, str(script), first, str(pause_s)], stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return SimpleNamespace(process=proc, pid=proc.pid, log_path=log, arm="p2p_on", spawned_at=time.monotonic())


def _wait(cond: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _kill(srv: Any) -> None:
    os.killpg(srv.pid, signal.SIGKILL)
    srv.process.wait(timeout=10)


def test_a_server_is_held_at_its_engine_cores_first_line_and_goes_on_when_continued(tmp_path: Path) -> None:
    srv = _server(tmp_path, pause_s=1.5)
    h = Held(srv)
    try:
        h.watch()
        _wait(lambda: h.held_at is not None)
        state = proc_state(srv.pid)
        assert state is not None and state[0] == "T"  # stopped
        time.sleep(2.5)  # longer than the pause before its worker line: a running server would have written it
        text = srv.log_path.read_text()
        assert "(Worker pid=" not in text and HELD_MARK in text
        h.resume()
        _wait(lambda: "(Worker pid=" in srv.log_path.read_text())
        text = srv.log_path.read_text()
        assert text.index(HELD_MARK) < text.index(RESUMED_MARK) < text.index("(Worker pid=")
        got = h.as_json(time.monotonic())
        assert got["late"] is None and got["held_s"] is not None and got["held_s"] >= 2.5
    finally:
        _kill(srv)


def test_a_server_whose_gpu_work_began_before_the_mark_is_stopped_for_good(tmp_path: Path) -> None:
    """A log that shows a worker before any engine core line (another vLLM layout): the server would start its
    GPU work beside the windows, so it is not held but killed, and says why."""
    srv = _server(tmp_path, first="Worker")
    h = Held(srv)
    h.watch()
    _wait(lambda: srv.process.poll() is not None)
    h.resume()
    assert h.held_at is None and "before the engine core's first line" in h.late
    assert srv.process.returncode == -signal.SIGKILL


def test_a_server_that_has_not_reached_the_mark_when_its_launch_begins_simply_goes_on(tmp_path: Path) -> None:
    srv = _server(tmp_path)
    h = Held(srv)
    try:
        h.resume()  # before the watcher saw anything: it must not stop the server afterwards
        time.sleep(0.8)
        state = proc_state(srv.pid)
        assert state is not None and state[0] != "T" and h.held_at is None and h.late == ""
        _wait(lambda: "(Worker pid=" in srv.log_path.read_text())
    finally:
        _kill(srv)


def test_a_held_server_is_torn_down_by_its_own_shutdown_not_killed(tmp_path: Path) -> None:
    """A stopped process sees SIGTERM only once continued: teardown continues it, so vLLM's own shutdown runs
    (before, a held server sat out the grace period and was SIGKILLed)."""
    done = tmp_path / "shut down"
    proc = subprocess.Popen([sys.executable, "-c", textwrap_script(done)], start_new_session=True)
    try:
        _wait(lambda: (tmp_path / "ready").exists() or done.parent.joinpath("ready").exists())
        os.killpg(proc.pid, signal.SIGSTOP)
        left = kill_tree(proc.pid, "no-token", grace_s=5.0, proc=proc)
        assert left == [] and done.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def textwrap_script(done: Path) -> str:
    return (f"import signal, sys, time, pathlib\n"
            f"def bye(*_):\n    pathlib.Path({str(done)!r}).write_text('bye'); sys.exit(0)\n"
            f"signal.signal(signal.SIGTERM, bye)\n"
            f"pathlib.Path({str(done.parent / 'ready')!r}).write_text('')\n"
            f"time.sleep(60)\n")


def test_the_start_split_counts_the_held_time_apart() -> None:
    text = (LOGS / "h200x2_vllm-0.24.0_7b_tp2_start2_cache.log").read_text()
    plain = start_phases(text)
    assert plain is not None and plain.held_s is None and plain.processes_s is not None
    # the same start, held 30 s at its engine core's first line (the stamps: a hold that ended 30 s later)
    i = text.index("(EngineCore pid=")
    held = text[:i] + f"{HELD_MARK}11-27 04:44:06 (local time)\n{RESUMED_MARK}11-27 04:44:36 (local time)\n" + text[i:]
    got = start_phases(held)
    assert got is not None and got.held_s == 30.0
    assert got.processes_s == plain.processes_s - 30.0
    assert "(and 30 s held, started ahead)" in got.text()


STANDIN = {"PYTEST_P2P_STANDIN_STARTUP_DELAY_S": "3"}
WINDOWS = {"window_s": 1.0}  # the last point's 4 windows outlast the stand-in's 1.5 s to its engine line


def test_a_resident_campaign_starts_the_next_launch_ahead_and_holds_it_until_then(tmp_path: Path) -> None:
    res = _runner(tmp_path, STANDIN, **WINDOWS).run()
    assert res.status == "complete", res.errors
    meta = json.loads((res.run_dir / "run.json").read_text())
    starts = {rec["start"]: rec for rec in meta["server_starts"] if rec["attempt"] == 1}
    assert "ahead" not in starts[1]  # the first launch has nothing to start during
    for s in (2, 3):
        ahead = starts[s]["ahead"]
        assert set(ahead) == {"p2p_on", "p2p_off"}
        for label, a in ahead.items():
            assert a["late"] is None and a["held_s"] is not None and a["spawned_before_s"] > 0, (s, label, a)
            phases = starts[s]["servers"][label]["phases"]
            assert phases["held_s"] is not None
        note = next(n for n in res.notes if n.startswith(f"start {s}: "))
        assert "; started ahead " in note and "before their GPU work" in note
    for arm in ("p2p_on", "p2p_off"):
        for s in (2, 3):
            text = (res.run_dir / "scenarios" / f"{arm}-c1" / f"server_start{s}.log").read_text()
            # stopped before the engine's GPU part (the stand-in's second half of its delay), continued later
            assert text.count("launching arm") == 1
            assert text.index(HELD_MARK) < text.index(RESUMED_MARK) < text.index("Model loading took")
            # held while the launch before measured: its windows ran before this start's servers continued
        assert sorted(_reps(res.run_dir, arm, "c2")) == [1, 2, 3, 4, 5, 6]


def test_start_ahead_off_starts_every_launch_itself(tmp_path: Path) -> None:
    res = _runner(tmp_path, STANDIN, start_ahead=False).run()
    assert res.status == "complete", res.errors
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert all("ahead" not in rec for rec in meta["server_starts"])
    logs = list(res.run_dir.glob("scenarios/*/server_start*.log"))
    assert logs and not any(HELD_MARK in p.read_text() for p in logs)


def test_start_ahead_is_a_flag() -> None:
    with pytest.raises(ConfigError, match="start_ahead"):
        parse_campaign({"start_ahead": "sometimes"}, "r.yaml")


def test_servers_started_ahead_that_are_gone_leave_the_launch_to_start_its_own(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Every server started ahead exits at start (a stand-in fault given to them only): their launch starts
    fresh servers itself, says why, and the campaign measures every window."""
    from pytest_p2p.serve import server as server_mod

    real = server_mod.spawn_ahead

    def failing(*args: Any, **kw: Any) -> list[Held]:
        kw["extra_env"] = {**(kw.get("extra_env") or {}), "PYTEST_P2P_STANDIN_FAULT": "fail-start"}
        return real(*args, **kw)

    monkeypatch.setattr(server_mod, "spawn_ahead", failing)
    res = _runner(tmp_path, STANDIN).run()
    assert res.status == "complete", res.errors
    gone = [n for n in res.notes if "the servers started ahead are gone" in n]
    assert {n.split(":")[0] for n in gone} == {"start 2", "start 3"}
    assert all("exited" in n for n in gone)
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert all("ahead" not in rec for rec in meta["server_starts"])
    for arm in ("p2p_on", "p2p_off"):
        assert sorted(_reps(res.run_dir, arm, "c2")) == [1, 2, 3, 4, 5, 6]


def test_servers_started_ahead_are_stopped_when_the_campaign_ends_first(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch before theirs fails for good (its server dies in its last point, no retries left): the
    servers held for the next launch are stopped too, nothing of them left."""
    from pytest_p2p.campaign import blocks
    from pytest_p2p.errors import RepFailed

    made: list[Held] = []
    real_start = blocks._Ahead.start

    def start(self: Any, run: Any, group: list[int], points: list[str]) -> None:
        real_start(self, run, group, points)
        made.extend(self.held or [])
        _wait(lambda: all(h.held_at is not None for h in made))
        raise RepFailed("the server died (injected)")

    monkeypatch.setattr(blocks._Ahead, "start", start)
    res = _runner(tmp_path, STANDIN, rep_retries=0).run()
    assert res.status != "complete" and any("injected" in e for e in res.errors)
    assert len(made) == 2
    for h in made:
        assert h.server.process.poll() is not None
        assert "# pytest-p2p: teardown of arm" in h.server.log_path.read_text()


def test_the_hold_mark_is_vllms_engine_core_line() -> None:
    """Every vLLM 0.24 server log we kept: the engine core's first line comes before any worker line and any
    GPU milestone, so the hold point is before the GPU work."""
    logs = [p for p in LOGS.rglob("*.log") if "(EngineCore" in p.read_text(errors="replace")]
    assert logs
    for p in logs:
        text = p.read_text(errors="replace")
        mark = hold_mod.HOLD_MARK.search(text)
        began = hold_mod._GPU_BEGAN.search(text)
        assert mark is not None and (began is None or mark.start() < began.start()), p.name
