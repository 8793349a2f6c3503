"""Servers started ahead and held before their GPU work: the next launch's Python start-up hides under this one's.

Why: about half of a warm vLLM start is Python, not GPU. On 2x H200 (2026-11-27, docs/gpu-runs.md) the API server
wrote its first line 22-28 s after the launch and the engine core its first line 17-25 s later, with nothing on
the GPUs yet; the workers came 20-23 s after that, then the GPU part (weights, torch.compile, CUDA graphs, KV
cache). A resident campaign tears a launch's servers down and starts the next ones, so every launch after the
first paid that minute with no window running. Started ahead, as the present launch begins (``campaign.blocks``),
the next servers do their Python part beside the present servers' own start; each is **stopped** (``SIGSTOP`` to
its process group) at the first line of its engine core, before any worker exists, and continued (``SIGCONT``)
once the present servers are gone. The campaign's windows wait until every server started ahead is held
(:meth:`Held.settled`), so no window shares the machine with a server start.

The hold point is the engine core's first log line (``(EngineCore pid=N) ...``): vLLM's engine core makes its
workers only after it, and a worker touches CUDA only after importing the model runner, seconds later. The log is
read every :data:`POLL_S`. A server whose log shows a worker's line, a model load or a serving line before the
engine core's line would start its GPU work unheld: it is killed at once (:attr:`Held.late` says why) and its
launch starts its own servers; one that shows them only just after the stop is kept, with the same note.

A stopped process acts on no signal but SIGKILL and SIGCONT, so the SIGTERM the kernel sends a server when pytest
dies (``children.die_with_parent``) would wait for ever. Each held server therefore has a **guard**: a tiny
process that dies with pytest the same way and, on its SIGTERM, continues the server's group, so the server's
pending SIGTERM acts and vLLM's own shutdown runs. The guard is stopped when its server is continued or dropped.

Each server's log gets the moments it was stopped and continued (``# pytest-p2p: held at ...``), so its start
split (:mod:`.start_phases`) counts the held time apart instead of as "starting vLLM's processes".
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..children import die_with_parent
from ..jsontypes import JSONObject
from .start_phases import HEADER, held_line, resumed_line

if TYPE_CHECKING:
    from .running import RunningServer

__all__ = ["HOLD_MARK", "POLL_S", "Held"]

#: the log is read this often: the workers come 17-25 s after the engine core's first line where vLLM spawns them,
#: about 1 s after it where they are forked (``VLLM_WORKER_MULTIPROC_METHOD=fork``: 2x H200, 2026-11-27, every
#: server of that night stopped before its engine core made a worker); a worker line first means "late"
POLL_S = 0.1
#: the first line of vLLM's engine core (``EngineCore``, ``EngineCore_0``, ``EngineCore_DP0``): no worker yet
HOLD_MARK = re.compile(r"^\(EngineCore\S* pid=\d+\) ", re.MULTILINE)
#: a line that means the GPU work began (or is done): too late to hold the server before it
_GPU_BEGAN = re.compile(r"^\((?:Worker|VllmWorker)\S* pid=\d+\) |Model loading took|Starting vLLM (?:API )?server on",
                        re.MULTILINE)


#: the guard: waits; on SIGTERM (pytest died: its death signal) continues the held group given as argv[1] and exits
GUARD = ("import os, signal, sys\n"
         "def bye(*_):\n"
         "    try:\n"
         "        os.killpg(int(sys.argv[1]), signal.SIGCONT)\n"
         "    except OSError:\n"
         "        pass\n"
         "    os._exit(0)\n"
         "signal.signal(signal.SIGTERM, bye)\n"
         "while True:\n"
         "    signal.pause()\n")


@dataclass
class Held:
    """One server started ahead: a thread watches its log and stops it at :data:`HOLD_MARK`.

    ``held_at`` / ``resumed_at``: monotonic moments (``None``: not (yet) stopped / continued). ``late``: why it
    was not stopped before its GPU work began ("" when it was, or while it is still on its way there).
    """

    server: RunningServer
    cpus: tuple[int, ...] = ()  # where it runs once continued (server.cpus auto; serve.server.pin_tree)
    held_at: float | None = None
    resumed_at: float | None = None
    late: str = ""
    _done: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _guard: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def watch(self) -> None:
        """Start the guard (see the module doc), then the watcher thread (a daemon: it reads a log, sends a signal)."""
        self._guard = subprocess.Popen([sys.executable, "-c", GUARD, str(self.server.pid)], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       preexec_fn=die_with_parent())
        self._thread = threading.Thread(target=self._run, name=f"p2p-hold-{self.server.arm}", daemon=True)
        self._thread.start()

    def settled(self) -> bool:
        """Whether the watcher is done: the server is held, was found too late, or exited."""
        with self._lock:
            return self._done

    def _run(self) -> None:
        seen = 0
        path = self.server.log_path
        while True:
            with self._lock:
                if self._done:
                    return
            if self.server.process.poll() is not None:
                with self._lock:
                    self.late = self.late or f"exited (code {self.server.process.returncode}) before it was held"
                    self._done = True
                return
            try:
                with open(path, "rb") as fh:
                    fh.seek(seen)
                    chunk = fh.read()
            except OSError:
                chunk = b""
            cut = chunk.rfind(b"\n") + 1  # whole lines only: a line being written is read next time
            if cut:
                text = chunk[:cut].decode("utf-8", errors="replace")
                seen += cut
                began = _GPU_BEGAN.search(text)
                mark = HOLD_MARK.search(text)
                if began is not None and (mark is None or began.start() < mark.start()):
                    with self._lock:  # its GPU work began beside the windows: it must not go on doing so
                        self.late = (f"its log reached {began.group(0).strip()!r} before the engine core's first "
                                     "line; stopped for good")
                        self._done = True
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(self.server.pid, signal.SIGKILL)
                    return
                if mark is not None:
                    self._stop()
                    return
            time.sleep(POLL_S)

    def _stop(self) -> None:
        with self._lock:
            if self._done:
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.server.pid, signal.SIGSTOP)
                self.held_at = time.monotonic()
            self._done = True
        _note(self.server, held_line())
        began = _GPU_BEGAN.search(_rest(self.server))  # written between our read and the stop
        if began is not None:
            self.late = f"its log reached {began.group(0).strip()!r} before it was stopped"

    def resume(self) -> None:
        """Stop watching; continue the server if it was stopped (its log says when)."""
        with self._lock:  # not yet at the mark: nothing to hold, it simply goes on (its GPU work is to come)
            self._done = True
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self.held_at is not None and self.resumed_at is None:
            _note(self.server, resumed_line())
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.server.pid, signal.SIGCONT)
            self.resumed_at = time.monotonic()
        if self._guard is not None:
            self._guard.kill()  # SIGKILL: its SIGTERM handler is for pytest's death only
            self._guard.wait()
            self._guard = None

    def as_json(self, launch_t0: float) -> JSONObject:
        """What run.json says of this server's start ahead (seconds relative to its launch's beginning)."""
        return {"spawned_before_s": round(launch_t0 - self.server.spawned_at, 3),
                "held_s": None if self.held_at is None or self.resumed_at is None
                else round(self.resumed_at - self.held_at, 3),
                "to_hold_s": None if self.held_at is None else round(self.held_at - self.server.spawned_at, 3),
                "late": self.late or None}


def _rest(srv: RunningServer) -> str:
    """The log after the hold mark's line (what the server wrote before the stop took effect)."""
    try:
        text = srv.log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    mark = HOLD_MARK.search(text, text.rfind(HEADER) + 1)
    return text[mark.end():] if mark is not None else ""


def _note(srv: RunningServer, line: str) -> None:
    with contextlib.suppress(OSError), open(srv.log_path, "ab") as fh:
        fh.write(line.encode())
