"""Where a vLLM server's start went, read from its log: starting its processes, then the work on the GPU.

Why: a resident campaign's night is server starts and windows, and the starts are a third of it (issue 24: a
decision within a nightly window). On 2x H200 (2026-11-27, docs/gpu-runs.md) a warm 7B-shape start took about
100 s, and some 62 s of it went before any GPU work: vLLM imports itself in three processes one after the other
(the API server, the engine core it spawns, the workers the engine core spawns: 23, 19 and 20 s measured alone).
A night's first start on a fresh machine took 146 s, the extra 46 s torch.compile filling an empty cache. A rig
owner who sees only "start 146 s" cannot tell which of these to fix; split, the log says it:
``66 s starting vLLM's processes, 42 s on the GPU (weights 2 s, torch.compile 4 s from its cache, CUDA graphs
12 s)``, and a start after the first that compiled again names a compile cache that did not last.

Read from the server log as the serve stage writes it: the launch header (``# pytest-p2p: launched at ...``, in
local time as vLLM stamps its lines) and vLLM's own lines, ``(APIServer pid=N) INFO 11-27 04:43:41 [...]``. The
stamps have whole seconds, so every phase is +-1 s. Only the log's last launch counts (a log a server appended
to after a retry holds several). A log without these lines (the stand-in, another server) gives ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ..jsontypes import JSONObject

__all__ = ["HEADER", "HELD_MARK", "LAUNCH_MARK", "RESUMED_MARK", "StartPhases", "held_line", "launched_line",
           "resumed_line", "start_phases"]

LAUNCH_MARK = "# pytest-p2p: launched at "
_STAMP = "%m-%d %H:%M:%S"  # vLLM's logging date format (local time)
#: the most seconds from the launch to the API server's first line that are believed (22-28 s on 2x H200): a mark
#: further off was written on another clock (the server's ``TZ`` differs from ours), and the split counts from
#: the API server's first line instead
MAX_TO_FIRST_LINE_S = 600.0
HEADER = "# pytest-p2p: launching arm "
#: a server started ahead and held before its GPU work (serve.hold), then continued: its split counts that apart
HELD_MARK = "# pytest-p2p: held at "
RESUMED_MARK = "# pytest-p2p: continued at "
_LINE = re.compile(r"^\((?P<proc>APIServer|EngineCore|Worker)\S* pid=\d+\) [A-Z]+ (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d) ",
                   re.MULTILINE)
_SERVING = re.compile(r"^\(APIServer\S* pid=\d+\) [A-Z]+ (\d\d-\d\d \d\d:\d\d:\d\d) .*Starting vLLM (?:API )?server on",
                      re.MULTILINE)
_LOAD = re.compile(r"Model loading took [\d.]+ GiB and ([\d.]+) seconds")
_COMPILE = re.compile(r"torch\.compile took ([\d.]+) s in total")
_GRAPHS = re.compile(r"Graph capturing finished in ([\d.]+) secs")
_FROM_CACHE = "Directly load the compiled graph"
_COMPILING = "Compiling a graph for compile range"


def held_line(now: datetime | None = None) -> str:
    """The line ``serve.hold`` writes when it stops a server started ahead (see :func:`_held_s`)."""
    return f"{HELD_MARK}{(now or datetime.now()).strftime(_STAMP)} (local time): the engine core's first line\n"


def resumed_line(now: datetime | None = None) -> str:
    return f"{RESUMED_MARK}{(now or datetime.now()).strftime(_STAMP)} (local time)\n"


def launched_line(now: datetime | None = None) -> str:
    """The header line the launcher writes just before it spawns the server: the moment, as vLLM stamps time."""
    return f"{LAUNCH_MARK}{(now or datetime.now()).strftime(_STAMP)} (local time)\n"


def _at(stamp: str) -> datetime:
    return datetime.strptime(f"2000-{stamp}", f"%Y-{_STAMP}")  # a leap year: 02-29 parses


@dataclass(frozen=True)
class StartPhases:
    """One server start, split. Seconds; ``None`` where the log does not say.

    ``processes_s``: from the launch (``from_launch``; else from the API server's first line, which comes 20-25 s
    after it) to the workers' first line: Python starting vLLM three times over. ``gpu_s``: from there to
    ``Starting vLLM server on``: weights, torch.compile, CUDA graphs, KV cache, warm-up. ``compile_cache``:
    ``loaded`` or ``compiled`` (torch.compile found its cache, or filled it).
    """

    processes_s: float | None
    from_launch: bool
    gpu_s: float | None
    load_s: float | None
    compile_s: float | None
    graphs_s: float | None
    compile_cache: str | None
    held_s: float | None = None  # stopped before its GPU work, started ahead (serve.hold): not in processes_s

    def as_json(self) -> JSONObject:
        return {"processes_s": self.processes_s, "from_launch": self.from_launch, "gpu_s": self.gpu_s,
                "load_s": self.load_s, "compile_s": self.compile_s, "graphs_s": self.graphs_s,
                "compile_cache": self.compile_cache, "held_s": self.held_s, "text": self.text()}

    def text(self) -> str:
        """``66 s starting vLLM's processes, 42 s on the GPU (weights 2 s, torch.compile 4 s from its cache, ...)``."""
        parts = []
        if self.processes_s is not None:
            parts.append(f"{self.processes_s:.0f} s starting vLLM's processes"
                         + ("" if self.from_launch else " (from the API server's first line)")
                         + ("" if self.held_s is None else f" (and {self.held_s:.0f} s held, started ahead)"))
        detail = []
        if self.load_s is not None:
            detail.append(f"weights {self.load_s:.0f} s")
        if self.compile_s is not None:
            how = {"loaded": " from its cache", "compiled": ", compiling"}.get(self.compile_cache or "", "")
            detail.append(f"torch.compile {self.compile_s:.0f} s{how}")
        if self.graphs_s is not None:
            detail.append(f"CUDA graphs {self.graphs_s:.0f} s")
        if self.gpu_s is not None:
            parts.append(f"{self.gpu_s:.0f} s on the GPU" + (f" ({', '.join(detail)})" if detail else ""))
        return ", ".join(parts)


def _max(pattern: re.Pattern[str], text: str) -> float | None:
    values = [float(m.group(1)) for m in pattern.finditer(text)]
    return max(values) if values else None


def start_phases(log_text: str) -> StartPhases | None:
    """The phases of the last start in a server log, or ``None`` when it holds no vLLM start (see module doc)."""
    head = log_text.rfind(HEADER)
    text = log_text[head:] if head >= 0 else log_text
    first: dict[str, datetime] = {}
    for m in _LINE.finditer(text):
        first.setdefault(m.group("proc"), _at(m.group("stamp")))
    if "APIServer" not in first:
        return None
    launch = _mark_at(text, LAUNCH_MARK)
    if launch is not None and not 0 <= (first["APIServer"] - launch).total_seconds() <= MAX_TO_FIRST_LINE_S:
        launch = None  # a clock stepped or another time zone: count from the API server's line instead
    t0 = launch if launch is not None else first["APIServer"]
    workers = first.get("Worker")
    serving = _SERVING.search(text)
    ready = _at(serving.group(1)) if serving else None
    held = _held_s(text)
    processes = (workers - t0).total_seconds() - (held or 0.0) if workers is not None else None
    gpu = (ready - workers).total_seconds() if workers is not None and ready is not None else None
    if (processes is not None and processes < 0) or (gpu is not None and gpu < 0):
        processes = gpu = None  # lines out of order (a log from two runs): say nothing rather than nonsense
    cache = "loaded" if _FROM_CACHE in text else "compiled" if _COMPILING in text else None
    return StartPhases(processes, launch is not None, gpu, _max(_LOAD, text), _max(_COMPILE, text),
                       _max(_GRAPHS, text), cache, held)


def _mark_at(text: str, mark: str) -> datetime | None:
    at = text.find(mark)
    if at < 0:
        return None
    try:
        return _at(text[at + len(mark):].split(" (", 1)[0].strip())
    except ValueError:
        return None


def _held_s(text: str) -> float | None:
    """Seconds the server was held before its GPU work (``serve.hold`` writes both moments), else ``None``."""
    held, resumed = _mark_at(text, HELD_MARK), _mark_at(text, RESUMED_MARK)
    if held is None or resumed is None or resumed < held:
        return None
    return (resumed - held).total_seconds()
