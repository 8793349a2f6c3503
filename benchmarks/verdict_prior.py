"""The nested uplift verdict with a start spread learned from earlier nights (issue 24, item 2).

Every campaign here is SIMULATED.  A nightly rig runs one campaign design every night: 2 points
(c16, c64), 2 arms, ``B`` server starts of ``W`` window pairs per point (the noise model of
``benchmarks/verdict_nested.py``: a start effect per arm and start, half of its variance shared by
the points, window noise per window).  Before tonight, ``K`` earlier nights of ``BH`` starts x ``W``
windows measured the spread of a start mean at each point; ``stats.start_prior`` turns them into a
:class:`StartPrior` (pooled, or moderated when the nights disagree) and tonight's
``stats.decide_nested(prior=)`` borrows it unless the guard's F test refuses it.

Cells (each ``--trials`` campaigns):

* K in 3, 10, 30 earlier nights; start sd 0, 1, 2 %; window sd 1.5, 3.5 % (paired log ratio);
* history: ``same`` (every night and tonight share one spread); ``varies`` (each night's, and
  tonight's, noise scaled by sqrt(NU / chi2_NU), a scaled inverse chi-square around the common
  value, NU = 6); ``2x`` / ``4x`` (misspecified: tonight's start sd 2x / 4x the history's; at start
  sd 0 that is the same as ``same``);
* truth: the decision boundary (uplift = threshold = 0 %) at both points, and a -10 % drop at both.

Each point is judged at the campaign's alpha split over its points (1 % / 2, Bonferroni, one-sided per
wrong verdict), as ``campaign/blocks.py`` does.  Per cell: the wrong-verdict rate per campaign and kind
(a pass at either point, a fail at either point, at the boundary; a pass at -10 %), the power (fail at
-10 %, per point) with and without the prior, how often the guard refused the prior, and the wrong
verdicts per campaign of deciding *one* start on the prior alone (what the package refuses to do).
Then the expected half-width and the time to +-2 % with 2, 3, 4 starts (start 130 s, both arms'
servers launched at once; a window pair 26 s per point).

The rules are re-implemented in numpy for speed; ``fidelity()`` first checks them against
``stats.start_prior`` and ``stats.decide_nested(prior=)`` on random inputs and aborts on any
disagreement.

Usage: python benchmarks/verdict_prior.py [--trials 4000] [--seed 1] [--quick]
Needs numpy and scipy (benchmarks only; the plugin needs neither).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import special as ssp
from scipy import stats as sst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verdict_nested import draw  # noqa: E402  (the nested noise model, shared with the nested benchmark)
from verdict_power import _trigamma_inv  # noqa: E402  (Smyth's Newton iteration, vectorised)

from pytest_p2p.stats import Decision, decide_nested, expected_halfwidth, plan_for, start_prior  # noqa: E402
from pytest_p2p.stats.nested import GUARD_LEVEL, MIN_PRIOR_DF, MIN_PRIOR_NIGHTS  # noqa: E402

CAMPAIGN_ALPHA = 0.01
P = 2  # points
ALPHA = CAMPAIGN_ALPHA / P  # per point and kind of wrong verdict
THR = 0.0
BH = 3  # starts of each earlier night
W = 8  # window pairs per start (history and tonight)
GUARD = GUARD_LEVEL  # the guard's level (--guard explores others; the package's is GUARD_LEVEL)
NU = 6  # df of the scaled inverse chi-square the night-to-night spread varies by
START_S, WINDOW_S = 130.0, 26.0  # one start (both arms at once), one window pair at one point


# ----------------------------------------------------------------------------- the rules (numpy)

def prior_np(s2: np.ndarray, d: float) -> tuple[np.ndarray, np.ndarray]:
    """s2 (..., K) nights' variances of start means, d df each -> (prior var, prior df) as ``start_prior``."""
    k = s2.shape[-1]
    df = k * d
    pooled = s2.mean(-1)
    e = np.log(s2) - ssp.digamma(d / 2) + math.log(d / 2)
    excess = e.var(-1, ddof=1) - float(ssp.polygamma(1, d / 2))
    cap = (k - 1) * df / k
    d0 = np.full(pooled.shape, cap)
    pos = excess > 0
    d0[pos] = np.minimum(2 * _trigamma_inv(excess[pos]), cap)
    s02 = np.exp(e.mean(-1) + ssp.digamma(d0 / 2) - np.log(d0 / 2))
    mod = d0 < cap
    return np.where(mod, s02, pooled), np.where(mod, d0, float(df))


def decide_np(m: np.ndarray, var0: np.ndarray | None, d0: np.ndarray | None, thr: float,
              alpha: float) -> dict[str, np.ndarray]:
    """m (..., B) start means; prior (...) -> pass, fail, half-width, refused, as ``decide_nested(prior=)``."""
    b = m.shape[-1]
    mu = m.mean(-1)
    s2 = m.var(-1, ddof=1)
    df = np.full(mu.shape, float(b - 1))
    v = s2
    refused = np.zeros(mu.shape, bool)
    if var0 is not None and d0 is not None:
        p = sst.f.sf(s2 / var0, b - 1, d0)
        refused = p < GUARD
        use = ~refused
        v = np.where(use, (d0 * var0 + (b - 1) * s2) / (d0 + b - 1), s2)
        df = np.where(use, d0 + b - 1, df)
    half = sst.t.ppf(1 - alpha, df) * np.sqrt(v / b)
    t = math.log1p(thr)
    return {"pass": mu - half >= t, "fail": mu + half < t, "half": half, "refused": refused}


def one_start_np(m: np.ndarray, var0: np.ndarray, d0: np.ndarray, thr: float, alpha: float) -> dict[str, np.ndarray]:
    """One start judged on the prior alone (what the package refuses): t(d0) with the prior's variance."""
    half = sst.t.ppf(1 - alpha, d0) * np.sqrt(var0)
    t = math.log1p(thr)
    return {"pass": m[..., 0] - half >= t, "fail": m[..., 0] + half < t}


# ----------------------------------------------------------------------------- fidelity

def _blocks(means: np.ndarray, rng: np.random.Generator, w: int) -> list[list[tuple[float, float]]]:
    """Blocks of ``w`` window pairs whose log ratios average to ``means`` exactly."""
    out = []
    for m in means:
        e = rng.normal(0, 0.02, w)
        r = m + e - e.mean()
        off = rng.uniform(100, 9000, w)
        out.append(list(zip((off * np.exp(r)).tolist(), off.tolist(), strict=True)))
    return out


def disagreements(d: Decision, r: dict[str, np.ndarray]) -> int:
    """How many ways the package's decision ``d`` and the numpy rule's ``r`` (one campaign) differ: the outcome,
    the interval's width, and whether the prior was refused (0: they agree)."""
    want = "pass" if r["pass"] else ("fail" if r["fail"] else "inconclusive")
    return (int(want != d.outcome.value)
            + int(abs(math.log1p(d.upper) - math.log1p(d.lower) - 2 * float(r["half"])) > 1e-8)
            + int(bool(r["refused"]) != ("not borrowed" in d.reason)))


def fidelity(rng: np.random.Generator, trials: int = 300) -> None:
    bad = 0
    for _ in range(trials):
        k = int(rng.integers(MIN_PRIOR_NIGHTS, 12))
        bh, w = int(rng.integers(2, 5)), int(rng.integers(2, 6))
        scale = rng.uniform(0.005, 0.03) * np.sqrt(NU / rng.chisquare(NU, k)) ** rng.choice([0.0, 1.0, 2.0])
        night_means = rng.normal(0, 1, (k, bh)) * scale[:, None]
        got = start_prior([_blocks(nm, rng, w) for nm in night_means])
        s2 = night_means.var(-1, ddof=1)
        if k * (bh - 1) < MIN_PRIOR_DF:
            bad += int(got is not None)
            continue
        var0, d0 = prior_np(s2, bh - 1)
        if got is None or abs(got.var / float(var0) - 1) > 1e-6 or abs(got.df / float(d0) - 1) > 1e-6:
            bad += 1
            continue
        b = int(rng.integers(2, 5))
        tonight = rng.normal(rng.normal(0, 0.02), float(scale.mean()) * rng.choice([1.0, 4.0]), b)
        thr = float(rng.choice([0.0, 0.01]))
        alpha = float(rng.choice([0.005, 0.01]))
        d = decide_nested(_blocks(tonight, rng, w), threshold=thr, alpha=alpha, prior=got)
        bad += disagreements(d, decide_np(tonight, var0, d0, thr, alpha))
    if bad:
        raise SystemExit(f"fidelity: {bad} disagreements between the numpy rules and pytest_p2p.stats")
    print(f"fidelity: numpy rules agree with stats.start_prior / decide_nested(prior=) on {trials} random histories "
          f"(3-11 nights of 2-4 starts, tonight 2-4 starts, tonight's spread 1x or 4x)")


# ----------------------------------------------------------------------------- campaigns

def history(rng: np.random.Generator, t: int, k: int, v: float, varies: bool) -> tuple[np.ndarray, np.ndarray]:
    """Priors (T, P) from ``k`` nights of ``BH`` starts whose start means have variance ``v`` (scaled per night)."""
    s2 = v * rng.chisquare(BH - 1, (t, P, k)) / (BH - 1)
    if varies:
        s2 = s2 * NU / rng.chisquare(NU, (t, P, k))
    return prior_np(s2, BH - 1)


def tonight(rng: np.random.Generator, t: int, b: int, s_sd: float, w_sd: float, up: float,
            varies: bool) -> np.ndarray:
    """(T, P, B) start means of tonight's campaigns."""
    r = draw(rng, t, b, W, s_sd, w_sd, 0.0).mean(-1)
    if varies:
        r = r * np.sqrt(NU / rng.chisquare(NU, t))[:, None, None]
    return r + math.log1p(up)


def rate(x: np.ndarray) -> float:
    return float(np.mean(x))


def pct(x: float) -> str:
    return f"{100 * x:.2f}"


KINDS = ("same", "varies", "2x", "4x")


def cell(rng: np.random.Generator, t: int, k: int, b: int, s_sd: float, w_sd: float, kind: str) -> dict[str, float]:
    v = s_sd ** 2 + w_sd ** 2 / W
    var0, d0 = history(rng, t, k, v, kind == "varies")
    tonight_sd = s_sd * {"2x": 2.0, "4x": 4.0}.get(kind, 1.0)
    varies = kind == "varies"
    null = tonight(rng, t, b, tonight_sd, w_sd, THR, varies)
    drop = tonight(rng, t, b, tonight_sd, w_sd, -0.10, varies)
    n, dr = decide_np(null, var0, d0, THR, ALPHA), decide_np(drop, var0, d0, THR, ALPHA)
    own = decide_np(drop, None, None, THR, ALPHA)
    one = one_start_np(null[..., :1], var0, d0, THR, ALPHA)
    return {"pass": rate(n["pass"].any(1)), "fail": rate(n["fail"].any(1)), "drop_pass": rate(dr["pass"].any(1)),
            "power": rate(dr["fail"]), "power_own": rate(own["fail"]), "refused": rate(n["refused"]),
            "one": max(rate(one["pass"].any(1)), rate(one["fail"].any(1))), "d0": float(np.median(d0))}


def table_errors(rng: np.random.Generator, t: int, quick: bool) -> dict[str, float]:
    ks, bs = ((3, 10), (2, 3)) if quick else ((3, 10, 30), (2, 3))
    print(f"\n## 1. Wrong verdicts and power with a start prior: 2 points, alpha {CAMPAIGN_ALPHA:.0%} per campaign "
          f"({ALPHA:.2%} per point), threshold {THR:+.0%}, history of K nights x {BH} starts x {W} window pairs, "
          f"tonight B starts x {W}, {t} campaigns a cell")
    print("Rates in %.  boundary: true uplift = threshold at both points; wrong = a pass (or a fail) at either point "
          "of the campaign, each kind must be <= 1 %; -10 %: pass = wrong, power = fail per point with the prior / "
          "tonight's own df only; refused = points whose prior the guard refused (boundary); 1 start on the prior "
          "alone = a wrong verdict (either kind, either point) if one start were decided on the prior (the package "
          f"refuses); d0 = median prior df; guard: one-sided F test at {GUARD_LEVEL:g}\n")
    print("| K | B | start sd | window sd | history | d0 | boundary: pass / fail | -10 %: pass | power prior / own "
          "| refused | 1 start on the prior alone: wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst: dict[str, float] = {}
    groups: dict[tuple[str, int, int], list[dict[str, float]]] = {}
    for k in ks:
        for b in bs:
            for s_sd in (0.0, 0.01, 0.02):
                for w_sd in (0.015, 0.035):
                    for kind in KINDS:
                        c = cell(rng, t, k, b, s_sd, w_sd, kind)
                        if s_sd > 0 or kind in ("same", "varies"):  # 2x / 4x of a start sd of 0 is "same"
                            groups.setdefault((kind, k, b), []).append(c)
                        key = kind if s_sd > 0 or kind in ("same", "varies") else "same"
                        worst[key] = max(worst.get(key, 0.0), c["pass"], c["fail"], c["drop_pass"])
                        worst[f"one {key}"] = max(worst.get(f"one {key}", 0.0), c["one"])
                        print(f"| {k} | {b} | {s_sd:.1%} | {w_sd:.1%} | {kind} | {c['d0']:.3g} | {pct(c['pass'])} / "
                              f"{pct(c['fail'])} | {pct(c['drop_pass'])} | {pct(c['power'])} / {pct(c['power_own'])} "
                              f"| {pct(c['refused'])} | {pct(c['one'])} |", flush=True)
    print("\nworst wrong-verdict rate per campaign and kind, by history: "
          + "; ".join(f"{key} {pct(v)} %" for key, v in worst.items() if not key.startswith("one"))
          + ".  One start on the prior alone: "
          + "; ".join(f"{key[4:]} {pct(v)} %" for key, v in worst.items() if key.startswith("one")))
    summary(groups)
    return worst


def summary(groups: dict[tuple[str, int, int], list[dict[str, float]]]) -> None:
    """Table 1 pooled over the start and window sds (docs/performance.md prints this one)."""
    print("\n## 1b. Table 1 pooled over start sd and window sd (2x / 4x without start sd 0): mean over cells, %\n")
    print("| history | K | B | cells | wrong per kind: mean pass / fail | worst cell | -10 %: pass (worst) "
          "| power with prior / own (mean) | refused (mean) | 1 start on the prior alone: wrong (mean / worst) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (kind, k, b), cs in sorted(groups.items(), key=lambda g: (KINDS.index(g[0][0]), g[0][1], g[0][2])):
        def mean(key: str, cs: list[dict[str, float]] = cs) -> float:
            return sum(c[key] for c in cs) / len(cs)
        print(f"| {kind} | {k} | {b} | {len(cs)} | {pct(mean('pass'))} / {pct(mean('fail'))} | "
              f"{pct(max(max(c['pass'], c['fail']) for c in cs))} | {pct(max(c['drop_pass'] for c in cs))} | "
              f"{100 * mean('power'):.1f} / {100 * mean('power_own'):.1f} | {100 * mean('refused'):.1f} | "
              f"{pct(mean('one'))} / {pct(max(c['one'] for c in cs))} |")


def table_time(rng: np.random.Generator, t: int) -> None:
    print(f"\n## 2. Expected 99 % CI half-width (alpha {ALPHA:.2%} per point) and time to +-2 %, start {START_S:.0f} s "
          f"(both arms at once), window pair {WINDOW_S:.0f} s per point, 2 points; history of K nights x {BH} starts x "
          f"W window pairs at the same W; {t} campaigns a cell for the simulated half-width ('sim', W = {W}, same "
          "spread, median: a night whose prior the guard refused has a far wider interval, and the formula assumes the "
          "prior borrowed)\n")
    print(f"| start sd | window sd | K | half-width W={W}: 2 / 3 / 4 starts (formula; sim) | time at W={W}: 2 / 3 / 4 "
          "starts | +-2 % with the prior: plan | +-2 % without: plan |")
    print("|---|---|---|---|---|---|---|")
    for s_sd in (0.0, 0.01, 0.02):
        for w_sd in (0.015, 0.035):
            v = s_sd ** 2 + w_sd ** 2 / W
            for k in (0, 3, 10, 30):
                dfp = k * (BH - 1)
                hw = []
                for b in (2, 3, 4):
                    f = expected_halfwidth(s_sd, w_sd, b, W, ALPHA, prior_df=dfp)
                    if k:
                        var0, d0 = history(rng, t, k, v, False)
                        sim = float(np.median(decide_np(tonight(rng, t, b, s_sd, w_sd, 0.0, False), var0, d0, THR,
                                                        ALPHA)["half"]))
                    else:
                        sim = float(np.median(decide_np(tonight(rng, t, b, s_sd, w_sd, 0.0, False), None, None, THR,
                                                      ALPHA)["half"]))
                    hw.append(f"{100 * f:.2f} ({100 * sim:.2f})")
                secs = [b * (START_S + P * W * WINDOW_S) / 60 for b in (2, 3, 4)]
                best = _best_with_prior(s_sd, w_sd, dfp) if k else "-"
                plain = plan_for(s_sd, w_sd, 0.02, ALPHA, START_S, WINDOW_S, 40, points=P)
                print(f"| {s_sd:.1%} | {w_sd:.1%} | {k or 'none'} | {' / '.join(hw)} | "
                      f"{' / '.join(f'{x:.0f} min' for x in secs)} | {best} | {plain.starts} x {plain.windows}, "
                      f"{plain.seconds / 60:.0f} min |", flush=True)


def _best_with_prior(s_sd: float, w_sd: float, dfp: float) -> str:
    """The cheapest (starts, windows) reaching +-2 % when the history ran the same windows (prior df ``dfp``)."""
    best: tuple[float, int, int] | None = None
    for w in range(2, 65):
        for b in range(2, 41):
            if expected_halfwidth(s_sd, w_sd, b, w, ALPHA, prior_df=dfp) <= 0.02:
                cand = (b * (START_S + P * w * WINDOW_S), b, w)
                best = cand if best is None or cand < best else best
                break
    if best is None:
        return "out of reach"
    return f"{best[1]} x {best[2]}, {best[0] / 60:.0f} min"


def table_guard(rng: np.random.Generator, t: int) -> None:
    global GUARD
    keep = GUARD
    k, s_sd, w_sd = 10, 0.01, 0.035
    print(f"\n## 3. The guard's level: what it buys and costs (K = {k}, start sd {s_sd:.0%}, window sd {w_sd:.1%}, "
          f"{t} campaigns a cell)")
    print("wrong = the worse kind per campaign at the boundary (%); power = fail per point at -10 % (%)\n")
    print("| guard level | B | same: wrong / power | 2x: wrong / power | 4x: wrong / power | same: refused |")
    print("|---|---|---|---|---|---|")
    for g in (0.01, 0.05, 0.1, 0.2, 0.5):
        GUARD = g
        for b in (2, 3):
            cs = {kind: cell(rng, t, k, b, s_sd, w_sd, kind) for kind in ("same", "2x", "4x")}
            print(f"| {g:g}{' (package)' if g == GUARD_LEVEL else ''} | {b} | "
                  + " | ".join(f"{pct(max(c['pass'], c['fail']))} / {pct(c['power'])}" for c in cs.values())
                  + f" | {pct(cs['same']['refused'])} |", flush=True)
    GUARD = keep


def main() -> None:
    global GUARD, BH
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer cells and 500 trials (smoke)")
    ap.add_argument("--history-starts", type=int, default=BH, help="starts of each earlier night (%(default)s)")
    ap.add_argument("--guard", type=float, default=GUARD_LEVEL,
                    help="the guard's one-sided level in the numpy rules (the package uses %(default)s)")
    args = ap.parse_args()
    GUARD, BH = args.guard, args.history_starts
    started = time.time()
    rng = np.random.default_rng(args.seed)
    if GUARD == GUARD_LEVEL:  # the package's rule: check the numpy copy against it first
        fidelity(rng, 60 if args.quick else 300)
    print("command: python benchmarks/verdict_prior.py " + " ".join(sys.argv[1:]))
    trials = 500 if args.quick else args.trials
    for table in (lambda: table_errors(rng, trials, args.quick), lambda: table_time(rng, trials),
                  lambda: table_guard(rng, trials)):
        table()
    print(f"\nelapsed {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
