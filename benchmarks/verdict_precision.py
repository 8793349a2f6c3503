"""``campaign.precision``: what adding starts until the verdict's interval is narrow enough buys, and what it costs.

Every campaign here is SIMULATED, with the committed chain's rules and spreads (``verdict_prior_committed.py``: the
nested model, the first arm fitted, the start prior from earlier nights of the same design, its guard). A night
plans ``starts`` and may add starts up to ``max_starts`` (10, the committed rig's), one look after each, each look
judged at its share of the point's alpha (``SequentialPlan.alpha_at``: the campaign's 1 % over its 2 points). Without
a precision the campaign stops at its first decided look; with ``precision: 2%`` it goes on while the decided
interval is wider than +-2 % of the on/off ratio. Reported per design and spread:

* how often the estimate's interval (at the point's whole alpha: 99 %, the level ``campaign.precision`` is held
  to, the same at every look) is within +-2 % at the planned starts, and at the look the campaign stops at;
* the mean starts and wall minutes a night takes (priced from night 4's timeline, as table 4d);
* at a true uplift equal to the threshold (0 %): how often the final verdict is wrong (a pass or a fail), with and
  without the precision. Each look is wrong with probability at most its alpha whatever made the campaign look
  again, so the union bound (0.5 % per point and kind) holds for any stopping rule; this shows it;
* how often the stopping look's 99 % estimate covers the true uplift: stopping on the interval's width, a function
  of the spread and not of the estimate, should leave it at 99 %.

Why the estimate's interval and not the verdict's: the verdict spends its alpha over the looks (0.4 % at the 8th of
10 starts, 0.05 % at each added one), so an added start's verdict interval is wider, not narrower. Held to that
interval, the precision was met on no more nights with starts added than without (c64 at the pooled spread: 12 %
either way, 500 nights), at two more starts a night.

Usage: python benchmarks/verdict_precision.py [--trials 4000] [--seed 1] [--precision 0.02]
Needs numpy and scipy (benchmarks only).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import verdict_prior_committed as vpc  # noqa: E402  (the committed chain's rules in numpy, checked there)
from verdict_prior import ALPHA, THR, pct, prior_np, rate  # noqa: E402

from pytest_p2p.stats import SequentialPlan  # noqa: E402

MAX_STARTS = 10  # the committed rig's max_starts
#: (planned starts, c16 pairs, c64 pairs): the committed design, and table 4d's candidate
DESIGNS = ((8, 2, 2), (7, 2, 3))
#: (point, window pair sd, start sd): the six real nights pooled, night 4's c64, c16 with a start component
SPREADS = (("c64", 0.033, 0.0), ("c64", 0.026, 0.0), ("c16", 0.0165, 0.0), ("c16", 0.0165, 0.01))


def night_looks(rng: np.random.Generator, t: int, planned: int, w: int, w_sd: float, s_sd: float, up: float,
                k: int) -> dict[int, dict[str, np.ndarray]]:
    """``{starts: decisions}`` at every look from ``planned`` to ``MAX_STARTS`` of ``t`` nights of one point, each
    night one draw of ``MAX_STARTS`` starts (a look sees its first ``starts``), after ``k`` nights of history of
    ``planned`` starts lending their prior (``k = 0``: none). Each look holds the verdict (``pass``, ``fail``,
    ``half``: at its share of alpha) and the estimate (``est``, ``est_half``: at the point's whole alpha, the level
    ``campaign.precision`` is held to)."""
    vpc.W = w
    vpc.set_starts(planned)
    var0 = d0 = None
    if k:
        hist = vpc.start_means(rng, t, s_sd, w_sd, 0.0, False, nights=k)[:, 0]  # (T, K, planned)
        var0, d0 = prior_np(hist.var(-1, ddof=1), planned - 1)
    vpc.set_starts(MAX_STARTS)
    night = vpc.start_means(rng, t, s_sd, w_sd, up, False)[:, 0]  # (T, MAX_STARTS)
    plan = SequentialPlan(alpha=ALPHA, min_pairs=planned, max_pairs=MAX_STARTS)
    looks = {}
    for b in range(planned, MAX_STARTS + 1):
        vpc.set_starts(b)
        verdict = vpc.decide_np(night[:, :b], var0, d0, THR, plan.alpha_at(b))
        estimate = vpc.decide_np(night[:, :b], var0, d0, THR, ALPHA)
        looks[b] = {**verdict, "est": vpc.fitted_np(night[:, :b])[0], "est_half": estimate["half"]}
    vpc.set_starts(vpc.B0)
    vpc.W = vpc.W0
    return looks


def stop(looks: dict[int, dict[str, np.ndarray]], precision: float | None) -> np.ndarray:
    """Per night, the look the campaign stops at (its starts): the first whose verdict is decided (and, with a
    precision, whose estimate is within it), else the last."""
    order = sorted(looks)
    t = len(next(iter(looks.values()))["half"])
    at = np.full(t, order[-1])
    done = np.zeros(t, bool)
    for b in order:
        d = looks[b]
        ok = (d["pass"] | d["fail"]) & (d["est_half"] <= precision if precision is not None else True)
        at = np.where(~done & ok, b, at)
        done |= ok
    return at


def pick(looks: dict[int, dict[str, np.ndarray]], at: np.ndarray, key: str) -> np.ndarray:
    return np.choose(np.searchsorted(sorted(looks), at), [looks[b][key] for b in sorted(looks)])


def minutes(planned: int, w16: int, w64: int, starts: np.ndarray) -> float:
    """Mean wall minutes of nights that ran ``starts`` starts of the design (night 4's timeline, as table 4d)."""
    one = vpc.CYCLE_S + (w16 - vpc.W0) * vpc.PAIR_S["c16"] + (w64 - vpc.W0) * vpc.PAIR_S["c64"]
    return float(np.mean(vpc.design_minutes(planned, w16, w64) + (starts - planned) * one / 60))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--precision", type=float, default=0.02, help="the target half-width (%(default)s)")
    a = ap.parse_args(argv)
    if not 0 < a.precision < 0.5:
        ap.error(f"--precision must be a fraction in (0, 0.5), got {a.precision}")
    started = time.time()
    rng = np.random.default_rng(a.seed)
    vpc.fidelity(rng, 100)
    print("command: python benchmarks/verdict_precision.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    print(f"\n{a.trials} nights a cell; looks from the planned starts to {MAX_STARTS}, each at its share of the "
          f"point's alpha ({ALPHA:.1%}); precision {a.precision:.1%} of the ratio at the verdict's own level; "
          "honest nights at +30 %, null nights at 0 % (= threshold); K: earlier nights lending their prior\n")
    print("| starts (max 10), pairs c16 / c64 | point | window sd | start sd | K | estimate within the precision: "
          "at the planned starts / at the stop, with it | mean starts: without / with | mean min: without / with | "
          "wrong verdicts at 0 %: without / with | 99 % estimate covers the truth at the stop, with it |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for planned, w16, w64 in DESIGNS:
        for point, w_sd, s_sd in SPREADS:
            w = w64 if point == "c64" else w16
            for k in (0, 10):
                honest = night_looks(rng, a.trials, planned, w, w_sd, s_sd, 0.30, k)
                at0, at1 = stop(honest, None), stop(honest, a.precision)
                half1 = pick(honest, at1, "est_half")
                covers = np.abs(pick(honest, at1, "est") - math.log1p(0.30)) <= half1
                null = night_looks(rng, a.trials, planned, w, w_sd, s_sd, THR, k)
                wrong = [max(rate(pick(null, z, "pass")), rate(pick(null, z, "fail")))
                         for z in (stop(null, None), stop(null, a.precision))]
                print(f"| {planned}, {w16} / {w64} | {point} | {w_sd:.2%} | {s_sd:.1%} | {k} | "
                      f"{pct(rate(honest[planned]['est_half'] <= a.precision))} / {pct(rate(half1 <= a.precision))} | "
                      f"{np.mean(at0):.2f} / {np.mean(at1):.2f} | "
                      f"{minutes(planned, w16, w64, at0):.1f} / {minutes(planned, w16, w64, at1):.1f} | "
                      f"{pct(wrong[0])} / {pct(wrong[1])} | {pct(rate(covers))} |", flush=True)
    print(f"\nelapsed {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
