"""results.process: a run whose run.json says running, told apart from one whose process was killed outright
(a SIGKILL, the OOM killer, a machine taken away: nothing can write a last status then), and the report saying so."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_p2p.report import report_cli
from pytest_p2p.report.render import build_summary
from pytest_p2p.results.process import writer_record, writer_state
from pytest_p2p.results.read import RunReader

BOOT = "8e1f0c2a-boot"
NS = "pid:[4026531836]"


def _proc(tmp_path: Path, live: dict[int, tuple[str, int]], boot: str = BOOT, ns: str = NS) -> Path:
    """A stand-in /proc: the boot id and, per live pid, a stat line (state, start ticks) whose command name holds
    spaces and a parenthesis, as real ones may."""
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel" / "random").mkdir(parents=True)
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text(boot + "\n")
    (proc / "self" / "ns").mkdir(parents=True)
    (proc / "self" / "ns" / "pid").symlink_to(ns)
    for pid, (state, start) in live.items():
        (proc / str(pid)).mkdir()
        rest = " ".join(["1"] * 18)
        (proc / str(pid) / "stat").write_text(f"{pid} (python3 (x) y) {state} {rest} {start} 0 0\n")
    return proc


def _meta(pid: int = 4242, host: str = "rig-a", boot: str | None = BOOT, start: int | None = 777,
          ns: str | None = NS) -> dict[str, object]:
    return {"status": "running",
            "writer": {"host": host, "pid": pid, "boot_id": boot, "pid_ns": ns, "process_start": start}}


def test_the_writer_is_this_process(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {os.getpid(): ("R", 123456)})
    assert writer_record(proc=proc) == {"host": socket.gethostname(), "pid": os.getpid(), "boot_id": BOOT,
                                        "pid_ns": NS, "process_start": 123456}
    if Path("/proc/self/stat").is_file():  # the real /proc of a Linux box
        real = writer_record()
        assert real["pid"] == os.getpid() and isinstance(real["process_start"], int) and real["boot_id"]
        assert str(real["pid_ns"]).startswith("pid:[")


def test_only_a_run_that_says_running_is_looked_at(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {})
    for status in ("complete", "interrupted", "failed", "abandoned"):
        assert writer_state({**_meta(), "status": status}, None, host="rig-a", proc=proc) is None


def test_a_live_writer_is_still_running(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {4242: ("S", 777)})
    got = writer_state(_meta(), 1000.0, host="rig-a", proc=proc, now=1000.0 + 3 * 3600 + 5 * 60)
    assert got is not None and got.gone is False
    assert got.text == "still running (pid 4242 on this host); last written 3 h 5 min ago"


@pytest.mark.parametrize(("live", "meta", "why"), [
    ({}, _meta(), "ended without a last status (killed"),  # no such process
    ({4242: ("Z", 777)}, _meta(), "ended without a last status (killed"),  # killed, not reaped yet
    ({4242: ("S", 999)}, _meta(), "ended (its pid is another process's now)"),  # the pid reused
])
def test_a_writer_that_is_gone_cut_the_run(tmp_path: Path, live: dict[int, tuple[str, int]],
                                           meta: dict[str, object], why: str) -> None:
    got = writer_state(meta, 1000.0, host="rig-a", proc=_proc(tmp_path, live), now=1000.0 + 42 * 60)
    assert got is not None and got.gone is True, got
    assert got.text.startswith("cut: ") and why in got.text and got.text.endswith("last written 42 min ago"), got


def test_what_this_host_cannot_tell_it_does_not_guess(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {})
    other = writer_state(_meta(host="rig-b"), None, host="rig-a", proc=proc)
    assert other is not None and other.gone is None
    assert other.text == ("run.json says running, written by pid 4242 on host rig-b, not this one: still running "
                          "there, or cut")
    # a host name is not a machine: another boot (a reboot, or another machine of that name) or another pid
    # namespace (a container) leaves the pid meaningless here, so nothing is claimed
    live = _proc(tmp_path / "c", {4242: ("S", 777)})
    boot = writer_state(_meta(boot="another-boot"), None, host="rig-a", proc=live)
    assert boot is not None and boot.gone is None and "during another boot" in boot.text, boot
    gone = _proc(tmp_path / "d", {})
    ns = writer_state(_meta(ns="pid:[4026532999]"), None, host="rig-a", proc=gone)
    assert ns is not None and ns.gone is None and "in another pid namespace" in ns.text, ns
    old = writer_state({"status": "running"}, 1000.0, host="rig-a", proc=proc, now=1030.0)
    assert old is not None and old.gone is None and "does not name its process" in old.text
    assert old.text.endswith("last written less than a minute ago: still running, or cut")
    bare = _proc(tmp_path / "b", {4242: ("R", 1)})
    unknown = writer_state(_meta(boot=None, start=None, ns=None), None, host="rig-a", proc=bare)
    assert unknown is not None and unknown.gone is False  # nothing but the pid recorded: the pid decides


def test_a_campaign_killed_outright_is_reported_abandoned(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A real process makes a run directory and is SIGKILLed: its run.json still says running, and the report
    (summary, CLI, summary.md) says abandoned and why; while the process ran, the report said it was running."""
    code = ("import sys, time\n"
            "from pytest_p2p.results.write import RunDir\n"
            "rd = RunDir.create(sys.argv[1], 'rig', 'gpu0-gpu1', 'model', run_id='night')\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        running = build_summary(RunReader.open(tmp_path / "night"))
        assert running["status"] == "running"
        assert running["status_note"].startswith(f"still running (pid {child.pid} on this host)")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    time.sleep(0.01)
    cut = build_summary(RunReader.open(tmp_path / "night"))
    assert cut["status"] == "abandoned"
    assert cut["status_note"].startswith(f"cut: its process (pid {child.pid} on this host) ended without a last "
                                         "status"), cut["status_note"]
    assert (tmp_path / "night" / "run.json").read_text().count('"running"') == 1  # the reader writes no run.json
    assert report_cli.main([str(tmp_path / "night"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "[abandoned]" in out and f"status: abandoned: cut: its process (pid {child.pid} on this host)" in out
    md = (tmp_path / "night" / "summary.md").read_text()
    assert f"- status: **abandoned** (cut: its process (pid {child.pid} on this host) ended" in md, md
