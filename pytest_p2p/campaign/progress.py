"""A live progress line for a campaign: scenario k of N, rep, ETA.

A campaign runs inside a fixture's setup for minutes to hours; without a line that
moves, a user cannot tell a slow server start from a hang. The line goes through
pytest's terminal reporter (rewritten in place on a terminal, one line per scenario
otherwise) and is silent in xdist workers, whose output the controller would only
garble.

Fixture setup runs under pytest's output capture, so a plain write would land in the
captured buffer and show only if the test fails. Like pytest's own live-logging
handler, each write is done inside the capture manager's
``global_and_fixture_disabled()``: capture is suspended for that one line, then resumed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..xdist_roles import is_worker

if TYPE_CHECKING:
    import pytest


class _Reporter(Protocol):
    """The part of pytest's ``TerminalReporter`` a progress line needs."""

    isatty: bool

    def write_line(self, line: str, **markup: bool) -> None: ...

    def rewrite(self, line: str, **markup: bool) -> None: ...


class _Capture(Protocol):
    """The part of pytest's ``CaptureManager`` that suspends capture for one write."""

    def global_and_fixture_disabled(self) -> contextlib.AbstractContextManager[None]: ...


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


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
    _rewrote: bool = False

    @classmethod
    def for_config(cls, config: pytest.Config, label: str, total: int) -> Progress:
        quiet = is_worker(config) or int(config.getoption("verbose", 0) or 0) < 0
        reporter = None if quiet else config.pluginmanager.getplugin("terminalreporter")
        capture = None if quiet else config.pluginmanager.getplugin("capturemanager")
        return cls(label=label, total=total, reporter=reporter, capture=capture)

    @contextlib.contextmanager
    def _uncaptured(self) -> Iterator[None]:
        if self.capture is None:
            yield
            return
        with self.capture.global_and_fixture_disabled():
            yield

    def eta(self) -> float | None:
        if self.done == 0:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed / self.done * (self.total - self.done)

    def line(self, scenario: str, rep: int, reps: int, phase: str = "") -> str:
        elapsed = time.monotonic() - self.started
        eta = self.eta()
        k = min(self.done + 1, self.total)
        text = (f"[p2p] {self.label}: scenario {k}/{self.total} {scenario} rep {rep}/{reps}"
                f"{' ' + phase if phase else ''} | elapsed {_clock(elapsed)}"
                f" | ETA {_clock(eta) if eta is not None else '?'}")
        return text

    def show(self, text: str) -> None:
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

    def step(self) -> None:
        self.done += 1

    def finish(self, message: str) -> None:
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
