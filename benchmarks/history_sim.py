"""Nightly histories of known truth: creep, steps, regressed acceptances, through the package's decisions.

Issue 29.  Every history here is SIMULATED.  A night is one campaign run; its value for one
(pair, metric, point) is the run mean on the log scale: a run effect with SD ``tau`` plus
the mean of ``reps`` reps with SD ``cv`` each (defaults 0.8 % and 1.5 % x 4 reps: a
run-to-run spread of 1.1 %, the median measured in the issue).  The history before the
nights under test is ``--stable`` unchanged nights (default 20).

What is measured (each cell ``--trials`` histories, >= 1000):

1. creep -0.3 %/night: the night the history check (``stats.changepoint.scan`` of the stored
   runs, adverse, at the per-look ``HISTORY_ALPHA``) first fails; share flagged by night 12;
2. unchanged 30-night histories: share with any night flagged (every night is a look);
3. a regressed (-8 %) run accepted into a 10-run baseline: share flagged by the baseline's
   health check (``verdict.history.health`` rules);
4. the same under the safe acceptance recipe: share of nights on which a -8 % step is
   auto-accepted (never, by construction of the rule: the run must pass first).

The scan is re-implemented in numpy (one matrix product per night) for speed;
``fidelity()`` first checks it against ``stats.changepoint.scan`` on random histories and
aborts on any disagreement.  ``--table`` regenerates ``stats/changepoint_table.py``
(the scan's null tail, by simulation).

Usage: python benchmarks/history_sim.py [--trials 2000] [--seed 1] [--table] [--noise TAU,CV ...]
Needs numpy and scipy (benchmarks only; the plugin needs neither).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_p2p.stats import RunStats, decide_change  # noqa: E402
from pytest_p2p.stats.changepoint import MAX_RUNS, MIN_RUNS_SCAN, TAIL, TAIL_P, contrasts, scan  # noqa: E402
from pytest_p2p.verdict.history import HISTORY_ALPHA, Night, health  # noqa: E402

TABLE = Path(__file__).resolve().parent.parent / "pytest_p2p" / "stats" / "changepoint_table.py"


def null_tail(n: int, sims: int, rng: np.random.Generator, chunk: int = 50000) -> list[float]:
    """The values w with P(W >= w) = TAIL_P under the null (independent normal run means), ``n`` runs."""
    u = np.array([c.u for c in contrasts(n)])
    ws = []
    for _ in range(max(1, sims // chunk)):
        y = rng.standard_normal((n, chunk))
        y -= y.mean(0)
        ws.append((-(u @ y) / np.sqrt((y * y).sum(0))).max(0))
    w = np.concatenate(ws)
    return [float(np.quantile(w, 1 - p)) for p in TAIL_P]


def write_table(sims: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for n in range(MIN_RUNS_SCAN, MAX_RUNS + 1):
        rows.append(f"    {n}: ({', '.join(f'{w:.4f}' for w in null_tail(n, sims, rng))}),")
        print(rows[-1], flush=True)
    TABLE.write_text(
        '"""The change-point scan\'s null tail (generated: python benchmarks/history_sim.py --table; do not edit).\n\n'
        f"{sims} simulated histories of independent normal run means per length, seed {seed}.\n"
        '"""\n\n'
        "TAIL: dict[int, tuple[float, ...]] = {\n" + "\n".join(rows) + "\n}\n", encoding="utf-8")


# ----------------------------------------------------------------------------- the scan (numpy)

_U: dict[int, np.ndarray] = {}


def scan_p_np(y: np.ndarray) -> np.ndarray:
    """y (T, n) histories (log, up = better) -> the adverse scan's p-value per history, as ``scan``."""
    y = y[:, -MAX_RUNS:]
    n = y.shape[1]
    if n < MIN_RUNS_SCAN:
        return np.ones(y.shape[0])
    u = _U.setdefault(n, np.array([c.u for c in contrasts(n)]))
    yc = y - y.mean(1, keepdims=True)
    w = (-(yc @ u.T) / np.sqrt((yc * yc).sum(1))[:, None]).max(1)
    row = np.array(TAIL[n])
    p = np.exp(np.interp(w, row[::-1], np.log(np.array(TAIL_P))[::-1]))
    p[w >= row[0]] = TAIL_P[0]
    p[w <= row[-1]] = 1.0
    return p


def fidelity(rng: np.random.Generator, cases: int = 400) -> None:
    """The numpy scan against ``stats.changepoint.scan`` on random histories; abort on any disagreement."""
    bad = 0
    for _ in range(cases):
        n = int(rng.integers(MIN_RUNS_SCAN, MAX_RUNS + 6))
        y = rng.normal(0, 0.011, n)
        if rng.random() < 0.5:
            y[int(rng.integers(1, n)):] -= rng.uniform(0, 0.05)
        if rng.random() < 0.3:
            y -= 0.003 * np.maximum(0, np.arange(n) - int(rng.integers(0, n)))
        got = scan(list(y))
        want = float(scan_p_np(y[None, :])[0])
        p = got.p_value if got is not None else 1.0
        if abs(p - want) > 1e-9 * max(1.0, p) or ((p < HISTORY_ALPHA) != (want < HISTORY_ALPHA)):
            bad += 1
            print(f"fidelity: n={n} package p={p} numpy p={want}", file=sys.stderr)
    if bad:
        raise SystemExit(f"fidelity check FAILED in {bad} of {cases} histories")
    print(f"fidelity: numpy scan == stats.changepoint.scan on {cases} random histories (p and decision)")


# ----------------------------------------------------------------------------- histories of known truth

def nightly(rng: np.random.Generator, trials: int, nights: int, tau: float, cv: float, reps: int) -> np.ndarray:
    """(T, nights) run log means of an unchanged rig: run effect + the mean of ``reps`` reps."""
    return rng.normal(0, tau, (trials, nights)) + rng.normal(0, cv / np.sqrt(reps), (trials, nights))


def first_flag(y: np.ndarray, start: int, alpha: float) -> np.ndarray:
    """Night (1-based, counted from ``start``) each history is first flagged by the nightly scan; 0: never."""
    t = y.shape[0]
    first = np.zeros(t, int)
    for night in range(start, y.shape[1]):
        hit = (scan_p_np(y[:, :night + 1]) < alpha) & (first == 0)
        first[hit] = night - start + 1
    return first


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


NOISES = ((0.008, 0.015), (0.012, 0.03))  # (tau, cv): the median run SD 1.1 %, and a noisier rig


def history_table(rng: np.random.Generator, trials: int, alpha: float,
                  noises: tuple[tuple[float, float], ...] = NOISES) -> None:
    print(f"\n### Nightly history scan (per-look alpha {alpha:g}), {trials} histories a cell")
    print("| noise (run-to-run tau, within cv x reps) | prior stable nights | unchanged: any night of 30 flagged "
          "| creep -0.3 %/night: flagged by night 12 | median night | -8 % step: flagged by its 3rd night |")
    print("|---|---:|---:|---:|---:|---:|")
    for tau, cv in noises:
        for stable in (0, 20):
            base = nightly(rng, trials, stable + 30, tau, cv, 4)
            start = max(stable, MIN_RUNS_SCAN - 1)
            ff0 = first_flag(base, start, alpha)
            creep = base.copy()
            creep[:, stable:] += np.log1p(-0.003) * np.arange(1, 31)
            cstart = stable if stable else start
            ffc = first_flag(creep[:, :cstart + 30], cstart, alpha)
            step = base.copy()
            s0 = max(stable, 10)
            step[:, s0:] += np.log1p(-0.08)
            ffs = first_flag(step[:, :s0 + 3], s0, alpha)
            hit = ffc[(ffc > 0)]
            med = f"{np.median(hit):.0f}" if hit.size else "-"
            noise = f"tau {tau * 100:.1f} %, cv {cv * 100:.1f} % x 4 (run SD {np.hypot(tau, cv / 2) * 100:.1f} %)"
            print(f"| {noise} | {stable} | {pct(np.mean(ff0 > 0))} | "
                  f"{pct(np.mean((ffc > 0) & (ffc <= 12)))} | {med} | {pct(np.mean((ffs > 0) & (ffs <= 3)))} |",
                  flush=True)


def _runs(rng: np.random.Generator, levels: np.ndarray, tau: float, cv: float, reps: int) -> list[RunStats]:
    out = []
    for lv in levels:
        x = lv + rng.normal(0, tau) + rng.normal(0, cv, reps)
        out.append(RunStats.of(list(np.exp(x))))
    return out


def health_table(rng: np.random.Generator, trials: int, tau: float = 0.008, cv: float = 0.015) -> None:
    """Baseline health (``verdict.history.health``, the package's own code) and what a comparison reads."""
    print(f"\n### Baseline health and accepted regressions, {trials} trials a cell (run SD "
          f"{np.hypot(tau, cv / 2) * 100:.1f} %, 4 reps, 20 earlier nights, a 10-run accepted baseline)")
    print("| accepted baseline | health flagged | unchanged run reads improvement | ... without the health warning "
          "| tonight's -8 % run auto-accepted |")
    print("|---|---:|---:|---:|---:|")
    for label, bad in (("clean", 0), ("one -8 % run in it", 1), ("all 10 runs -8 %", 10)):
        flagged = improve = silent = auto = 0
        for _ in range(trials):
            levels = np.zeros(30)
            pos = rng.choice(np.arange(20, 30), size=bad, replace=False) if bad else np.array([], int)
            levels[pos] = np.log1p(-0.08)
            runs = _runs(rng, levels, tau, cv, 4)
            nights = [Night(f"r{i}", f"2026-01-{i + 1:02d}", 1.0, r.log_mean, i >= 20, True, {})
                      for i, r in enumerate(runs)]
            h = health(nights, depth=10)
            flagged += not h.ok
            base = runs[20:]
            cur = _runs(rng, np.zeros(1), tau, cv, 4)[0]
            d = decide_change(base, cur, tolerance=0.03, alpha=0.01)
            imp = d.outcome.value == "pass" and d.lower > 0.03
            improve += imp
            silent += imp and h.ok
            reg = _runs(rng, np.full(1, np.log1p(-0.08)), tau, cv, 4)[0]
            # the safe recipe (plugin.verdict): accepted only when it passes AND the baseline is healthy
            auto += decide_change(base, reg, tolerance=0.03, alpha=0.01).outcome.value == "pass" and h.ok
        print(f"| {label} | {pct(flagged / trials)} | {pct(improve / trials)} | {pct(silent / trials)} | "
              f"{pct(auto / trials)} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--table", action="store_true", help="regenerate stats/changepoint_table.py")
    ap.add_argument("--table-sims", type=int, default=1_000_000)
    ap.add_argument("--noise", action="append", metavar="TAU,CV",
                    help="the scan table's noise instead of the defaults, repeatable: run-to-run sd and a rep's cv "
                         "as fractions (4 reps a run), e.g. 0.022,0.014 for the 7B chain's c64 on fresh cloud machines")
    args = ap.parse_args(argv)
    noises = NOISES
    if args.noise:
        try:
            noises = tuple((float(a), float(b)) for a, b in (x.split(",") for x in args.noise))
        except ValueError:
            ap.error(f"--noise takes TAU,CV (two fractions), got {args.noise!r}")
        if any(not (0 < a < 0.5 and 0 < b < 0.5) for a, b in noises):
            ap.error(f"--noise: TAU and CV must be fractions in (0, 0.5), got {args.noise!r}")
    if args.table:
        t0 = time.time()
        write_table(args.table_sims, args.seed)
        print(f"wrote {TABLE} in {time.time() - t0:.0f} s")
        return 0
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    fidelity(rng)
    history_table(rng, args.trials, HISTORY_ALPHA, noises)
    if not args.noise:
        health_table(rng, args.trials)
    extra = "".join(f" --noise {a:g},{b:g}" for a, b in noises) if args.noise else ""
    print(f"\n(python benchmarks/history_sim.py --trials {args.trials} --seed {args.seed}{extra}: "
          f"{time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
