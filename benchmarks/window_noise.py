"""Window-to-window noise of a resident campaign, per throughput metric (issue 24: windows sized for signal).

    python benchmarks/window_noise.py RUN_DIR [RUN_DIR ...] [--arms p2p_on,p2p_off]

Why: the time to a decided uplift is set by how much a window pair's ratio (arm A over arm B)
varies. A window's ``output_throughput`` divides by the whole window, so the first wave's prefill
and the drain at its end (streams running out of prompts one by one) are in it; the window's
``steady_output_throughput`` counts only while every stream was busy. Both are recorded in every
rep file; this reads them back from a campaign's results directory and prints, per point and
metric: each arm's coefficient of variation over windows, the standard deviation of the window
pairs' log ratio within a start (pooled over starts), and how many window pairs a 98 % interval of
+-2 % would need at that spread (large-sample, ``(2.326 * sd / 0.02)^2``, before the start level).
Windows that were set aside are not in the data (their files are ``*.try<n>.*``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

METRICS = ("output_throughput", "steady_output_throughput")
Z98 = 2.326


def windows(run_dir: Path, arm: str, point: str) -> dict[tuple[int, int], dict[str, float]]:
    """(start, window) -> metric values of one arm at one point."""
    out: dict[tuple[int, int], dict[str, float]] = {}
    for f in sorted((run_dir / "scenarios" / f"{arm}-{point}").glob("run_*.json")):
        if ".try" in f.name:
            continue
        d = json.loads(f.read_text())
        meta = d.get("meta") or {}
        key = (int(meta.get("start", 0)), int(meta.get("window", meta.get("rep", 0))))
        out[key] = {m: float(d[m]) for m in METRICS if isinstance(d.get(m), (int, float))}
    return out


def pooled_sd(groups: dict[int, list[float]]) -> tuple[float, int]:
    """The within-group standard deviation pooled over groups, with its degrees of freedom."""
    ss = sum(sum((x - statistics.fmean(xs)) ** 2 for x in xs) for xs in groups.values() if len(xs) > 1)
    df = sum(len(xs) - 1 for xs in groups.values() if len(xs) > 1)
    return (math.sqrt(ss / df) if df else math.nan), df


def report(run_dir: Path, arms: tuple[str, str]) -> None:
    points = sorted({p.name.split("-", 1)[1] for p in (run_dir / "scenarios").iterdir() if "-" in p.name},
                    key=lambda s: (len(s), s))
    print(f"== {run_dir.name}")
    print(f"{'point':>7} {'metric':>25} {'CV ' + arms[0]:>12} {'CV ' + arms[1]:>12} {'pair sd':>8} {'df':>4} "
          f"{'pairs for +-2%':>15}")
    for point in points:
        a, b = windows(run_dir, arms[0], point), windows(run_dir, arms[1], point)
        for m in METRICS:
            cvs = []
            for side in (a, b):
                xs = [v[m] for v in side.values() if m in v]
                cvs.append(statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 else math.nan)
            groups: dict[int, list[float]] = defaultdict(list)
            for key in sorted(set(a) & set(b)):
                if m in a[key] and m in b[key] and a[key][m] > 0 and b[key][m] > 0:
                    groups[key[0]].append(math.log(a[key][m] / b[key][m]))
            sd, df = pooled_sd(groups)
            need = (Z98 * sd / 0.02) ** 2 if not math.isnan(sd) else math.nan
            print(f"{point:>7} {m:>25} {cvs[0]:>11.2%} {cvs[1]:>11.2%} {sd:>8.2%} {df:>4} {need:>15.0f}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--arms", default="p2p_on,p2p_off")
    ns = ap.parse_args(argv)
    a, b = ns.arms.split(",")
    for d in ns.run_dirs:
        if not (d / "scenarios").is_dir():
            print(f"{d}: not a campaign results directory (no scenarios/)", file=sys.stderr)
            return 2
        report(d, (a, b))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
