"""Window-to-window noise of a resident campaign, per throughput metric (issue 24: windows sized for signal).

    python benchmarks/window_noise.py RUN_DIR|COMPACT.json [...] [--arms p2p_on,p2p_off]

Why: the time to a decided uplift is set by how much a window pair's ratio (arm A over arm B)
varies. A window's ``output_throughput`` divides by the whole window, so the first wave's prefill
and the drain at its end (streams running out of prompts one by one) are in it; the window's
``steady_output_throughput`` counts only while every stream was busy. Both are recorded in every
rep file; this reads them back from a campaign's results directory and prints, per point and
metric: each arm's coefficient of variation over windows, the standard deviation of the window
pairs' log ratio within a start (pooled over starts), and how many window pairs a 98 % interval of
+-2 % would need at that spread (large-sample, ``(2.326 * sd / 0.02)^2``, before the start level).
Then, per point, whether the windows are alike by position: each start's first window pair against its later
ones (the first follows the server's own warm-up; later ones follow other servers' windows), the mean
difference of their log ratios over starts and a paired t-test's two-sided p. On 2x H100 with starts made 2 at
once (2026-11-27) the first windows' uplift ran 7-10 points below the later ones' (p = 0.02 at both points);
with starts one at a time (2x H100, 5 windows) and 4 at once (2x H200) it did not (p >= 0.2).
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

from pytest_p2p.stats.tdist import t_cdf

METRICS = ("output_throughput", "steady_output_throughput")
Z98 = 2.326


def windows(run_dir: Path, arm: str, point: str) -> dict[tuple[int, int], dict[str, float]]:
    """(start, window) -> metric values of one arm at one point (a results directory, or a JSON file of
    ``benchmarks/campaign_compact.py`` or ``fixtures/results/*.windows.json``)."""
    out: dict[tuple[int, int], dict[str, float]] = {}
    if run_dir.is_file():
        for d in _compact(run_dir).get(f"{arm}-{point}", []):
            meta = d.get("meta") or {}
            key = (int(meta.get("start", 0)), int(meta.get("window", meta.get("rep", 0))))
            out[key] = {m: float(d[m]) for m in METRICS if isinstance(d.get(m), (int, float))}
        return out
    for f in sorted((run_dir / "scenarios" / f"{arm}-{point}").glob("run_*.json")):
        if ".try" in f.name:
            continue
        d = json.loads(f.read_text())
        meta = d.get("meta") or {}
        key = (int(meta.get("start", 0)), int(meta.get("window", meta.get("rep", 0))))
        out[key] = {m: float(d[m]) for m in METRICS if isinstance(d.get(m), (int, float))}
    return out


def _compact(path: Path) -> dict[str, list[dict[str, object]]]:
    """The scenarios of a compact file: ``{"scenarios": ...}`` or ``{run_id: {"scenarios": ...}}`` (its first run)."""
    data = json.loads(path.read_text())
    if "scenarios" not in data:
        data = next(iter(data.values()))
    return data["scenarios"]


def pooled_sd(groups: dict[int, list[float]]) -> tuple[float, int]:
    """The within-group standard deviation pooled over groups, with its degrees of freedom."""
    ss = sum(sum((x - statistics.fmean(xs)) ** 2 for x in xs) for xs in groups.values() if len(xs) > 1)
    df = sum(len(xs) - 1 for xs in groups.values() if len(xs) > 1)
    return (math.sqrt(ss / df) if df else math.nan), df


def report(run_dir: Path, arms: tuple[str, str]) -> None:
    names = list(_compact(run_dir)) if run_dir.is_file() else [p.name for p in (run_dir / "scenarios").iterdir()]
    points = sorted({n.split("-", 1)[1] for n in names if "-" in n}, key=lambda s: (len(s), s))
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
    for point in points:
        print(position(point, windows(run_dir, arms[0], point), windows(run_dir, arms[1], point)))
    hits = [h for name in names for h in _hit_rates(run_dir, name)]
    if hits:  # vLLM's own count of prompt tokens found in its prefix cache (0 when every prompt was new)
        print(f"{'':>7} prefix cache: hit rate {max(hits):.1%} at most over {len(hits)} windows")


def _hit_rates(run_dir: Path, name: str) -> list[float]:
    """The ``prefix_cache.hit_rate`` of every window of one scenario that has one (rep files since 2026-11-27)."""
    if run_dir.is_file():
        reps = _compact(run_dir).get(name, [])
    else:
        reps = [json.loads(f.read_text()) for f in sorted((run_dir / "scenarios" / name).glob("run_*.json"))
                if ".try" not in f.name]
    return [float(r["prefix_cache"]["hit_rate"]) for r in reps  # type: ignore[index]
            if isinstance(r.get("prefix_cache"), dict)]


def position(point: str, a: dict[tuple[int, int], dict[str, float]], b: dict[tuple[int, int], dict[str, float]],
             metric: str = "output_throughput") -> str:
    """One line: each start's first window pair against its later ones (log ratio, percentage points)."""
    by_start: dict[int, dict[int, float]] = defaultdict(dict)
    for key in sorted(set(a) & set(b)):
        if a[key].get(metric, 0) > 0 and b[key].get(metric, 0) > 0:
            by_start[key[0]][key[1]] = math.log(a[key][metric] / b[key][metric])
    d = [100 * (ws[min(ws)] - statistics.fmean(v for w, v in ws.items() if w != min(ws)))
         for ws in by_start.values() if len(ws) > 1]
    if len(d) < 2:
        return f"{point:>7} first window vs later: too few starts with 2 windows"
    sd, mean = statistics.stdev(d), statistics.fmean(d)
    # every start the same gap (sd 0): a gap of none is no evidence, any other is certain
    flat = 0.0 if abs(mean) <= 1e-9 else math.copysign(math.inf, mean)
    t = mean / (sd / math.sqrt(len(d))) if sd > 1e-9 else flat
    p = 2 * (1 - t_cdf(abs(t), len(d) - 1)) if math.isfinite(t) else 0.0
    return (f"{point:>7} first window vs later ({metric} ratio): {mean:+.2f} points "
            f"(sd {sd:.2f} over {len(d)} starts, paired t p = {p:.3f})")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--arms", default="p2p_on,p2p_off")
    ns = ap.parse_args(argv)
    a, b = ns.arms.split(",")
    for d in ns.run_dirs:
        if not (d / "scenarios").is_dir() and not d.is_file():
            print(f"{d}: not a campaign results directory (no scenarios/) nor a compact JSON file", file=sys.stderr)
            return 2
        report(d, (a, b))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
