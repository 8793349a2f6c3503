"""A server we started, as everything after the launch sees it (:class:`RunningServer`), and how it died.

Why a module of its own: :mod:`.server` launches a server and hands it to :mod:`.ready` to be
proven ready and ours; with the class inside the launcher, readiness imported the module that
imports it (an import cycle, issue 25). Both now import it from here; it imports neither.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ServerError
from .config import ServerConfig
from .logs import likely_cause, pair_key, tail
from .procs import cmdline, has_token, port_owners, session_of
from .start_phases import StartPhases, start_phases

if TYPE_CHECKING:
    from ..probes.vllm_log import Attestation


@dataclass
class GpuUse:
    """One GPU's memory in use and the pids holding it (``server.gpu_usage``), kept as a server's idle state."""

    index: int
    used_mib: float
    pids: list[int]


@dataclass(frozen=True)
class ServerDeath:
    """Why a server we started is no longer the server we measure (exited, or its port is someone else's)."""

    arm: str
    pair: str
    pid: int
    reason: str  # "exited", "port taken over", "not listening"
    exit_code: int | None
    signal: str | None
    cause: str
    log_path: str
    log_tail: str

    def message(self) -> str:
        how = (f"exited with code {self.exit_code}" + (f" ({self.signal})" if self.signal else "")
               if self.reason == "exited" else self.reason)
        return (f"server for arm {self.arm} on {self.pair} (pid {self.pid}) {how} while in use; likely cause: "
                f"{self.cause}; log {self.log_path}:\n{self.log_tail}")


@dataclass
class RunningServer:
    """A server proven ready; what fixtures, the load generator and the attestation need."""

    base_url: str
    api_key: str
    model: str
    log_path: Path
    pid: int
    simulated: bool
    arm: str
    pair: tuple[int, ...]
    argv: list[str]
    token: str
    config: ServerConfig
    process: subprocess.Popen[bytes] = field(repr=False)
    ready_s: float = 0.0  # spawn to ready (seconds)
    spawned_at: float = 0.0  # time.monotonic() when the process was started
    idle: list[GpuUse] | None = None
    notes: list[str] = field(default_factory=list)
    cpus: tuple[int, ...] = ()  # the CPUs it was pinned to (server.cpus auto); empty: not pinned

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])

    @property
    def tokenizer_id(self) -> str:
        """What the load generator tokenizes prompts with: the model directory, or the stand-in's words."""
        from .workload import STANDIN_TOKENIZER

        return STANDIN_TOKENIZER if self.simulated else self.config.model

    def alive(self) -> bool:
        """True while the process we started runs (:meth:`death` also checks who holds the port)."""
        return self.process.poll() is None

    def ours(self, pid: int) -> bool:
        """Whether ``pid`` is this server's leader or one of its processes (same session or env marker)."""
        return pid == self.pid or session_of(pid) == self.pid or has_token(pid, self.token)

    def death(self) -> ServerDeath | None:
        """``None`` while the server we started runs and still owns its port; else what happened.

        The campaign asks this between and after reps: a rep measured against a dead,
        restarted or replaced server is not a measurement.
        """
        code = self.process.poll()
        reason = "exited" if code is not None else ""
        if not reason:
            owners = port_owners(self.port)
            if owners == []:
                reason = f"no longer listens on port {self.port}"
            elif owners and not all(self.ours(p) for p in owners):
                strangers = [p for p in owners if not self.ours(p)]
                reason = (f"lost port {self.port} to pid {strangers[0]} ({cmdline(strangers[0])}), "
                          "which is not a process of this server")
        if not reason:
            return None
        text = tail(self.log_path, 200)
        sig = None
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                sig = signal.Signals(-code).name
        return ServerDeath(arm=self.arm, pair=pair_key(self.pair), pid=self.pid, reason=reason, exit_code=code,
                           signal=sig, cause=likely_cause(text, code), log_path=str(self.log_path),
                           log_tail=tail(self.log_path))

    def check_alive(self) -> None:
        """:class:`ServerError` with the :class:`ServerDeath` message when :meth:`death` finds one."""
        dead = self.death()
        if dead is not None:
            raise ServerError(dead.message())

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def attestation(self) -> Attestation:
        """What the log proves about NCCL / all-reduce (parsed by ``probes.vllm_log``)."""
        from ..probes.vllm_log import parse_server_log

        return parse_server_log(self.log_text(), str(self.log_path))

    def start_phases(self) -> StartPhases | None:
        """Where this server's start went, from its log (``serve.start_phases``); ``None`` when the log cannot say."""
        try:
            return start_phases(self.log_text())
        except OSError:
            return None

    def to_dict(self) -> dict[str, object]:
        return {"base_url": self.base_url, "model": self.model, "log_path": str(self.log_path), "pid": self.pid,
                "simulated": self.simulated, "arm": self.arm, "pair": list(self.pair),
                "argv": [a if a != self.api_key else "<api-key>" for a in self.argv],
                "ready_s": self.ready_s, "notes": list(self.notes)}
