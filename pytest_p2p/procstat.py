"""A process as ``/proc/<pid>/stat`` shows it: the one parser of that line (stage-free).

Why one place: a process is named by its pid *and* its start time wherever the plugin must not mistake a later
process for an earlier one -- the server under measurement (``campaign.liveness``), the pytest that owns a
server (``serve.procs``), the process that wrote a run directory (``results.process``). Three parsers of the
same line were two too many: the command name before the fields may hold spaces and parentheses, so every
split starts after its last ``)``.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def stat_fields(pid: int, proc: Path = PROC) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, session, ...): ``None``
    where there is no such process (or no ``/proc``). ``proc``: another root, for tests."""
    try:
        stat = (proc / str(pid) / "stat").read_bytes().decode("latin-1")
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def start_time(pid: int, proc: Path = PROC) -> int | None:
    """The process's start in clock ticks since boot (field 22); ``None`` if gone or unreadable."""
    rest = stat_fields(pid, proc)
    try:
        return int(rest[19]) if rest is not None else None  # field 22 is the 20th after the command name
    except (IndexError, ValueError):
        return None


def boot_id(proc: Path = PROC) -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id``): a pid and start time name a process of one boot."""
    try:
        return (proc / "sys" / "kernel" / "random" / "boot_id").read_text().strip() or None
    except OSError:
        return None


def pid_namespace(proc: Path = PROC) -> str | None:
    """This process's pid namespace (``pid:[4026531836]``): pids of one namespace only name the same process;
    ``None`` where the system does not say."""
    try:
        return os.readlink(proc / "self" / "ns" / "pid")
    except OSError:
        return None
