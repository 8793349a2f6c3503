"""Window-to-window noise of a resident campaign, per throughput metric (issue 24: windows sized for signal).

    python benchmarks/window_noise.py RUN_DIR|COMPACT.json [...] [--arms p2p_on,p2p_off] [--pool]

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
with starts one at a time (2x H100, 5 windows) and 4 at once (2x H200) it did not (p >= 0.2). The same per arm
(``by arm``): a gap in the ratio does not say whose window is off; and each arm's windows right after the other
server's against those right after its own (output tok/s and TTFT).
Windows that were set aside are not in the data (their files are ``*.try<n>.*``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_p2p.campaign.schedule import first_arm as first_arm_of
from pytest_p2p.results.layout import REP_GLOB, REP_RE
from pytest_p2p.results.read import read_object, scenario_dirs
from pytest_p2p.stats.nested import sequence_fit
from pytest_p2p.stats.tdist import t_cdf

METRICS = ("output_throughput", "steady_output_throughput")
Z98 = 2.326


Reps = list[dict[str, object]]


def scenarios(source: Path) -> dict[str, Reps]:
    """``{"<arm>-<point>": [kept rep, ...]}`` read once: a results directory's rep files (set-aside attempts
    ``run_<k>.try<n>.*`` left out, ``results.layout.REP_RE``), or a JSON file of ``benchmarks/campaign_compact.py``
    (its first run) or ``fixtures/results/*.windows.json`` (records naming a set-aside file left out likewise)."""
    if source.is_file():
        data = json.loads(source.read_text())
        body = data if "scenarios" in data else next(iter(data.values()))
        return {name: [r for r in recs if "file" not in r or REP_RE.match(str(r["file"]))]
                for name, recs in body["scenarios"].items()}
    return {f"{arm}-{point}": [read_object(f) for f in sorted(d.glob(REP_GLOB)) if REP_RE.match(f.name)]
            for arm, point, d in scenario_dirs(source)}


def _windows(reps: Reps) -> dict[tuple[int, int], dict[str, float]]:
    """(start, window) -> metric values of one scenario's reps."""
    out: dict[tuple[int, int], dict[str, float]] = {}
    for d in reps:
        got = d.get("meta")
        meta: dict[str, Any] = got if isinstance(got, dict) else {}
        key = (int(meta.get("start", 0)), int(meta.get("window", meta.get("rep", 0))))
        out[key] = {m: float(v) for m in METRICS if isinstance(v := d.get(m), (int, float))}
    return out


def windows(source: Path, arm: str, point: str) -> dict[tuple[int, int], dict[str, float]]:
    """(start, window) -> metric values of one arm at one point of ``source`` (see :func:`scenarios`)."""
    return _windows(scenarios(source).get(f"{arm}-{point}", []))


def pooled_sd(groups: Mapping[object, list[float]]) -> tuple[float, int]:
    """The within-group standard deviation pooled over groups, with its degrees of freedom."""
    ss = sum(sum((x - statistics.fmean(xs)) ** 2 for x in xs) for xs in groups.values() if len(xs) > 1)
    df = sum(len(xs) - 1 for xs in groups.values() if len(xs) > 1)
    return (math.sqrt(ss / df) if df else math.nan), df


def report(run_dir: Path, arms: tuple[str, str]) -> None:
    scen = scenarios(run_dir)
    points = sorted({n.split("-", 1)[1] for n in scen if "-" in n}, key=lambda s: (len(s), s))
    wins = {(arm, p): _windows(scen.get(f"{arm}-{p}", [])) for arm in arms for p in points}
    print(f"== {run_dir.name}")
    print(f"{'point':>7} {'metric':>25} {'CV ' + arms[0]:>12} {'CV ' + arms[1]:>12} {'pair sd':>8} {'df':>4} "
          f"{'pairs for +-2%':>15}")
    for point in points:
        a, b = wins[(arms[0], point)], wins[(arms[1], point)]
        for m in METRICS:
            cvs = []
            for side in (a, b):
                xs = [v[m] for v in side.values() if m in v]
                cvs.append(statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 else math.nan)
            sd, df = pooled_sd({s: list(ws.values()) for s, ws in _ratios_by_start(a, b, m).items()})
            need = (Z98 * sd / 0.02) ** 2 if not math.isnan(sd) else math.nan
            print(f"{point:>7} {m:>25} {cvs[0]:>11.2%} {cvs[1]:>11.2%} {sd:>8.2%} {df:>4} {need:>15.0f}")
    for point in points:
        print(position(point, wins[(arms[0], point)], wins[(arms[1], point)]))
        print(position_by_first_arm(point, wins[(arms[0], point)], wins[(arms[1], point)], arms))
        print(arm_position(point, {arm: wins[(arm, point)] for arm in arms}))
        print(after_own(scen, arms, point))
        print(after_own(scen, arms, point, "mean_ttft_ms"))
        print(first_arm(point, wins[(arms[0], point)], wins[(arms[1], point)], arms))
        if (line := clients(scen, arms, point)) is not None:
            print(line)
    hits = [float(pc["hit_rate"]) for reps in scen.values() for r in reps  # rep files since 2026-11-27
            if isinstance(pc := r.get("prefix_cache"), dict) and isinstance(pc.get("hit_rate"), (int, float))]
    if hits:  # vLLM's own count of prompt tokens found in its prefix cache (0 when every prompt was new)
        print(f"{'':>7} prefix cache: hit rate {max(hits):.1%} at most over {len(hits)} windows")


def clients(scen: dict[str, Reps], arms: tuple[str, str], point: str) -> str | None:
    """The client processes each start's windows at ``point`` ran on (both arms), and the starts measured with
    more than one count; ``None`` where the rep files do not say (compact files before 2026-11-28 lack the key).

    Why: the load generator's count is the instrument. Until 2026-11-28 a late window raised it for the very next
    window, so a pair could be measured with two counts (the fifteenth night: c64 window 8); now it is held for a
    launch (``serve.loadclients.HeldPlanner``), and every start should show one count."""
    by_start: dict[int, set[int]] = defaultdict(set)
    late = 0
    for arm in arms:
        for d in scen.get(f"{arm}-{point}", []):
            meta, n = d.get("meta"), d.get("client_processes")
            if isinstance(meta, dict) and isinstance(n, int):
                by_start[int(meta.get("start", 0))].add(n)
                late += bool(d.get("client_lateness"))
    if not by_start:
        return None
    runs = ", ".join(f"{s}: {'/'.join(map(str, sorted(ns)))}" for s, ns in sorted(by_start.items()))
    mixed = [s for s, ns in sorted(by_start.items()) if len(ns) > 1]
    return (f"{'':>7} {point} client processes by start ({runs}); {late} late window(s); "
            + (f"start(s) {mixed} measured with two counts" if mixed else "one count within every start"))


def _ratios_by_start(a: dict[tuple[int, int], dict[str, float]], b: dict[tuple[int, int], dict[str, float]],
                     metric: str) -> dict[int, dict[int, float]]:
    """start -> window -> log ratio of ``a`` over ``b`` (window pairs with both values positive)."""
    by_start: dict[int, dict[int, float]] = defaultdict(dict)
    for key in sorted(set(a) & set(b)):
        if a[key].get(metric, 0) > 0 and b[key].get(metric, 0) > 0:
            by_start[key[0]][key[1]] = math.log(a[key][metric] / b[key][metric])
    return by_start


def _gap(ws: dict[int, float]) -> float:
    """A start's first window against the mean of its later ones (log values, in percentage points)."""
    return 100 * (ws[min(ws)] - statistics.fmean(v for w, v in ws.items() if w != min(ws)))


def _first_vs_later(by_start: dict[int, dict[int, float]]) -> tuple[float, float, float, int] | None:
    """Each start's :func:`_gap`: the mean gap, its sd over starts, a paired t-test's two-sided p, and the number
    of starts; ``None`` below 2 starts."""
    return _t_test([_gap(ws) for ws in by_start.values() if len(ws) > 1])


def _t_test(d: list[float]) -> tuple[float, float, float, int] | None:
    """Paired differences ``d`` (one a start): their mean, sd, a one-sample t-test's two-sided p against 0, and
    their number; ``None`` below 2."""
    if len(d) < 2:
        return None
    sd, mean = statistics.stdev(d), statistics.fmean(d)
    # every start the same gap (sd 0): a gap of none is no evidence, any other is certain
    flat = 0.0 if abs(mean) <= 1e-9 else math.copysign(math.inf, mean)
    t = mean / (sd / math.sqrt(len(d))) if sd > 1e-9 else flat
    p = 2 * (1 - t_cdf(abs(t), len(d) - 1)) if math.isfinite(t) else 0.0
    return mean, sd, p, len(d)


def position(point: str, a: dict[tuple[int, int], dict[str, float]], b: dict[tuple[int, int], dict[str, float]],
             metric: str = "output_throughput") -> str:
    """One line: each start's first window pair against its later ones (log ratio, percentage points)."""
    got = _first_vs_later(_ratios_by_start(a, b, metric))
    if got is None:
        return f"{point:>7} first window vs later: too few starts with 2 windows"
    mean, sd, p, n = got
    return (f"{point:>7} first window vs later ({metric} ratio): {mean:+.2f} points "
            f"(sd {sd:.2f} over {n} starts, paired t p = {p:.3f})")


def gaps_by_first_arm(a: dict[tuple[int, int], dict[str, float]], b: dict[tuple[int, int], dict[str, float]],
                      arms: tuple[str, str], metric: str = "output_throughput") -> dict[str, list[float]]:
    """Each start's first window pair against its later ones (log ratio, percentage points), by the arm that went
    first in the start (``campaign.schedule.first_arm``)."""
    by_first: dict[str, list[float]] = defaultdict(list)
    for start, ws in sorted(_ratios_by_start(a, b, metric).items()):
        if len(ws) > 1:
            by_first[first_arm_of(list(arms), start)].append(_gap(ws))
    return by_first


def position_by_first_arm(point: str, a: dict[tuple[int, int], dict[str, float]],
                          b: dict[tuple[int, int], dict[str, float]], arms: tuple[str, str],
                          metric: str = "output_throughput") -> str:
    """One line: :func:`position`'s gap (first window pair against the later ones, log ratio, percentage points)
    split by the arm that went first in the start, each side's mean, standard error and starts.

    Why: it tests the switching-cost account of that gap. With costs ``c_on`` and ``c_off`` paid after the other
    server's window (:func:`after_own` reads ``-c``), ABBA over 2 pairs in the default warm-up order
    (``campaign.warmup_order: windows``) predicts ``c_off`` where p2p_on went first and ``-c_on`` where p2p_off did;
    ``reverse`` (the first window after its own server's warm-up) predicts ``c_on + c_off`` and ``-(c_on + c_off)``
    if a warm-up settles a server as its own window does. On the five default-order nights of the committed 7B rig
    (2026-11-27/28) c64 read -1.54 (se 0.77) and -2.83 (se 1.09) against -0.4 and -2.35 predicted from their
    after-own lines.
    """
    by_first = gaps_by_first_arm(a, b, arms, metric)
    parts = []
    for arm in arms:
        d = by_first.get(arm, [])
        if len(d) < 2:
            parts.append(f"{arm} first too few starts")
            continue
        se = statistics.stdev(d) / math.sqrt(len(d))
        parts.append(f"{arm} first {statistics.fmean(d):+.2f} points (se {se:.2f}, {len(d)} starts)")
    return f"{point:>7} first window vs later by the arm that went first ({metric} ratio): " + "; ".join(parts)


def arm_position(point: str, wins: dict[str, dict[tuple[int, int], dict[str, float]]],
                 metric: str = "output_throughput") -> str:
    """One line: the same per arm, on each arm's own throughput (log, percentage points).

    Why: a gap in the ratio does not say whose window is off. Over the three complete nights of the committed rig
    (2026-11-27/28: 2x H200, 2x H100, 2x H200) p2p_on's first c64 window of a start ran 1.1-2.3 % below its
    second and p2p_off's did not (-0.2 .. +1.4 %); :func:`after_own` says why (docs/campaign-design.md)."""
    parts = []
    for arm, w in wins.items():
        by_start: dict[int, dict[int, float]] = defaultdict(dict)
        for (start, window), values in w.items():
            if values.get(metric, 0) > 0:
                by_start[start][window] = math.log(values[metric])
        got = _first_vs_later(by_start)
        parts.append(f"{arm} too few starts" if got is None else
                     f"{arm} {got[0]:+.2f} points (sd {got[1]:.2f}, p = {got[2]:.3f})")
    return f"{point:>7} first window vs later by arm ({metric}): " + "; ".join(parts)


def after_own(scen: dict[str, Reps], arms: tuple[str, str], point: str, metric: str = "output_throughput") -> str:
    """One line: each arm's windows right after the other arm's window (or warm-up) against those right after its
    own, per start (log, percentage points), in the order the windows ran (``meta.started_at``).

    Why: with ABBA over 2 window pairs the second arm of a start runs its second window right after its first, and
    every other window right after the other server's. On the three complete nights of the committed rig
    (2026-11-27/28) p2p_on's c64 windows after the other server's ran 1.1 / 3.3 / 3.8 % slower than after its own,
    with TTFT 1.5 / 11 / 11 % longer, through the whole window (the steady throughput too); on three nights
    before (servers pinned; forked; started ahead, all before the load clients were pooled) they did not (-0.5 /
    -0.1 / +1.6 %). Each arm runs a quarter of its windows after its own, so against continuous service the
    uplift reads about 3/4 of the difference of the arms' costs low (docs/campaign-design.md)."""
    parts = []
    for arm, d in after_own_gaps(scen, arms, point, metric).items():
        got = _t_test(d)
        parts.append(f"{arm} too few starts with both" if got is None else
                     f"{arm} {got[0]:+.2f} points (sd {got[1]:.2f} over {got[3]} starts, p = {got[2]:.3f})")
    return f"{point:>7} after the other server's window vs after its own ({metric}): " + "; ".join(parts)


def after_own_gaps(scen: dict[str, Reps], arms: tuple[str, str], point: str,
                   metric: str = "output_throughput") -> dict[str, list[float]]:
    """Per arm, each start's mean of its windows after the other server's against after its own (log, percentage
    points; starts with both kinds only), from the windows' own start times."""
    points = {n.split("-", 1)[1] for n in scen if "-" in n}
    seq: list[tuple[str, tuple[str, str], int, float]] = []  # (started_at, (arm, point), start, log value)
    for arm in arms:
        for pt in points:
            for r in scen.get(f"{arm}-{pt}", []):
                meta = r.get("meta")
                value = r.get(metric)
                if not isinstance(meta, dict) or not isinstance(value, (int, float)) or value <= 0:
                    continue
                if "started_at" in meta and "start" in meta:
                    seq.append((str(meta["started_at"]), (arm, pt), int(meta["start"]), math.log(value)))
    seq.sort()
    out: dict[str, list[float]] = {}
    for arm in arms:
        own: dict[int, list[float]] = defaultdict(list)
        other: dict[int, list[float]] = defaultdict(list)
        for i, (_, who, start, value) in enumerate(seq):
            if who != (arm, point):
                continue
            before = seq[i - 1] if i else None
            (own if before is not None and before[1] == who and before[2] == start else other)[start].append(value)
        out[arm] = [100 * (statistics.fmean(other[s]) - statistics.fmean(own[s])) for s in sorted(own) if other.get(s)]
    return out


def first_arm(point: str, a: dict[tuple[int, int], dict[str, float]], b: dict[tuple[int, int], dict[str, float]],
              arms: tuple[str, str], metric: str = "output_throughput") -> str:
    """One line: the start means (uplift %) of starts where the first arm went first against the others, with the
    verdict's own test of the split and whether the verdict fits it at this number of starts.

    Why: the campaign alternates the first arm from start to start (``campaign.schedule.order``), and with an even
    number of window pairs the arm that goes first also goes last at that point. A position effect (2x H200,
    2026-11-27: p2p_on slower at its point's ends of a start) then splits the start means by order: c16's ran
    23.2 / 27.9 / 23.4 / 27.8 / 23.8 %. The test is ``stats.sequence_fit``'s F on the log start means, the one
    the verdict reports (``first_arm`` in run.json); from 6 starts on the verdict fits the split."""
    by_start = _ratios_by_start(a, b, metric)
    starts = sorted(by_start)
    fit = sequence_fit([statistics.fmean(by_start[s].values()) for s in starts],
                       [first_arm_of(list(arms), s) for s in starts])
    got = {g: (n, 100 * math.expm1(m)) for g, n, m in fit.groups}
    if len(got) < 2 or fit.p is None or min(n for n, _ in got.values()) < 2:
        return f"{point:>7} start means by the arm that went first: too few starts of each"
    (n1, u1), (n2, u2) = got[arms[0]], got[arms[1]]
    verdict = "fitted by the verdict" if fit.status == "fitted" else "not fitted below 6 starts"
    return (f"{point:>7} start means by the arm that went first: {arms[0]} first {u1:+.1f} % ({n1} starts), "
            f"{arms[1]} first {u2:+.1f} % ({n2}); difference {u1 - u2:+.1f} points, F = {fit.f:.3g}, "
            f"p = {fit.p:.2g} ({verdict})")


def _mean_se(d: list[float]) -> str:
    if len(d) < 2:
        return "too few starts"
    return f"{statistics.fmean(d):+.2f} (se {statistics.stdev(d) / math.sqrt(len(d)):.2f}, {len(d)} starts)"


def pooled(sources: list[Path], arms: tuple[str, str], metric: str = "output_throughput") -> list[str]:
    """Lines pooling several nights' starts, per point: the window-pair spread within starts, the first pair's gap
    by the arm that went first, each arm's cost after the other server's window, and the gaps those costs predict
    for 2 window pairs a start in the default warm-up order (``c_off`` and ``-c_on``,
    :func:`position_by_first_arm`).

    Why: one night's 4 + 4 starts leave each of these within +-2 points; the figures docs/campaign-design.md quotes
    for the five default-order nights of the committed rig (2026-11-27/28) are these lines' (``--pool``)."""
    scens = [scenarios(src) for src in sources]
    points = sorted({n.split("-", 1)[1] for sc in scens for n in sc if "-" in n}, key=lambda x: (len(x), x))
    out = [f"== pooled over {len(sources)} night(s)"]
    for point in points:
        groups: dict[tuple[int, int], list[float]] = {}  # (night, start) -> its window pairs' log ratios
        by_first: dict[str, list[float]] = defaultdict(list)
        costs: dict[str, list[float]] = defaultdict(list)
        for i, sc in enumerate(scens):
            a, b = _windows(sc.get(f"{arms[0]}-{point}", [])), _windows(sc.get(f"{arms[1]}-{point}", []))
            groups.update({(i, start): list(ws.values()) for start, ws in _ratios_by_start(a, b, metric).items()})
            for arm, d in gaps_by_first_arm(a, b, arms, metric).items():
                by_first[arm] += d
            for arm, d in after_own_gaps(sc, arms, point, metric).items():
                costs[arm] += d
        sd, df = pooled_sd(groups)
        spread = f"{sd:.2%} on {df} df" if df else "-"
        out.append(f"{point:>7} window pairs within a start ({metric} ratio): sd {spread}")
        out.append(f"{point:>7} first window vs later by the arm that went first: "
                   + "; ".join(f"{arm} first {_mean_se(by_first[arm])}" for arm in arms))
        out.append(f"{point:>7} after the other server's window vs after its own: "
                   + "; ".join(f"{arm} {_mean_se(costs[arm])}" for arm in arms))
        if all(len(costs[arm]) > 1 for arm in arms):
            first, second = -statistics.fmean(costs[arms[1]]), statistics.fmean(costs[arms[0]])
            out.append(f"{point:>7} predicted by those for 2 window pairs in the default warm-up order: "
                       f"{arms[0]} first {first:+.2f}, {arms[1]} first {second:+.2f}")
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--arms", default="p2p_on,p2p_off")
    ap.add_argument("--pool", action="store_true", help="then pool the nights' starts (the same design's nights)")
    ns = ap.parse_args(argv)
    a, b = ns.arms.split(",")
    for d in ns.run_dirs:
        if not (d / "scenarios").is_dir() and not d.is_file():
            print(f"{d}: not a campaign results directory (no scenarios/) nor a compact JSON file", file=sys.stderr)
            return 2
        report(d, (a, b))
    if ns.pool:
        print("\n".join(pooled(ns.run_dirs, (a, b))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
