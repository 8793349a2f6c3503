"""Replay a real campaign's progress lines through ``Progress.eta``: what its ETA would have said, against the truth.

Why: the ETA a rig owner watches for 17 minutes was elapsed / windows done x windows left, which charges the
first launch (2-3 min of server starts, nothing measured) to every window. This reads a campaign's captured
output (``campaign2.txt`` of ``benchmarks/gpu_session_x2.sh``: the plan line, then one line per window and the
launches' heartbeats, each with its elapsed time), feeds the same events to :class:`Progress` with the plan's
:class:`Pace` on a replayed clock, and prints, at each quarter of the run, the ETA the log showed, the one the
pace gives, and the time that was really left (the run's wall time from ``campaign2_time.json``).

    python benchmarks/eta_replay.py RUN_TXT [--wall S | --time-json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from pytest_p2p.campaign.blocks import PLAN_PER_SERVER_S, PLAN_WARM_S, PLAN_WINDOW_OVERRUN
from pytest_p2p.campaign.progress import Pace, Progress

LINE = re.compile(r"scenario (\d+)/(\d+) (\S+(?: [\d-]+)?) rep \d+/\d+ (.*?) \| elapsed ([\d:]+) \| ETA (\S+)")
PLAN = re.compile(r"plan: .*?: (\d+) starts x (\d+) window pairs x (\d+) point\(s\), windows of ([\d.]+) s.*?"
                  r"server starts of ~(\d+) s")
AT_ONCE = re.compile(r"(\d+) starts at once")
AHEAD = re.compile(r"started ahead: ~(\d+) s of GPU work each")


def _secs(clock: str) -> float:
    parts = [int(p) for p in clock.split(":")]
    return float(sum(p * 60 ** i for i, p in enumerate(reversed(parts))))


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def replay(text: str, wall: float) -> list[tuple[float, float | None, float | None, float]]:
    """(elapsed, the log's ETA, the pace's ETA, truly left) at every window line of the run."""
    plan = PLAN.search(text)
    if plan is None:
        raise SystemExit("no plan line (a resident campaign's 'plan: ...') in the input")
    starts, windows, points, window_s, start_s = (int(plan[1]), int(plan[2]), int(plan[3]), float(plan[4]),
                                                  float(plan[5]))
    m = AT_ONCE.search(text)
    at_once = int(m[1]) if m else 1
    launches = len(range(1, starts + 1, at_once))
    extra = PLAN_PER_SERVER_S * max(0, 2 * at_once - 2)
    ahead = AHEAD.search(text)  # later launches started ahead: only their GPU work is left to them
    pace = Pace(window_s=window_s * PLAN_WINDOW_OVERRUN + PLAN_WARM_S / windows,  # what blocks.pace() plans
                launch_s=(float(ahead[1]) if ahead else start_s) + extra, launches_ahead=launches,
                first_launch_s=start_s + extra)
    clock = _Clock()
    p = Progress("replay", total=starts * windows * 2 * points, pace=pace, clock=clock, started=0.0)
    out: list[tuple[float, float | None, float | None, float]] = []
    begun = seen = 0
    in_launch = False
    for m in LINE.finditer(text):
        phase, clock.now, logged = m[4], _secs(m[5]), m[6]
        if phase.startswith("waiting for free VRAM") and not in_launch:
            begun += 1
            pace.launches_ahead = max(0, launches - begun)
            p.launch_begins()
            in_launch = True
        elif " window " in f" {phase} ":
            if in_launch:
                p.launch_ready()
                in_launch = False
            p.done = seen  # window lines before this one (the scenario number of logs before 2026-11-26 stopped at
            seen += 1      # the glue's undercounted total, 16 of 60)
            out.append((clock.now, None if logged == "?" else _secs(logged), p.eta(), wall - clock.now))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_txt", type=Path)
    ap.add_argument("--wall", type=float, help="the run's wall time in seconds")
    ap.add_argument("--time-json", type=Path, help="campaign_time.py's JSON (default: campaign2_time.json beside)")
    a = ap.parse_args()
    wall = a.wall
    if wall is None:
        tj = a.time_json or a.run_txt.with_name("campaign2_time.json")
        wall = float(json.loads(tj.read_text())[0]["wall_s"])
    rows = replay(a.run_txt.read_text(errors="replace"), wall)
    if not rows:
        print("no window lines", file=sys.stderr)
        return 1
    print(f"{a.run_txt}: wall {wall:.0f} s, {len(rows)} window lines")
    print("  elapsed | truly left | log's ETA (error) | pace's ETA (error)")

    def err(x: float | None, truth: float) -> str:
        return "      ?          " if x is None else f"{x:6.0f} s ({x - truth:+5.0f})"

    for q in (0, 1, 2, 3, len(rows) // 4, len(rows) // 2, 3 * len(rows) // 4, len(rows) - 1):
        t, logged, ours, truth = rows[q]
        print(f"  {t:6.0f} s | {truth:8.0f} s | {err(logged, truth)} | {err(ours, truth)}")
    worst = {name: max(abs(r[i] - r[3]) / max(r[3], 60.0) for r in rows if r[i] is not None)
             for name, i in (("log", 1), ("pace", 2))}
    print(f"  worst error in % of the time left (60 s floor): log {100 * worst['log']:.0f} %, "
          f"pace {100 * worst['pace']:.0f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
