"""A resident campaign's night, window by window: where the time between windows went (issue 24).

    python benchmarks/night_timeline.py COMPACT.json [COMPACT.json ...] [--windows]

Why: a night's wall time is its windows' clocks plus what lies between them (server starts, warm-ups, teardowns,
waiting for the servers started ahead), and ``campaign_time.py`` gives only the totals. This reads the compact
files ``campaign_compact.py`` writes (one per run directory, also of a campaign cut short: the poll's compact)
and prints, per night: the clock a window ran beyond its load, per scenario; the gap before each start's first
window less that start's launch (teardown of the last start, VRAM wait, idle baseline, first warm-up, waiting
for the servers started ahead); the gap inside a start before its second arm's first window and before each
later point (the warm-ups there); and each start's cycle, first window to first window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path


def _windows(run: dict[str, object]) -> list[dict[str, object]]:
    out = []
    for scenario, reps in dict(run["scenarios"]).items():  # type: ignore[call-overload]
        for rep in reps:
            meta = rep["meta"]
            out.append({"t": datetime.fromisoformat(meta["started_at"]).timestamp(), "clock": meta["window_s"],
                        "load": rep["duration"], "scenario": scenario, "point": scenario.rsplit("-", 1)[1],
                        "start": meta["start"], "window": meta["window"]})
    return sorted(out, key=lambda w: w["t"])


def _stat(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):5.2f} s (min {min(xs):.2f}, max {max(xs):.2f}, n {len(xs)})"


def night(path: Path, show: bool) -> None:
    for run_dir, run in json.loads(path.read_text()).items():
        meta = run["run"]
        t0 = datetime.fromisoformat(meta["started_at"]).timestamp()
        starts = {int(s["start"]): float(s["start_s"]) for s in meta.get("server_starts", [])
                  if s.get("attempt", 1) == 1}
        ws = _windows(run)
        print(f"== {path.name}: {Path(run_dir).name}, {len(ws)} windows, status {meta.get('status')}")
        prev_end, prev = t0, None
        before_start: list[float] = []
        second_arm: list[float] = []
        next_point: list[float] = []
        between: list[float] = []
        firsts: dict[int, float] = {}
        for w in ws:
            gap = w["t"] - prev_end
            if prev is None or w["start"] != prev["start"]:
                firsts[w["start"]] = w["t"]
                if prev is not None and w["start"] in starts:
                    before_start.append(gap - starts[w["start"]])
            elif w["point"] != prev["point"]:
                next_point.append(gap)
            elif w["window"] == prev["window"] == 1 and w["scenario"] != prev["scenario"]:
                second_arm.append(gap)
            else:
                between.append(gap)
            if show:
                print(f"  {w['t'] - t0:7.1f}  gap {gap:6.2f}  clock {w['clock']:5.2f}  load {w['load']:5.2f}  "
                      f"{w['scenario']:12} start {w['start']} window {w['window']}")
            prev_end, prev = w["t"] + w["clock"], w
        for scenario in sorted({w["scenario"] for w in ws}):
            print(f"  clock beyond load, {scenario:12}: "
                  + _stat([w["clock"] - w["load"] for w in ws if w["scenario"] == scenario]))
        print(f"  before a later start's first window, less its launch: {_stat(before_start)}")
        print(f"  before a start's second arm's first window (warm-up):  {_stat(second_arm)}")
        print(f"  before a later point's first window (warm-ups):        {_stat(next_point)}")
        print(f"  between other windows:                                 {_stat(between)}")
        times = [t for _, t in sorted(firsts.items())]
        cycle = [b - a for a, b in zip(times, times[1:], strict=False)]
        print(f"  a start's cycle, first window to first window:         {_stat(cycle)}")
        print(f"  launches (start_s): {starts}")
        load = sum(w["load"] for w in ws)
        print(f"  load {load:.0f} s, clocks {sum(w['clock'] for w in ws):.0f} s, "
              f"first window at {ws[0]['t'] - t0:.0f} s" if ws else "  no window")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("compacts", nargs="+", type=Path)
    ap.add_argument("--windows", action="store_true", help="print every window too")
    args = ap.parse_args(argv)
    for path in args.compacts:
        try:
            night(path, args.windows)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # the campaign's log or a run directory given by mistake: say what this reads instead of a traceback
            print(f"{path}: not a compact file of benchmarks/campaign_compact.py ({type(exc).__name__}: {exc})",
                  file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
