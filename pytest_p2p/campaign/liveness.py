"""Is the server we are measuring still the one we started, and alive?

Why: a server that dies mid-campaign (an OOM kill, an engine-core crash) makes the load
generator's requests fail fast, and a rep of failed requests reads as throughput 0.0 and
TTFT 0.0 — averaged in, it faked a false uplift. So the campaign checks its server before,
during and after every timed window: the leader process has not exited (exit code or
signal), and it is the same process (its kernel start time, so a recycled pid or a
restarted server is not mistaken for ours). A dead server's rep is marked failed with
this cause and re-run on a fresh server; it is never stored as a measurement.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..procstat import start_time as start_ticks  # the process's start in clock ticks since boot


class ProcessLike(Protocol):
    """What we need of ``subprocess.Popen``."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...


def describe_exit(code: int) -> str:
    """``exit code 1`` or ``killed by signal SIGKILL (9)``."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} ({-code})" + (" - the kernel OOM killer?" if code == -9 else "")
    return f"exit code {code}"


@dataclass(frozen=True)
class Identity:
    """Who the server was when its slot started."""

    pid: int
    start: int | None

    @classmethod
    def of(cls, process: ProcessLike) -> Identity:
        return cls(process.pid, start_ticks(process.pid))


def death_cause(process: ProcessLike, born: Identity, log_path: Path | None = None) -> str | None:
    """``None`` while the server is alive and the same process; otherwise why not, with its log tail."""
    code = process.poll()
    if code is not None:
        what = f"the server (pid {born.pid}) died: {describe_exit(code)}"
    else:
        now = start_ticks(process.pid)
        if born.start is None or now is None or now == born.start:
            return None
        what = (f"the server process changed under us: pid {process.pid} started at tick {now}, "
                f"ours at tick {born.start} (restarted or replaced)")
    if log_path is None:
        return what
    from ..serve.server import likely_cause, tail

    text = tail(log_path, 200)
    last = tail(log_path, 8)
    return (f"{what}; likely cause: {likely_cause(text, code)}; log {log_path}"
            + (f", last lines:\n{last}" if last else ""))
