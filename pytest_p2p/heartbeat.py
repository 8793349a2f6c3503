"""A heartbeat for the long phases before a campaign: evidence reads and probe launches.

Why: the campaign's progress line (``campaign/progress.py``) covers server starts and load
windows, but the evidence and probe phases said nothing: the issue-26 user watched the
line stand still for 27 s (0:18 -> 0:45) and could not tell a slow NCCL init from a hang.
Stage code cannot reach pytest's terminal (a stage never imports the glue), so this
stage-free module is the meeting point: stage code says "phase started / now doing X /
done" through :func:`phase` and :func:`step`; the glue installs a :class:`Heartbeat` with a
:class:`TerminalSink` for a p2p run, and nothing is shown without one (library use, the
``python -m pytest_p2p`` commands, xdist workers, ``-qq``, ``-p no:terminal``).

What a user sees: nothing for a phase that ends within ``FIRST_S`` (no flicker for quick
reads); after that, on a terminal, one line rewritten in place with what is waited on and
the seconds elapsed (``[p2p] probe all-reduce p2p_on gpu0-gpu1: rank 0: NCCL init ... 12 s``)
and, when the phase ends, ``... done in 31 s`` on that line; off a terminal (CI logs), one
line every ``HEARTBEAT_S`` of the phase, so a log shows where a hang stood.

Time comes from an injected clock and beats are taken by :meth:`Heartbeat.tick`, called by
the phase's polling loops (the probe launcher polls its ranks) and by one ticker thread per
outermost phase for blocking waits (a CUDA init in the PCIe load process). Tests drive a
fake clock and call ``tick`` themselves: no sleeps, no timing thresholds. Imports nothing
heavy and no pytest: the terminal's surface is a Protocol.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Clock = Callable[[], float]
Detail = str | Callable[[], str]

FIRST_S = 2.0  # a phase longer than this is shown (shorter ones stay silent: no flicker)
HEARTBEAT_S = 10.0  # off a terminal, one line per this many seconds of a phase
DETAIL_MAX = 60  # columns of the detail (what is waited on), clipped beyond
TICK_S = 1.0  # the ticker thread's cadence (a terminal's seconds counter)


class Sink(Protocol):
    """Where a heartbeat's lines go: the terminal glue, or a list in tests."""

    def show(self, text: str) -> None:
        """The phase's line now (a terminal rewrites it in place; a log ignores it)."""

    def beat(self, text: str) -> None:
        """A phase still running after another ``HEARTBEAT_S`` (a log writes it as a line)."""

    def end(self, text: str, beats: int) -> None:
        """The phase is over (``beats``: how many beat lines it wrote before)."""


@runtime_checkable
class _Reporter(Protocol):
    """The part of pytest's ``TerminalReporter`` a heartbeat line needs."""

    isatty: bool

    def write_line(self, line: str, **markup: bool) -> None: ...

    def rewrite(self, line: str, **markup: bool) -> None: ...


@runtime_checkable
class _Capture(Protocol):
    """The part of pytest's ``CaptureManager`` that suspends capture for one write."""

    def global_and_fixture_disabled(self) -> contextlib.AbstractContextManager[None]: ...


class TerminalSink:
    """pytest's terminal: one line rewritten in place on a tty, one line per beat otherwise.

    Phases run in fixture setup and ``pytest_configure``, under pytest's output capture, so
    each write suspends capture for that one line, as pytest's live logging does. The
    reporter is looked up at each write (``plugin``: the plugin manager's ``getplugin``): the
    glue installs the heartbeat in ``pytest_configure``, which can run before pytest's terminal
    plugin has registered its reporter (``-p pytest_p2p.plugin.active``); without one
    (``-p no:terminal``) nothing is written.
    """

    def __init__(self, plugin: Callable[[str], object]) -> None:
        self.plugin = plugin
        self._on_line = False  # the cursor is on our rewritten line

    def _reporter(self) -> _Reporter | None:
        got = self.plugin("terminalreporter")
        return got if isinstance(got, _Reporter) else None

    @contextlib.contextmanager
    def _uncaptured(self) -> Iterator[None]:
        capture = self.plugin("capturemanager")
        if not isinstance(capture, _Capture):
            yield
            return
        with capture.global_and_fixture_disabled():
            yield

    def show(self, text: str) -> None:
        tr = self._reporter()
        if tr is None or not tr.isatty:
            return
        with self._uncaptured():
            if not self._on_line:
                tr.write_line("")  # below pytest's "test_x.py " prefix, not on it
            tr.rewrite(text, erase=True)
            self._on_line = True

    def beat(self, text: str) -> None:
        tr = self._reporter()
        if tr is None or tr.isatty:
            self.show(text)
            return
        with self._uncaptured():
            tr.write_line(text)

    def end(self, text: str, beats: int) -> None:
        tr = self._reporter()
        if tr is None:
            return
        if tr.isatty:
            if self._on_line:
                with self._uncaptured():
                    tr.rewrite(text, erase=True)
                    tr.write_line("")
                self._on_line = False
        elif beats:
            with self._uncaptured():
                tr.write_line(text)


@dataclass
class _Phase:
    name: str
    started: float
    detail: Detail = ""
    shown: bool = False
    beats: int = 0
    next_beat: float = 0.0


@dataclass
class Heartbeat:
    """The phases now running (innermost shown) and their clock; ``tick`` decides what is due."""

    sink: Sink
    clock: Clock = time.monotonic
    first_s: float = FIRST_S
    every_s: float = HEARTBEAT_S
    ticker_s: float | None = TICK_S  # None: no thread (tests tick themselves)
    _stack: list[_Phase] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _stop: threading.Event | None = None
    _thread: threading.Thread | None = None

    @contextlib.contextmanager
    def phase(self, name: str, detail: Detail = "") -> Iterator[None]:
        with self._lock:
            now = self.clock()
            self._stack.append(_Phase(name, now, detail, next_beat=now + self.every_s))
            outermost = len(self._stack) == 1
            if outermost and self.ticker_s is not None:
                self._start_ticker(self.ticker_s)
        try:
            yield
        finally:
            if outermost:
                self._stop_ticker()
            with self._lock:
                done = self._stack.pop()
                if done.shown:
                    elapsed = self.clock() - done.started
                    self.sink.end(f"[p2p] {done.name}: done in {elapsed:.0f} s", done.beats)
                if self._stack:
                    self._stack[-1].shown = False  # the outer phase is shown again at its next tick

    def step(self, detail: Detail) -> None:
        """What the innermost phase waits on now; shown at once where its line is up."""
        with self._lock:
            if not self._stack:
                return
            top = self._stack[-1]
            top.detail = detail
            if top.shown:
                self.sink.show(self._text(top, self.clock()))

    def tick(self) -> None:
        """Show the innermost phase once it has lasted ``first_s``; a beat every ``every_s``."""
        with self._lock:
            if not self._stack:
                return
            top, now = self._stack[-1], self.clock()
            if now - top.started < self.first_s:
                return
            text = self._text(top, now)
            top.shown = True
            self.sink.show(text)
            if now >= top.next_beat:
                top.beats += 1
                top.next_beat = now + self.every_s
                self.sink.beat(text)

    @staticmethod
    def _text(p: _Phase, now: float) -> str:
        detail = p.detail() if callable(p.detail) else p.detail
        if len(detail) > DETAIL_MAX:  # one terminal line: a wrapped line cannot be rewritten in place
            detail = detail[:DETAIL_MAX - 1] + "…"
        what = f"{p.name}: {detail}" if detail else p.name
        return f"[p2p] {what} ... {now - p.started:.0f} s"

    def _start_ticker(self, every: float) -> None:
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(every):
                self.tick()

        self._stop, self._thread = stop, threading.Thread(target=run, name="p2p-heartbeat", daemon=True)
        self._thread.start()

    def _stop_ticker(self) -> None:
        stop, thread = self._stop, self._thread
        self._stop = self._thread = None
        if stop is not None:
            stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def quiet(verbosity: int, worker: bool) -> bool:
    """Silent as pytest is: at ``-qq`` (pytest drops even its last line there), and in xdist workers,
    whose terminal the controller owns (their phases show in their tests' reports, not live).
    ``-q`` keeps the line, as it keeps pytest's own progress."""
    return worker or verbosity < -1


def for_terminal(plugin: Callable[[str], object], *, verbosity: int, worker: bool) -> Heartbeat | None:
    """The glue's heartbeat (``plugin``: pytest's ``pluginmanager.getplugin``); ``None`` where it must stay quiet."""
    if quiet(verbosity, worker):
        return None
    return Heartbeat(TerminalSink(plugin))


_INSTALLED: list[Heartbeat] = []  # a stack: an in-process pytester session inside a session pops only its own


def install(heartbeat: Heartbeat) -> Callable[[], None]:
    """Make ``heartbeat`` the one stage code reports to; returns its uninstall (idempotent)."""
    _INSTALLED.append(heartbeat)

    def uninstall() -> None:
        if heartbeat in _INSTALLED:
            _INSTALLED.remove(heartbeat)

    return uninstall


def current() -> Heartbeat | None:
    return _INSTALLED[-1] if _INSTALLED else None


@contextlib.contextmanager
def phase(name: str, detail: Detail = "") -> Iterator[None]:
    """A long phase of stage code (``evidence: ...``, ``probe ...``); free when nothing is installed."""
    hb = current()
    if hb is None:
        yield
        return
    with hb.phase(name, detail):
        yield


def step(detail: Detail) -> None:
    """What the running phase waits on now (a string, or a function read when the line is drawn)."""
    hb = current()
    if hb is not None:
        hb.step(detail)


def tick() -> None:
    """For a phase's polling loop: take a beat if one is due (cheap when none is)."""
    hb = current()
    if hb is not None:
        hb.tick()
