"""How often the nightly recipe accepts an honest night, at the night-to-night spread a cloud runner has.

Why: `--p2p-compare --p2p-save-baseline` accepts a run into the baseline on its own only when every primary
test is *unchanged* (a drop of twice the tolerance ruled out at 95 %) -- docs/baselines.md, "Safe acceptance".
On the committed 7B rig's chain (2x H200, each night a fresh machine, 2026-11-28) the absolute c64 throughput
moved 2.2-2.5 % from night to night while the on/off ratio moved 0.7 %: the two arms move together (correlation
0.96). Night 5 of that chain was inconclusive at c64 against 4 runs (98 % CI +-13 %) and waited for a person.
This benchmark says how often that happens to an honest night, how many accepted runs it takes before it stops
happening, and that a regressed night is still not accepted on the way.

Model, per night and point, on log throughput: a night effect shared by both arms (what a fresh machine
brings), an arm's own night effect (sized so the on/off ratio spreads as measured), and each window's noise
(16 windows per arm and point, as 8 starts x 2 window pairs give). The decisions are the package's own:
``decide_change`` per scenario (tolerance 3 %, the committed rig's), the uplift history per point on paired
window ratios (``uplift_tolerance`` 3 %), the spread prior across like tests from ``MODERATE_MIN_RUNS``
baseline runs on (as ``verdict.campaign_judge`` moderates them), ``family_wise`` (Holm) over the 6 primaries
at the campaign alpha 1 %, then ``verdict_of``. A night is accepted when all 6 read unchanged. The history
scan and the baseline health check are left out: they can only refuse more.

Usage: python benchmarks/acceptance_cloud.py [--trials 2000] [--seed 1] [--tolerance 0.03] [--ks 3,4,6,10,15]
Pure Python (the package only); ~1 min at 2000 trials on the 2-core box.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_p2p.stats import (  # noqa: E402
    MODERATE_MIN_REPS,
    MODERATE_MIN_RUNS,
    RunStats,
    decide_change,
    family_wise,
    spread_prior,
)
from pytest_p2p.stats.baseline import run_spread  # noqa: E402
from pytest_p2p.verdict.compare import UNCHANGED, verdict_of  # noqa: E402

ALPHA = 0.01  # campaign family-wise (baseline.alpha)
TOL = 0.03  # the committed rig's baseline.tolerance (--tolerance changes it) and its uplift_tolerance (kept)
UPLIFT_TOL = 0.03
REPS = 16  # windows per arm and point: 8 starts x 2 window pairs
ARMS = ("p2p_on", "p2p_off")


@dataclass(frozen=True)
class Noise:
    """Spreads on the log scale (fractions): per point ``(arm's night sd, on/off ratio night sd, window cv)``."""

    name: str
    points: dict[str, tuple[float, float, float]]

    def night(self, rng: random.Random) -> dict[tuple[str, str], float]:
        out = {}
        for p, (arm_sd, ratio_sd, _) in self.points.items():
            own = ratio_sd / math.sqrt(2.0)
            shared = math.sqrt(max(0.0, arm_sd ** 2 - own ** 2))
            s = rng.gauss(0.0, shared)
            for a in ARMS:
                out[(a, p)] = s + rng.gauss(0.0, own)
        return out


# The committed chain's five nights (docs/gpu-runs.md, twentieth session): arm sd of the nightly means less the
# windows' share, the ratio's sd, and a window's cv (16 windows a mean).
CLOUD = Noise("cloud runner (the 7B chain on 2x H200, a fresh machine a night)",
              {"c16": (0.0125, 0.0045, 0.020), "c64": (0.0230, 0.0070, 0.027)})
# A runner that keeps its machine: docs/baselines.md's run SD 1.1 % (tau 0.8 %, cv 1.5 % x 4).
SAME = Noise("self-hosted runner (run sd ~1 %)", {"c16": (0.008, 0.004, 0.015), "c64": (0.008, 0.004, 0.015)})

TRUTHS = {
    "honest": {},
    "c64 p2p_on -10 %": {("p2p_on", "c64"): math.log(0.90)},
    "c64 both arms -5 %": {("p2p_on", "c64"): math.log(0.95), ("p2p_off", "c64"): math.log(0.95)},
    "c64 p2p_on -5 %": {("p2p_on", "c64"): math.log(0.95)},
}


def run_of(level: float, cv: float, rng: random.Random) -> list[float]:
    return [math.exp(level + rng.gauss(0.0, cv)) for _ in range(REPS)]


Runs = dict[tuple[str, str], list[float]]  # (arm, point) -> the windows' output tok/s of one night


def night_runs(noise: Noise, rng: random.Random, shift: dict[tuple[str, str], float]) -> Runs:
    eff = noise.night(rng)
    return {(a, p): run_of(eff[(a, p)] + shift.get((a, p), 0.0), noise.points[p][2], rng)
            for p in noise.points for a in ARMS}


def judge(history: list[Runs], tonight: Runs, tol: float = TOL) -> str:
    """``accepted`` / ``regression`` / ``waits`` for tonight against ``history``, as the recipe decides."""
    inputs = []  # (group, baseline stats, current stats)
    for (a, p), vals in sorted(tonight.items()):
        inputs.append(("scenario", [RunStats.of(h[(a, p)]) for h in history], RunStats.of(vals)))
    for p in sorted({p for _, p in tonight}):
        ratio = [x / y for x, y in zip(tonight[("p2p_on", p)], tonight[("p2p_off", p)], strict=True)]
        base = [RunStats.of([x / y for x, y in zip(h[("p2p_on", p)], h[("p2p_off", p)], strict=True)])
                for h in history]
        inputs.append(("uplift", base, RunStats.of(ratio)))
    priors = {}
    for group in ("scenario", "uplift"):
        spreads = [run_spread(b) for g, b, _ in inputs if g == group and len(b) >= MODERATE_MIN_RUNS]
        priors[group] = spread_prior(spreads) if spreads and REPS >= MODERATE_MIN_REPS else None
    tols = [tol if g == "scenario" else UPLIFT_TOL for g, _, _ in inputs]
    decisions = [decide_change(b, c, tolerance=t, alpha=ALPHA, prior=priors[g] if len(b) >= MODERATE_MIN_RUNS
                               else None) for (g, b, c), t in zip(inputs, tols, strict=True)]
    verdicts = [verdict_of(d, True, t) for d, t in zip(family_wise(decisions, ALPHA), tols, strict=True)]
    if "regression" in verdicts:
        return "regression"
    return "accepted" if all(v == UNCHANGED for v in verdicts) else "waits"


def cell(noise: Noise, k: int, shift: dict[tuple[str, str], float], trials: int, rng: random.Random,
         tol: float = TOL) -> dict[str, float]:
    counts = {"accepted": 0, "regression": 0, "waits": 0}
    for _ in range(trials):
        history = [night_runs(noise, rng, {}) for _ in range(k)]
        counts[judge(history, night_runs(noise, rng, shift), tol)] += 1
    return {key: 100.0 * v / trials for key, v in counts.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=TOL,
                    help=f"the scenarios' baseline.tolerance as a fraction ({TOL:g}); "
                         f"the uplift history keeps {UPLIFT_TOL:g}")
    ap.add_argument("--ks", default="3,4,6,10,15", help="accepted baseline runs before tonight (comma-separated)")
    args = ap.parse_args(argv)
    if args.trials < 1:
        ap.error(f"--trials must be >= 1, got {args.trials}")
    try:
        ks = [int(x) for x in args.ks.split(",")]
    except ValueError:
        ap.error(f"--ks must be integers separated by commas, got {args.ks!r}")
    if any(k < 3 for k in ks):
        ap.error(f"--ks: the recipe accepts on its own below 3 runs (bootstrap), got {args.ks!r}")
    if not 0 < args.tolerance < 0.5:
        ap.error(f"--tolerance must be a fraction in (0, 0.5), got {args.tolerance}")
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    print(f"# python benchmarks/acceptance_cloud.py --trials {args.trials} --seed {args.seed} --ks {args.ks}"
          f" --tolerance {args.tolerance:g}")
    print(f"# tolerance {args.tolerance:.0%} (uplift history {UPLIFT_TOL:.0%}), campaign alpha {ALPHA:.0%}, "
          f"{REPS} windows per arm and point, 6 primaries")
    for noise in (CLOUD, SAME):
        print(f"\n## {noise.name}: " + ", ".join(
            f"{p} arm night sd {a:.2%}, ratio {r:.2%}, window cv {c:.1%}" for p, (a, r, c) in noise.points.items()))
        print("| tonight | K | accepted | waits for a person | regression (red) |")
        print("|---|---:|---:|---:|---:|")
        for truth, shift in TRUTHS.items():
            for k in ks:
                got = cell(noise, k, shift, args.trials, rng, args.tolerance)
                print(f"| {truth} | {k} | {got['accepted']:.1f} % | {got['waits']:.1f} % | {got['regression']:.1f} % |",
                      flush=True)
    print(f"\n# {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
