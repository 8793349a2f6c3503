"""Whether a run whose ``run.json`` says ``running`` is still going: its writer, recorded when the directory was made.

Why: a campaign killed outright (SIGKILL, the OOM killer, a CI runner pre-empted, a GPU machine taken away
mid-night: 2x H200, 2026-11-28, cut after 5 of 8 starts) never writes its last status. Its ``run.json`` says
``running`` for good, and a ``report`` of it the next morning printed ``[running]`` over a verdict judged on the
starts it had, as if the night were still going. Ctrl-C, SIGTERM and SIGHUP are caught by the campaign
(``interrupted``) and a dead xdist worker by the controller (``abandoned``); nothing can write after a SIGKILL,
so the reader tells, where it can be sure: a writer of this host, this boot and this pid namespace whose process
is gone (or whose pid another process now has) did not finish. Anything else (another host, another boot, a
container's own pid namespace, a run written before the writer was recorded) is said to be undecidable here, with
when the run last wrote a file: a host name is not a machine (our GPU machines and this box are all ``vm``), so a
reader that guessed would call a run cut that another machine is still running.

The writer is ``{"host", "pid", "boot_id", "pid_ns", "process_start"}``: ``boot_id`` (Linux's
``/proc/sys/kernel/random/boot_id``) and ``pid_ns`` (``/proc/self/ns/pid``) say whether a pid is the same
kernel's and namespace's; ``process_start`` (``/proc/<pid>/stat`` field 22) tells a pid that a later process
reuses. Each is ``None`` where the system does not say; the others then decide.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from ..jsontypes import JSONObject, JSONValue, as_dict
from ..procstat import PROC, boot_id, pid_namespace, start_time, stat_fields


def writer_record(*, proc: Path = PROC) -> JSONObject:
    """This process as the writer of a run directory (``run.json``'s ``writer``)."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "boot_id": boot_id(proc), "pid_ns": pid_namespace(proc),
            "process_start": start_time(pid, proc)}


def _alive(pid: int, proc: Path) -> bool:
    """Whether ``pid`` runs: a killed process its parent has not reaped yet (a zombie, state ``Z``) does not."""
    state = (stat_fields(pid, proc) or [])[:1]
    if state:
        return state[0] not in ("Z", "X")
    if proc.is_dir():  # a /proc without the process
        return False
    try:
        os.kill(pid, 0)  # no /proc here (macOS): ask the kernel
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


@dataclass(frozen=True)
class WriterState:
    """``gone``: True when the run's writer is known to have ended without a last status (the run was cut),
    False when it is still running, None when this host cannot tell; ``text`` says which and why."""

    gone: bool | None
    text: str


def _age(seconds: float) -> str:
    minutes = int(max(0.0, seconds) // 60)
    if minutes < 1:
        return "less than a minute ago"
    if minutes < 120:
        return f"{minutes} min ago"
    return f"{minutes // 60} h {minutes % 60} min ago"


def _int(value: JSONValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def writer_state(meta: JSONObject, last_write: float | None, *, host: str | None = None, proc: Path = PROC,
                 now: float | None = None) -> WriterState | None:
    """What can be told of a run that says ``running`` (``None`` for any other status): ``last_write`` is the
    newest modification time among its files (seconds since the epoch), ``host`` this host's name."""
    if meta.get("status") != "running":
        return None
    when = "" if last_write is None else f"; last written {_age((time.time() if now is None else now) - last_write)}"
    writer = as_dict(meta.get("writer"))
    pid, wrote_on = _int(writer.get("pid")), writer.get("host")
    if pid is None or not isinstance(wrote_on, str):
        return WriterState(None, f"run.json says running and does not name its process (written before "
                                 f"2026-11-28){when}: still running, or cut")
    here = socket.gethostname() if host is None else host
    if wrote_on != here:
        return WriterState(None, f"run.json says running, written by pid {pid} on host {wrote_on}, not this "
                                 f"one{when}: still running there, or cut")
    elsewhere = {"boot_id": (boot_id(proc), "during another boot (this machine has booted since, or it is another "
                                            "machine of that name)"),
                 "pid_ns": (pid_namespace(proc), "in another pid namespace (another container)")}
    for key, (mine, where) in elsewhere.items():
        theirs = writer.get(key)
        if isinstance(theirs, str) and mine is not None and theirs != mine:
            return WriterState(None, f"run.json says running, written by pid {pid} on host {wrote_on} {where}"
                                     f"{when}: still running there, or cut")
    cut = (f"cut: its process (pid {pid} on this host) ended without a last status (killed: SIGKILL, the OOM "
           f"killer, a runner taken away), and run.json still says running{when}")
    if not _alive(pid, proc):
        return WriterState(True, cut)
    started = _int(writer.get("process_start"))
    if started is not None and (now_start := start_time(pid, proc)) is not None and now_start != started:
        return WriterState(True, cut.replace(" ended ", " ended (its pid is another process's now) ", 1))
    return WriterState(False, f"still running (pid {pid} on this host){when}")
