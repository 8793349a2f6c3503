"""Processes and ports of a launched server: find its whole tree, stop it, and name who owns a port.

Why a module of its own: teardown must find every process of a server -- including the
vLLM EngineCore/Worker processes that a SIGKILLed API server leaves re-parented to init
(vLLM issue #55510) -- by the env marker :data:`TOKEN_ENV` it inherited; and the
launcher must prove that the process answering on the port is the one it started, not
an impostor that was listening there first (issue 11). Both read ``/proc`` only.

A pytest that was SIGKILLed cannot tear anything down. Its servers get SIGTERM from the
kernel (``PR_SET_PDEATHSIG``, :mod:`pytest_p2p.children`) and vLLM's API server then stops
its EngineCore and workers; a process that survives even that (a wedged engine, one
orphaned earlier by a SIGKILLed API server) still carries :data:`TOKEN_ENV` and
:data:`OWNER_ENV` (the pid and start time of the pytest that launched it).
:func:`sweep_orphans`, run at every launch, kills such processes whose pytest is gone --
never those of a pytest that still runs (a parallel session) or of another user.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence

from ..procstat import start_time, stat_fields

TOKEN_ENV = "PYTEST_P2P_SERVER_TOKEN"
OWNER_ENV = "PYTEST_P2P_SERVER_OWNER"  # "<pid>:<start time>" of the pytest process that launched the server


def owner_mark(pid: int | None = None) -> str:
    """The :data:`OWNER_ENV` value naming this process (a pid alone could be reused after it dies)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_time(pid) or 0}"


def owner_alive(mark: str) -> bool:
    """Whether the process an :func:`owner_mark` names still runs (the same pid *and* start time)."""
    pid_s, _, start_s = mark.partition(":")
    try:
        pid, start = int(pid_s), int(start_s)
    except ValueError:
        return True  # not a mark we wrote: leave the process alone
    now = start_time(pid)
    return now is not None and (start == 0 or now == start)


def proc_state(pid: int) -> tuple[str, int] | None:
    """(state letter, session id) from /proc/<pid>/stat, or None if gone."""
    rest = stat_fields(pid)
    if rest is None or len(rest) < 4:
        return None
    return rest[0], int(rest[3])


def has_token(pid: int, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return f"{TOKEN_ENV}={token}".encode() in fh.read().split(b"\0")
    except OSError:
        return False


def orphans() -> list[int]:
    """Live processes of a server (:data:`TOKEN_ENV`) whose launching pytest (:data:`OWNER_ENV`) is gone."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue  # gone, or another user's
        marks = [v for v in env if v.startswith((TOKEN_ENV.encode() + b"=", OWNER_ENV.encode() + b"="))]
        owner = next((v.split(b"=", 1)[1].decode("latin-1") for v in marks if v.startswith(OWNER_ENV.encode())),
                     None)
        if owner is None or len(marks) < 2 or owner_alive(owner):
            continue
        st = proc_state(int(entry))
        if st is not None and st[0] not in ("Z", "X"):
            found.append(int(entry))
    return sorted(found)


def sweep_orphans(grace_s: float = 5.0) -> list[int]:
    """SIGTERM, then SIGKILL, every :func:`orphans` process; returns the pids that were found.

    Why at launch: such a process holds GPU memory (and maybe a port) that the next
    measurement would otherwise share with a server nobody owns any more.
    """
    found = orphans()
    if not found:
        return []
    _signal(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_live(p) for p in found):
        time.sleep(0.1)
    _signal([p for p in found if _live(p)], signal.SIGKILL)
    return found


def _live(pid: int) -> bool:
    st = proc_state(pid)
    return st is not None and st[0] not in ("Z", "X")


def find_leftovers(token: str, session_id: int | None = None) -> list[int]:
    """Live (non-zombie) pids that carry the env marker or belong to the session, excluding us."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me:
            continue
        st = proc_state(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        if (session_id is not None and st[1] == session_id) or has_token(pid, token):
            found.append(pid)
    return sorted(found)


def _signal(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


#: seconds a server's processes get after its leader (the API server we started) exited, before SIGKILL
ORPHAN_GRACE_S = 1.0
#: seconds Python's resource trackers get, once the workers are killed, to unlink what the workers leaked and exit
TRACKER_GRACE_S = 2.0


def kill_tree(session_id: int, token: str, *, grace_s: float = 10.0,
              proc: subprocess.Popen[bytes] | None = None, orphan_grace_s: float | None = None) -> list[int]:
    """SIGTERM the session and every marked process, wait ``grace_s``, then SIGKILL; return survivors.

    ``proc`` (the leader we started) is reaped with ``wait`` so it does not linger as a zombie.

    ``orphan_grace_s``: once ``proc`` has exited, what is left gets this long at most, not the rest of
    ``grace_s``. Why: vLLM's API server exits when its own shutdown is done (it force-kills its EngineCore);
    what outlives it are the TP workers tearing down their NCCL communicators, which tells us nothing and
    has hung. On 2x H200 (2026-11-27) a worker stuck in ``Abort START`` held the next launch for the whole
    60 s ``teardown_timeout_s``, and the others of the night took ~7 s between the API server's "Application
    shutdown complete" and the next launch (the eighth night's workers were gone in 0.5 s). Then the processes are
    killed in two steps: first all but Python's ``resource_tracker`` processes, which, once the workers are
    gone, unlink the shared memory the workers leaked (vLLM's say so in the log) and exit by themselves;
    killed with the workers, they would leave it in ``/dev/shm`` until a reboot.
    """
    pids = find_leftovers(token, session_id)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session_id, signal.SIGTERM)
    _signal(pids, signal.SIGTERM)
    # a server held before its GPU work (serve.hold) is stopped: it sees its SIGTERM only once continued
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session_id, signal.SIGCONT)
    _signal(pids, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    orphaned = False
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None and orphan_grace_s is not None and not orphaned:
            orphaned = True
            deadline = min(deadline, time.monotonic() + orphan_grace_s)
        if not find_leftovers(token, session_id):
            break
        time.sleep(0.1)
    left = find_leftovers(token, session_id)
    if left and orphaned:
        trackers = [p for p in left if _is_resource_tracker(p)]
        _signal([p for p in left if p not in trackers], signal.SIGKILL)
        _wait_gone(token, session_id, proc, TRACKER_GRACE_S)
        left = find_leftovers(token, session_id)
    if left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(session_id, signal.SIGKILL)
        _signal(left, signal.SIGKILL)
        _wait_gone(token, session_id, proc, 5.0)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
    return find_leftovers(token, session_id)


def _wait_gone(token: str, session_id: int, proc: subprocess.Popen[bytes] | None, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not find_leftovers(token, session_id):
            return
        time.sleep(0.05)


def _is_resource_tracker(pid: int) -> bool:
    """Whether ``pid`` runs Python's multiprocessing resource tracker (``...resource_tracker import main...``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"multiprocessing.resource_tracker" in fh.read()
    except OSError:
        return False


def _listen_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` (IPv4 and IPv6) from /proc/net/tcp*."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                next(fh, None)
                for line in fh:
                    f = line.split()
                    if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                        found.add(f[9])
        except (OSError, ValueError, IndexError):
            continue
    return found


def port_owners(port: int) -> list[int] | None:
    """PIDs holding a socket that listens on ``port``; ``[]`` if none; ``None`` if /proc cannot tell.

    A listener whose process we may not inspect (another user's) shows up as an inode
    without a pid: then the answer is ``None`` ("someone we cannot see").
    """
    inodes = _listen_inodes(port)
    if not inodes:
        return [] if os.path.exists("/proc/net/tcp") else None
    targets = {f"socket:[{i}]" for i in inodes}
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in targets:
                    pids.add(int(entry))
                    break
            except OSError:
                continue
    return sorted(pids) or None


def cmdline(pid: int, limit: int = 160) -> str:
    """A process's command line for a message ("?" when it is gone or not ours to read)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:limit] or "?"


def session_of(pid: int) -> int | None:
    st = proc_state(pid)
    return None if st is None else st[1]


def threads_of(pids: Sequence[int]) -> list[int]:
    """Every thread id of the live processes ``pids`` (``/proc/PID/task``); a process gone meanwhile is skipped."""
    tids: list[int] = []
    for pid in pids:
        try:
            tids.extend(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
        except OSError:
            continue
    return sorted(tids)
