"""Detection power and false-alarm rate of the baseline verdict, by simulation.

Every campaign here is SIMULATED: a baseline of K accepted runs (3 reps each) and one
current run of n reps, drawn from a noise model, with a known injected effect (0 = nothing
changed, -10 % = a throughput drop). The verdict code under test is the plugin's own
``pytest_p2p.verdict.compare.judge``; nothing is re-implemented here.

Noise models (per-rep, multiplicative, on top of a run-to-run component tau):
  normal CV 2/3/5/8 %  — the seed report's +-2-8 % per rep
  heavy-t3 CV 5 %      — Student-t(3) reps scaled to the same SD (rare big excursions)
  contaminated CV 3 %  — 5 % of reps are 15 % slow (a background job, a throttled rep)

Rules: ``noise`` (the default: t interval + tolerance, see compare.py), ``fixed``
(tolerance on the means only, what a plain threshold would do) and ``sequential``
(``noise`` at half alpha per look; when the first look at 3 reps is inconclusive, add
reps up to the suggested count, at most 12, and look once more).

Usage: python benchmarks/verdict_power.py [--sims N] [--seed S] [--tau 0.01]
Runs in well under 2 minutes on 2 cores with the default --sims.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_p2p.verdict.compare import INCONCLUSIVE, REGRESSION, Sample, judge  # noqa: E402
from pytest_p2p.verdict.config import BaselineConfig, Tolerance  # noqa: E402

NOISES = {"normal 2%": ("normal", 0.02), "normal 3%": ("normal", 0.03), "normal 5%": ("normal", 0.05),
          "normal 8%": ("normal", 0.08), "heavy-t3 5%": ("t3", 0.05), "contam. 3%": ("contam", 0.03)}


def draw(rng: np.random.Generator, kind: str, cv: float, tau: float, runs: int, reps: int) -> np.ndarray:
    """runs x reps multiplicative factors around 1."""
    run_eff = rng.normal(0.0, tau, size=(runs, 1))
    if kind == "normal":
        eps = rng.normal(0.0, cv, size=(runs, reps))
    elif kind == "t3":
        eps = cv * rng.standard_t(3, size=(runs, reps)) / math.sqrt(3.0)
    else:
        eps = rng.normal(0.0, cv, size=(runs, reps)) + np.where(rng.random((runs, reps)) < 0.05, math.log(0.85), 0)
    return np.exp(run_eff + eps)


def one(rng: np.random.Generator, noise: str, k: int, n: int, effect: float, rule: str, tau: float,
        cfg: BaselineConfig) -> tuple[str, int]:
    kind, cv = NOISES[noise]
    base = [Sample.of(row) for row in (100.0 * draw(rng, kind, cv, tau, k, 3)).tolist()]
    cur_all = 100.0 * (1.0 + effect) * draw(rng, kind, cv, tau, 1, 12)[0]
    tol = Tolerance(0.05)
    if rule == "fixed":
        return judge(base, Sample.of(cur_all[:n]), "higher", tol, replace(cfg, rule="fixed")).verdict, n
    if rule == "noise":
        return judge(base, Sample.of(cur_all[:n]), "higher", tol, cfg).verdict, n
    half = replace(cfg, alpha=cfg.alpha / 2)
    j = judge(base, Sample.of(cur_all[:n]), "higher", tol, half)
    if j.verdict != INCONCLUSIVE or not j.needed_reps or j.needed_reps <= n:
        return j.verdict, n
    m = min(12, j.needed_reps)
    return judge(base, Sample.of(cur_all[:m]), "higher", tol, half).verdict, m


def cell(noise: str, k: int, n: int, rule: str, sims: int, seed: int, tau: float) -> dict[str, float]:
    cfg = BaselineConfig()
    rng = np.random.default_rng(seed)
    out: dict[str, float] = {}
    for effect, tag in ((0.0, "null"), (-0.10, "drop")):
        verdicts = [one(rng, noise, k, n, effect, rule, tau, cfg) for _ in range(sims)]
        out[f"{tag}_reg"] = sum(v == REGRESSION for v, _ in verdicts) / sims
        out[f"{tag}_inc"] = sum(v == INCONCLUSIVE for v, _ in verdicts) / sims
        out[f"{tag}_reps"] = sum(r for _, r in verdicts) / sims
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=1000, help="simulated campaigns per cell and effect")
    ap.add_argument("--seed", type=int, default=20260616)
    ap.add_argument("--tau", type=float, default=0.01, help="run-to-run SD of the log mean (default 1 %%)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    print(f"SIMULATED campaigns: {args.sims} per cell and effect, tau {args.tau:.1%}, tolerance 5 %, "
          f"alpha {BaselineConfig().alpha} one-sided, baseline runs of 3 reps\n")
    print("| rule | noise | K | n | false alarm (no change) | inconclusive (no change) | detect -10 % "
          "| inconclusive (-10 %) | mean reps (-10 %) |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst_fa: dict[str, float] = {}
    grid = [("noise", nz, k, n) for nz in NOISES for k in (3, 10, 20) for n in (3, 5, 10)]
    grid += [("fixed", nz, 10, 3) for nz in NOISES] + [("sequential", nz, 10, 3) for nz in NOISES]
    for i, (rule, noise, k, n) in enumerate(grid, start=1):
        r = cell(noise, k, n, rule, args.sims, args.seed + i, args.tau)
        worst_fa[rule] = max(worst_fa.get(rule, 0.0), r["null_reg"])
        print(f"| {rule} | {noise} | {k} | {n} | {r['null_reg']:.1%} | {r['null_inc']:.1%} | {r['drop_reg']:.1%} "
              f"| {r['drop_inc']:.1%} | {r['drop_reps']:.1f} |")
    print()
    for rule, fa in worst_fa.items():
        print(f"worst false-alarm rate, rule {rule}: {fa:.1%}")
    print(f"elapsed {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
