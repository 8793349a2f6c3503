"""One error budget per check and per campaign, by simulation of known truth (issue 24).

A check fails when any of its sizes fails (``checks/test_probes.py``), and a campaign's uplift verdict is red when
any of its points fails. Judged at the rig's alpha each, ``k`` sizes or points raise a false failure up to ``k``
times as often as the rig asked for. This script measures that, and what splitting the alpha over them costs:

* **probe checks** (``probes.judge.judge_uplift``, the package's own function): two arms, ``--trials`` timed
  trials each (not paired: one process per arm), ``k`` decode sizes. The true uplift sits exactly on the rig's
  margin (5 %) at every size: the worst case for a false failure. Each size's trials are log-normal with the
  given CV, independent (what the check's Welch interval assumes); one row adds an effect of the arm's
  process shared by all its trials (which the interval does not cover, docs/checks.md). Power: the same at a
  true +10 % and +30 % (the real 8 KiB on NVLink).
* **restart-per-rep campaigns** (``residency: restart``, and probe campaigns: ``campaign.runner._add_pairs``):
  ``reps`` pairs, one server start per rep shared by every point of that rep (its effect ``start_sd``), window
  noise ``window_sd`` per point; each point decided by ``stats.decide_uplift`` (paired), true uplift 0 % against
  a 0 % threshold at every point.

Each cell runs ``--trials-per-cell`` (4000) simulated checks or campaigns; the Monte Carlo standard error at 1 %
is 0.16 %. Rates: ``fail`` = the check or campaign failed (any size or point), at the per-size alpha (the old
rule) and at ``alpha / k`` (the new one).

Usage: python benchmarks/verdict_family.py [--trials-per-cell 4000] [--seed 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_p2p.probes.allreduce import AllReduceResult, Row  # noqa: E402
from pytest_p2p.probes.judge import judge_uplift, overall, per_size  # noqa: E402
from pytest_p2p.stats import Outcome, decide_uplift  # noqa: E402

ALPHA = 0.01
MARGIN = 0.05
KiB = 1024
SIZES = (8 * KiB, 32 * KiB, 128 * KiB, 512 * KiB, 2048 * KiB, 8192 * KiB, 32768 * KiB)


def _arm(name: str, times: dict[int, list[float]]) -> AllReduceResult:
    """One arm's run as the probe records it: per size, its kept trials (the median as its time)."""
    rows = [dataclasses.replace(Row.from_time(size, statistics.median(trials), 2), trials_us=tuple(trials))
            for size, trials in times.items()]
    return AllReduceResult((0, 1), name, rows, True, [], None)


def probe_check(rng: random.Random, k: int, trials: int, cv: float, run_sd: float, true_uplift: float,
                split: bool) -> Outcome:
    """One simulated ``test_uplift``: both arms timed at ``k`` sizes; the check's outcome.

    ``cv``: each trial's own noise (what the check's interval covers). ``run_sd``: an effect of the arm's process
    shared by its trials at every size (clocks, NCCL's setup): the interval does not cover it
    (docs/checks.md), so those rows show what a run effect does, not the rule's error rate."""
    sizes = SIZES[:k]
    runs = {}
    for arm, base in (("p2p_on", 10.0), ("p2p_off", 10.0 * (1 + true_uplift))):
        shared = rng.gauss(0.0, run_sd)
        runs[arm] = _arm(arm, {size: [base * math.exp(shared + rng.gauss(0.0, cv)) for _ in range(trials)]
                               for size in sizes})
    alpha = ALPHA if split else ALPHA * k  # judge_uplift splits alpha over the sizes itself
    return overall(judge_uplift(runs["p2p_on"], runs["p2p_off"], sizes, MARGIN, alpha))


def restart_campaign(rng: random.Random, points: int, reps: int, start_sd: float, window_sd: float,
                     split: bool) -> bool:
    """One simulated restart-per-rep campaign at a true 0 % uplift: did any point's verdict fail?"""
    on: list[list[float]] = [[] for _ in range(points)]
    off: list[list[float]] = [[] for _ in range(points)]
    for _ in range(reps):
        s_on, s_off = rng.gauss(0.0, start_sd), rng.gauss(0.0, start_sd)  # each arm's server start this rep
        for p in range(points):
            on[p].append(1000.0 * math.exp(s_on + rng.gauss(0.0, window_sd)))
            off[p].append(1000.0 * math.exp(s_off + rng.gauss(0.0, window_sd)))
    alpha = ALPHA / points if split else ALPHA
    return any(decide_uplift(on[p], off[p], threshold=0.0, alpha=alpha).outcome is Outcome.FAIL
               for p in range(points))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials-per-cell", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--probe-trials", type=int, default=10, help="timed trials per size and arm (probe.trials)")
    args = ap.parse_args()
    n = args.trials_per_cell
    assert per_size(ALPHA, 4) == ALPHA / 4
    t0 = time.perf_counter()
    print(f"# verdict_family.py --trials-per-cell {n} --seed {args.seed}: alpha {ALPHA:g} per check / campaign; "
          f"MC standard error at 1 %: {100 * math.sqrt(0.01 * 0.99 / n):.2f} %")
    print("\n## probe test_uplift: k sizes, true uplift on the 5 % margin (false failure) and above it (power)")
    print("| sizes | trials/arm | trial CV | run effect sd | check fails, alpha per size (old) |"
          " check fails, alpha/k (new) | passes at +10 %: old / new | passes at +30 %: old / new |")
    print("|---|---|---|---|---|---|---|---|")
    for k, cv, run_sd in ((1, 0.03, 0.0), (4, 0.03, 0.0), (4, 0.08, 0.0), (7, 0.03, 0.0), (4, 0.03, 0.01)):
        rates = []
        for true_up in (MARGIN, 0.10, 0.30):
            for split in (False, True):
                rng = random.Random(hash((args.seed, k, cv, run_sd, true_up, split)) & 0xFFFFFFFF)
                want = Outcome.FAIL if true_up == MARGIN else Outcome.PASS
                hits = sum(probe_check(rng, k, args.probe_trials, cv, run_sd, true_up, split) is want for _ in range(n))
                rates.append(100 * hits / n)
        print(f"| {k} | {args.probe_trials} | {cv:.0%} | {run_sd:.0%} | {rates[0]:.2f} % | {rates[1]:.2f} % | "
              f"{rates[2]:.1f} / {rates[3]:.1f} % | {rates[4]:.1f} / {rates[5]:.1f} % |", flush=True)
    print("\n## restart-per-rep campaign: points share each rep's server starts; true 0 % against 0 %")
    print("| points | reps | start sd | window sd | campaign fails, alpha per point (old) |"
          " campaign fails, alpha/points (new) |")
    print("|---|---|---|---|---|---|")
    for points, reps, s_sd, w_sd in ((1, 4, 0.03, 0.01), (2, 4, 0.03, 0.01), (4, 4, 0.03, 0.01),
                                     (4, 8, 0.01, 0.03), (4, 8, 0.0, 0.03)):
        rates = []
        for split in (False, True):
            rng = random.Random(hash((args.seed, points, reps, s_sd, w_sd, split)) & 0xFFFFFFFF)
            rates.append(100 * sum(restart_campaign(rng, points, reps, s_sd, w_sd, split) for _ in range(n)) / n)
        print(f"| {points} | {reps} | {s_sd:.0%} | {w_sd:.0%} | {rates[0]:.2f} % | {rates[1]:.2f} % |", flush=True)
    print(f"\n# {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
