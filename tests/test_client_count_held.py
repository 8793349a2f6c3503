"""A campaign's windows hold their client-process count for a launch: one instrument a start, for every arm.

On 2x H200 (2026-11-28) a late c64 window of p2p_on sent the pair's p2p_off window on two client processes
while p2p_on's ran on one. Held, a late window raises the count for the next launch only.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from test_campaign_resident import _runner

from pytest_p2p.serve import loadgen, result
from pytest_p2p.serve.loadclients import ClientPlanner, HeldPlanner


def test_a_held_count_stays_until_released_and_a_late_run_raises_what_comes_after() -> None:
    inner, work, other = ClientPlanner(), ("m", 64), ("m", 16)
    held = HeldPlanner(inner)
    assert held.start(work, cap=8) == 1
    held.after(work, 1, late=True, cap=8)  # returns no count to re-run with: the window is kept, flagged
    assert held.start(work, cap=8) == 1  # held: the pair's other window runs on the same count
    assert inner.start(work, cap=8) == 2  # ... while the planner beneath has learned
    held.after(work, 1, late=False, cap=8)
    assert inner.start(work, cap=8) == 2  # a window on time under the hold does not unlearn it
    assert held.start(other, cap=8) == 1  # another workload holds apart
    held.release()
    assert held.start(work, cap=8) == 2 and held.start(other, cap=8) == 1
    inner.at_least(work, 1)
    assert inner.start(work, cap=8) == 2  # at_least never lowers


def test_a_late_window_changes_the_count_between_launches_never_within_one(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real path on the stand-in: the third window measured comes back late (start 1's second pair).

    Before the count was held, the window after it (the same pair's other arm) ran on two processes."""
    windows = itertools.count(1)
    late_at = 3
    seen: dict[int, int] = {}

    def lateness(self: result.LoadResult) -> str:
        if self.num_prompts != 4:  # a warm-up (2 prompts): on time
            return ""
        k = seen.setdefault(id(self), next(windows))
        return "1 client process(es): made late by the test" if k == late_at else ""

    monkeypatch.setattr(result.LoadResult, "client_lateness", property(lateness))
    monkeypatch.setattr(loadgen, "process_cap", lambda c, cores=None: 2)  # a 2-core box would cap it at 1
    monkeypatch.setattr(loadgen, "PLANNER", ClientPlanner())  # nothing learned by other tests in this process
    res = _runner(tmp_path, starts=3, concurrency=[2]).run()
    assert res.status == "complete", res.errors
    # launch -> the counts its windows ran on, set-aside windows included: a start the screen re-ran on this loaded
    # box keeps its start number and attempt but is a launch of its own (meta.launch), which may run on more
    counts: dict[int, set[int]] = defaultdict(set)
    for arm in ("p2p_on", "p2p_off"):
        for p in (res.run_dir / "scenarios" / f"{arm}-c2").glob("run_*.json"):
            rep: dict[str, Any] = json.loads(p.read_text())
            counts[rep["meta"]["launch"]].add(rep["client_processes"])
    assert all(len(c) == 1 for c in counts.values()), counts  # one instrument a launch (a start), both arms
    first = min(counts)
    assert counts[first] == {1}  # the first launch: one process, its late window kept on it
    assert {2} in counts.values()  # the launches after it: what the late window taught
