"""No process outlives a SIGKILLed pytest (issue 11: "0 orphans after SIGINT/SIGTERM/SIGKILL of pytest").

SIGKILL cannot be caught, so nothing in pytest can tear down; what ends the children is
the kernel's parent-death signal (``pytest_p2p.children``), the stand-in's own shutdown
and, for leftovers, the marker sweep at the next launch (``serve.procs.sweep_orphans``).
Timeouts are generous (a loaded 2-core box): the only timing claim is "gone within N s".
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_p2p import children
from pytest_p2p.serve.procs import OWNER_ENV, TOKEN_ENV, owner_mark, sweep_orphans

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc: Linux")

GONE_WITHIN_S = 15.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pids: list[int], within_s: float = GONE_WITHIN_S) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _wait_file(path: Path, proc: subprocess.Popen[bytes], within_s: float = 60.0) -> str:
    deadline = time.monotonic() + within_s
    while not (path.exists() and path.read_text().strip()):
        assert proc.poll() is None, f"the parent exited early with {proc.returncode}"
        assert time.monotonic() < deadline, f"{path} not written within {within_s:g} s"
        time.sleep(0.05)
    return path.read_text().strip()


# ----------------------------------------------------------------------------- the helper

PARENT = """
import subprocess, sys, time
from pytest_p2p.children import die_with_parent
armed = sys.argv[1] == "1"
child = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[3]], start_new_session=True,
                         preexec_fn=die_with_parent() if armed else None)
time.sleep(600)
"""
SLEEPER = """
import os, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def term(signum, frame):
    out.with_suffix(".term").write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
out.write_text(str(os.getpid()))
time.sleep(600)
"""


@pytest.mark.parametrize("armed", [True, False], ids=["die_with_parent", "control-unarmed"])
def test_child_gets_sigterm_when_its_parent_is_sigkilled(tmp_path: Path, armed: bool) -> None:
    """The control (no preexec_fn) shows the sleeper would otherwise survive: the test can fail."""
    pid_file = tmp_path / "sleeper.pid"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "1" if armed else "0", SLEEPER, str(pid_file)],
                              stdin=subprocess.DEVNULL)
    child = 0
    try:
        child = int(_wait_file(pid_file, parent))
        assert _alive(child)
        parent.kill()
        parent.wait(30)
        left = _wait_gone([child], GONE_WITHIN_S if armed else 2.0)
        if armed:
            assert left == [], "the child outlived its SIGKILLed parent"
            assert pid_file.with_suffix(".term").read_text() == "SIGTERM"  # a SIGTERM, so it can shut down
        else:
            assert left == [child]
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(30)
        if child:
            _kill([child])


def test_not_armed_from_a_thread_that_may_end_first() -> None:
    """PDEATHSIG fires when the forking *thread* exits: from a worker thread the helper declines."""
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(children.die_with_parent()))
    t.start()
    t.join()
    assert got == [None]
    assert callable(children.die_with_parent())  # the main thread, which lives as long as pytest


def test_no_op_off_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    children._prctl.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        assert children.die_with_parent() is None
        assert children.set_parent_death_signal() is False
    finally:
        children._prctl.cache_clear()


def test_sweep_kills_servers_of_a_dead_pytest_only(tmp_path: Path) -> None:
    """At launch: a marked process whose pytest is gone is killed; one of a live pytest (a parallel run) is not."""
    script = "import time; time.sleep(600)"
    dead_owner = f"{os.getpid()}:1"  # our pid with another start time: a pytest that died, pid reused
    procs = [subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                              env={**os.environ, TOKEN_ENV: uuid.uuid4().hex, OWNER_ENV: owner})
             for owner in (dead_owner, owner_mark())]
    try:
        for p in procs:  # the environ is readable once the interpreter runs
            deadline = time.monotonic() + 30
            while b"python" not in Path(f"/proc/{p.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
                time.sleep(0.05)
        swept = sweep_orphans(grace_s=10.0)
        assert procs[0].pid in swept and procs[1].pid not in swept
        assert procs[0].wait(GONE_WITHIN_S) == -signal.SIGTERM
        assert procs[1].poll() is None
    finally:
        for p in procs:
            p.kill()
            p.wait(30)


# ----------------------------------------------------------------------------- the README main job

MARK_ENV = "PYTEST_P2P_KILL_TEST"


def _marked(mark: str) -> list[int]:
    """Live processes whose environment carries this test's marker (inherited by everything pytest starts)."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in env and _alive(int(entry)):
            found.append(int(entry))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


@contextlib.contextmanager
def _main_job(tmp_path: Path, mark: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_P2P_")}
    env.update({"PYTEST_P2P_NVML": "off", MARK_ENV: mark, "PYTEST_P2P_LOCK_DIR": str(tmp_path / "locks"),
                "PYTEST_P2P_KEY_FILE": str(tmp_path / "server-key")})  # never the user's cache
    with open(tmp_path / "pytest.out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-m", "p2p", "--pyargs", "pytest_p2p",
                                 "-p", "no:cacheprovider"], cwd=tmp_path, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:  # whatever happened, this test leaks nothing
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        _kill(_marked(mark))


@pytest.mark.parametrize("nth", [1, 6], ids=["first-server", "mid-campaign"])
def test_sigkill_of_the_main_job_leaves_no_process(tmp_path: Path, nth: int) -> None:
    """SIGKILL once the ``nth`` stand-in runs (the demo starts ~10: smoke, then one per campaign rep)."""
    mark = uuid.uuid4().hex
    with _main_job(tmp_path, mark) as proc:
        deadline = time.monotonic() + 300
        servers: set[int] = set()
        while len(servers) < nth:
            assert proc.poll() is None, (tmp_path / "pytest.out").read_text()[-3000:]
            assert time.monotonic() < deadline, f"{len(servers)} of {nth} stand-in servers started within 300 s"
            servers.update(p for p in _marked(mark) if "pytest_p2p.serve.standin" in _cmdline(p))
            time.sleep(0.1)
        if nth > 1:
            time.sleep(1.0)  # let the campaign's load reach it: requests in flight when pytest dies
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
        deadline = time.monotonic() + GONE_WITHIN_S
        while (left := _marked(mark)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], "alive after pytest was SIGKILLed: " + "; ".join(f"{p}: {_cmdline(p)}" for p in left)


# ----------------------------------------------------------------------------- the stand-in's own tree

LAUNCHER = """
import sys, time
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.server import launch
args = {"ttft-ms": 1, "tpot-ms": 0.5, "tensor-parallel-size": 2, **dict(a.split("=", 1) for a in sys.argv[2:])}
cfg = parse_server({"command": [sys.executable, "-m", "pytest_p2p.serve.standin"], "model": "tiny-model",
                    "args": args, "startup_timeout_s": 60, "request_timeout_s": 10}, "rig.yaml")
with launch(cfg, PRESETS["p2p_on"], (0, 1), None, sys.argv[1]) as srv:
    print(srv.token, srv.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize(("args", "kill_api_first"), [
    (["orphan-child=1"], False),  # the API server's shutdown (SIGTERM from the kernel) stops its engine core
    (["orphan-child=1"], True),  # engine core orphaned by a SIGKILLed API server, then pytest dies: it follows
    (["fault=hang", "fault-after=1"], False),  # ignores SIGTERM: its own death signal is SIGKILL
], ids=["engine-core", "orphaned-engine-core", "hang"])
def test_stand_in_tree_dies_with_a_sigkilled_launcher(tmp_path: Path, args: list[str],
                                                      kill_api_first: bool) -> None:
    from pytest_p2p.serve.procs import find_leftovers

    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path / "server.log"), *args],
                                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    token = ""
    try:
        assert launcher.stdout is not None
        line = launcher.stdout.readline().decode().split()
        assert len(line) == 2, (tmp_path / "server.log").read_text(errors="replace")[-2000:]
        token, api = line[0], int(line[1])
        tree = find_leftovers(token)
        assert api in tree and len(tree) == (2 if "orphan-child=1" in args else 1)
        if kill_api_first:
            os.kill(api, signal.SIGKILL)
            assert _wait_gone([api]) == []
            assert len(find_leftovers(token)) == 1  # the orphan, as vLLM issue #55510 leaves it
        launcher.kill()
        launcher.wait(30)
        deadline = time.monotonic() + GONE_WITHIN_S
        while (left := find_leftovers(token)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == [], [_cmdline(p) for p in left]
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(30)
        if token:
            _kill(find_leftovers(token))
