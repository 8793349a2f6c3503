"""A live progress line for a campaign: scenario k of N, rep, ETA.

A campaign runs inside a fixture's setup for minutes to hours; without a line that
moves, a user cannot tell a slow server start from a hang. The line goes through
pytest's terminal reporter (rewritten in place on a terminal, one line per scenario
otherwise) and is silent in xdist workers, whose output the controller would only
garble, and at ``-qq`` (:func:`pytest_p2p.heartbeat.quiet`: the rule the evidence and probe
phases' heartbeat follows too; ``-q`` keeps it, as it keeps pytest's own progress).

Some phases are long and silent: a server start (model load, CUDA graphs: 20-60 s), a
wait for a previous server's VRAM. The issue-26 user saw the line stop for 27 s without a
word. :meth:`Progress.waiting` wraps such a phase: it shows what is waited for and, every
``HEARTBEAT_S`` seconds until the phase ends, for how long (``... 45 s``). Its heartbeat
thread belongs to that one phase: it is stopped and joined when the phase ends (normally,
by an exception, or as soon as the phase's own work begins: :meth:`Waiting.stop`), so no
thread outlives it; without a reporter (quiet, xdist workers) none is started.

A resident campaign's time is not uniform per window: a launch (every arm's server started,
1.5-2.5 min on real GPUs) measures nothing, then its windows run 10-15 s each. Dividing the
elapsed time by the windows done charges the first launch to every window: night 1 of the 2x
H200 chain (2026-11-27) read ``ETA 2:37:16`` after its first window, ``58:26`` after its fourth,
in a campaign its plan line put at 17 min and that took 17.6. :class:`Pace` is the plan's
split (seconds a window, seconds a launch, launches still to come); the runner marks each
launch (:meth:`Progress.launch_begins` / :meth:`Progress.launch_ready`), and :meth:`Progress.eta`
charges windows and launches each their own measured mean, the plan's figure until one is
measured. Without a pace (a server start per rep: every slot costs alike) the plain ratio holds.

Fixture setup runs under pytest's output capture, so a plain write would land in the
captured buffer and show only if the test fails. Like pytest's own live-logging
handler, each write is done inside the capture manager's
``global_and_fixture_disabled()``: capture is suspended for that one line, then resumed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol


class _Reporter(Protocol):
    """The part of pytest's ``TerminalReporter`` a progress line needs."""

    isatty: bool

    def write_line(self, line: str, **markup: bool) -> None: ...

    def rewrite(self, line: str, **markup: bool) -> None: ...


class _Capture(Protocol):
    """The part of pytest's ``CaptureManager`` that suspends capture for one write."""

    def global_and_fixture_disabled(self) -> contextlib.AbstractContextManager[None]: ...


HEARTBEAT_S = 10.0  # a phase silent longer than this says what it waits for, and for how long


class Waiting:
    """One long phase's heartbeat: a thread that re-shows the line with the time waited, until stopped."""

    def __init__(self, progress: Progress, scenario: str, rep: int, reps: int, phase: str, every_s: float) -> None:
        self._progress, self._args, self._phase, self._every = progress, (scenario, rep, reps), phase, every_s
        self._stopped = threading.Event()
        self._started = time.monotonic()
        self.thread: threading.Thread | None = None
        self.beats = 0

    def start(self) -> Waiting:
        self._progress.update(*self._args, self._phase)
        if self._progress.reporter is not None:  # quiet / xdist worker: nothing to show, no thread
            self.thread = threading.Thread(target=self._run, name="p2p-progress-heartbeat", daemon=True)
            self.thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.wait(self._every):
            waited = time.monotonic() - self._started
            self.beats += 1
            self._progress.update(*self._args, f"{self._phase} ... {waited:.0f} s")

    def stop(self) -> None:
        """End the heartbeat now (idempotent): the phase's work has begun, or it is over."""
        self._stopped.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


PLAN_WINDOWS = 4  # the plan's window figure weighs as much as this many measured windows in the ETA
PLAN_LAUNCHES = 2  # ... and its later launch's figure as much as this many measured launches


@dataclass
class Pace:
    """A resident campaign's plan, split as its time splits: what a window and a launch are expected to take
    (the plan line's figures, until the campaign has measured one of each) and how many launches of the plan
    have not begun (set by the runner before each launch; 0 for a launch the plan did not count)."""

    window_s: float
    launch_s: float  # a later launch (started ahead where the campaign starts them so)
    launches_ahead: int = 0
    first_launch_s: float | None = None  # the first launch (it compiles, and nothing started it ahead); None: launch_s


@dataclass
class Progress:
    """Counts scenarios (arm x point x rep) done; ``line()`` formats; ``show()`` prints if it can."""

    label: str
    total: int
    reporter: _Reporter | None = None  # pytest TerminalReporter or None (quiet)
    capture: _Capture | None = None  # pytest CaptureManager: suspended around each write
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    lines: list[str] = field(default_factory=list)  # everything shown, for tests and the log
    pace: Pace | None = None  # a resident campaign's split of time (None: every slot alike)
    clock: Callable[[], float] = time.monotonic  # the ETA's clock (``started`` must come from the same one)
    launch_spent: float = 0.0  # seconds in launches that are over (a failed one's included)
    launches_done: int = 0  # launches whose servers came up
    first_launch_spent: float | None = None  # ``launch_spent`` when the first launch came up
    _launch_began: float | None = None
    _rewrote: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)  # a heartbeat writes from its thread

    @contextlib.contextmanager
    def _uncaptured(self) -> Iterator[None]:
        if self.capture is None:
            yield
            return
        with self.capture.global_and_fixture_disabled():
            yield

    def launch_begins(self) -> None:
        """A launch starts its servers now (the VRAM wait included); one that never came up is charged as spent."""
        now = self.clock()
        if self._launch_began is not None:
            self.launch_spent += now - self._launch_began
        self._launch_began = now

    def launch_ready(self) -> None:
        """The launch's servers are up: its time counts toward the mean launch, not the windows'."""
        if self._launch_began is None:
            return
        self.launch_spent += self.clock() - self._launch_began
        self.launches_done += 1
        if self.first_launch_spent is None:
            self.first_launch_spent = self.launch_spent
        self._launch_began = None

    def _later_launch_s(self, pace: Pace) -> float:
        """What a launch after the first is expected to take: the mean of those measured and the plan's figure,
        weighed as ``PLAN_LAUNCHES`` launches (the second launch ran slow on both complete nights of the committed
        rig, 28 and 36 s against 17-23 s after it: alone, it charged its excess to every launch to come).

        Why not the first launch's: it compiles and nothing started it ahead. On 2x H200 (2026-11-27, eleventh
        session) it took 79.5 s and the later ones 17-28 s; charged to the seven to come, the ETA after the first
        window said 18:55-21:48 for a campaign that had 12.3 minutes left."""
        later = self.launches_done - 1
        if later >= 1 and self.first_launch_spent is not None:
            measured = self.launch_spent - self.first_launch_spent
            return (measured + PLAN_LAUNCHES * pace.launch_s) / (later + PLAN_LAUNCHES)
        return pace.launch_s

    def _window_s(self, pace: Pace, windows_s: float) -> float:
        """What a window is expected to take: the windows' time so far and the plan's figure, weighed as
        ``done`` windows against ``PLAN_WINDOWS``; ``windows_s``: the time elapsed outside launches.

        Why not the windows' own mean from the first one: the first point's two warm-ups after the first launch
        (~5 s) landed on the first window alone, which took 12 s by that count instead of 6.5, and the 63 windows to
        come were charged with it. On 2x H100 (2026-11-28, twelfth session) the line read ``ETA 12:18`` before the
        first window (12:25 was left) and ``ETA 15:52`` right after it."""
        if not self.done:
            return pace.window_s
        return (max(0.0, windows_s) + PLAN_WINDOWS * pace.window_s) / (self.done + PLAN_WINDOWS)

    def eta(self) -> float | None:
        """Seconds left: windows and launches at their own mean (the pace), else the plain ratio of elapsed/done."""
        now = self.clock()
        elapsed = now - self.started
        pace = self.pace
        if pace is None:
            return elapsed / self.done * (self.total - self.done) if self.done else None
        in_launch = now - self._launch_began if self._launch_began is not None else 0.0
        later = self._later_launch_s(pace)
        first = pace.first_launch_s if pace.first_launch_s is not None else pace.launch_s
        window = self._window_s(pace, elapsed - self.launch_spent - in_launch)
        ahead = pace.launches_ahead * later
        if self.launches_done == 0 and self._launch_began is None and pace.launches_ahead:  # the first is ahead
            ahead += first - later
        left = max(0, self.total - self.done) * window + ahead
        if self._launch_began is not None:  # the launch under way: its expected time, less what it has taken
            left += max(0.0, (first if self.launches_done == 0 else later) - in_launch)
        return left

    def line(self, scenario: str, rep: int, reps: int, phase: str = "") -> str:
        elapsed = self.clock() - self.started
        eta = self.eta()
        k = min(self.done + 1, self.total)
        text = (f"[p2p] {self.label}: scenario {k}/{self.total} {scenario} rep {rep}/{reps}"
                f"{' ' + phase if phase else ''} | elapsed {_clock(elapsed)}"
                f" | ETA {_clock(eta) if eta is not None else '?'}")
        return text

    def show(self, text: str) -> None:
        with self._lock:
            self._show(text)

    def _show(self, text: str) -> None:
        self.lines.append(text)
        tr = self.reporter
        if tr is None:
            return
        with self._uncaptured():
            if getattr(tr, "isatty", False):
                if not self._rewrote:
                    tr.write_line("")  # start below pytest's "test_x.py " prefix, not on it
                tr.rewrite(text, erase=True)
                self._rewrote = True
            else:
                tr.write_line(text)

    def update(self, scenario: str, rep: int, reps: int, phase: str = "") -> None:
        self.show(self.line(scenario, rep, reps, phase))

    @contextlib.contextmanager
    def waiting(self, scenario: str, rep: int, reps: int, phase: str,
                every_s: float = HEARTBEAT_S) -> Iterator[Waiting]:
        """A long, silent phase: its line now, then ``<phase> ... N s`` every ``every_s`` until it ends.

        ``with progress.waiting(...) as beat, backend.slot(...) as handle: beat.stop()`` covers
        exactly a server's start (the slot's entry), not the measurements that follow in its body.
        """
        beat = Waiting(self, scenario, rep, reps, phase, every_s).start()
        try:
            yield beat
        finally:
            beat.stop()

    def step(self) -> None:
        self.done += 1

    def finish(self, message: str) -> None:
        with self._lock:
            self._finish(message)

    def _finish(self, message: str) -> None:
        self.lines.append(message)
        tr = self.reporter
        if tr is None:
            return
        with self._uncaptured():
            if self._rewrote:
                tr.rewrite(message, erase=True)
                tr.write_line("")
            else:
                tr.write_line(message)
