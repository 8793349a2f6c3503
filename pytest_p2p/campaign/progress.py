"""A live progress line for a campaign: scenario k of N, rep, ETA.

A campaign runs inside a fixture's setup for minutes to hours; without a line that
moves, a user cannot tell a slow server start from a hang. The line goes through
pytest's terminal reporter (rewritten in place on a terminal, one line per scenario
otherwise) and is silent in xdist workers, whose output the controller would only
garble.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


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
    reporter: Any = None  # pytest TerminalReporter or None (quiet)
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    lines: list[str] = field(default_factory=list)  # everything shown, for tests and the log
    _rewrote: bool = False

    @classmethod
    def for_config(cls, config: Any, label: str, total: int) -> Progress:
        quiet = hasattr(config, "workerinput") or config.getoption("verbose", 0) < 0
        reporter = None if quiet else config.pluginmanager.getplugin("terminalreporter")
        return cls(label=label, total=total, reporter=reporter)

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
        if getattr(tr, "isatty", False):
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
        if self._rewrote:
            tr.rewrite(message, erase=True)
            tr.write_line("")
        else:
            tr.write_line(message)
