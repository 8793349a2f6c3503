"""The nested uplift verdict under known truth: windows within server starts (issue 24, item 2).

Every campaign here is SIMULATED.  A campaign measures 2 points (c16, c64) on 2 arms (p2p_on,
p2p_off); each arm's server is started ``B`` times ("starts", one block each), and within a block
``W`` window pairs per point alternate between the two resident servers, ABBA over windows.

Noise model, on log values of the metric (tok/s):

* a start effect per (arm, start), SD ``start_sd / sqrt(2)`` per arm (so the paired log ratio
  carries ``start_sd``), half of its variance shared by the two points (a server start that
  came up slow is slow at both concurrencies);
* window noise per (arm, point, start, window), SD ``window_sd / sqrt(2)`` per arm;
* optionally a linear drift of ``-drift`` per window in time order (ABBA: the pairs of window
  ``w`` run on-off for even ``w`` and off-on for odd ``w``, so an even ``W`` cancels it;
  ``AB`` runs on-off always);
* optionally one bad start: every window of p2p_on in start 2 is 20 % low (a server that came
  up on a bad clock), at both points.  With ``screen_starts`` the campaign re-runs a start
  flagged at either point as a fresh start at the end.

Each point is judged by ``stats.decide_nested`` (threshold ``THR``, one-sided alpha 1 % per
wrong verdict).  The rules are re-implemented in numpy for speed; ``fidelity()`` first checks
them against the package on random inputs and aborts on any disagreement.

Usage: python benchmarks/verdict_nested.py [--trials 4000] [--seed 1] [--quick]
Needs numpy and scipy (benchmarks only; the plugin needs neither).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats as sst

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from verdict_power import outliers_np  # noqa: E402  (the package's outlier screen in numpy, fidelity-checked)

from pytest_p2p.stats import (  # noqa: E402
    SequentialPlan,
    components,
    decide_nested,
    expected_halfwidth,
    plan_for,
    screen_starts,
)
from pytest_p2p.stats.decide import SCREEN_FLOOR, SCREEN_Z  # noqa: E402

ALPHA = 0.01  # per wrong verdict, per point
THR = 0.0  # uplift threshold (min_uplift 0 %)
A, P = 2, 2  # arms (on, off), points (c16, c64)
BAD = math.log(0.8)
SHARED = 0.5  # share of a start effect's variance common to the points


# ----------------------------------------------------------------------------- the rules (numpy)

def decide_np(m: np.ndarray, thr: float, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """m (..., B) block means of the log ratios -> (pass, fail, half-width, p) as ``decide_nested``."""
    b = m.shape[-1]
    mu = m.mean(-1)
    if b < 2:
        z = np.zeros(mu.shape, bool)
        return z, z, np.full(mu.shape, np.inf), np.full(mu.shape, np.nan)
    se = m.std(-1, ddof=1) / math.sqrt(b)
    half = float(sst.t.ppf(1 - alpha, b - 1)) * se
    t = math.log1p(thr)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = sst.t.cdf((mu - t) / se, b - 1)
    return mu - half >= t, mu + half < t, half, p


def components_np(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """r (..., B, W) balanced log ratios -> (start_sd, window_sd) as ``components``."""
    w = r.shape[-1]
    msw = r.var(-1, ddof=1).mean(-1)
    msb = w * r.mean(-1).var(-1, ddof=1)
    return np.sqrt(np.maximum(0.0, (msb - msw) / w)), np.sqrt(msw)


def screen_starts_np(m: np.ndarray) -> np.ndarray:
    """m (..., B) block means -> flags (..., B), as ``screen_starts``."""
    return outliers_np(m, SCREEN_Z, SCREEN_FLOOR)


# ----------------------------------------------------------------------------- campaigns

def positions(b: int, w: int, schedule: str) -> np.ndarray:
    """(A, P, B, W) time index of each window: block after block, pairs (w, p) in order, ABBA over w."""
    pos = np.zeros((A, P, b, w))
    for blk in range(b):
        for wi in range(w):
            for p in range(P):
                k = blk * P * w + wi * P + p
                first = 0 if schedule == "ab" or wi % 2 == 0 else 1
                pos[first, p, blk, wi], pos[1 - first, p, blk, wi] = 2 * k, 2 * k + 1
    return pos


def draw(rng: np.random.Generator, t: int, b: int, w: int, start_sd: float, window_sd: float, up: float,
         drift: float = 0.0, schedule: str = "abba", bad: bool = False, first_block: int = 0) -> np.ndarray:
    """(T, P, B, W) paired log ratios of ``t`` campaigns (blocks numbered from ``first_block`` for drift)."""
    s = start_sd / math.sqrt(2)
    u = (math.sqrt(SHARED) * rng.normal(0, s, (t, A, 1, b, 1))
         + math.sqrt(1 - SHARED) * rng.normal(0, s, (t, A, P, b, 1)))
    x = u + rng.normal(0, window_sd / math.sqrt(2), (t, A, P, b, w))
    x[:, 0] += math.log1p(up)
    if drift:
        x -= drift * (positions(first_block + b, w, schedule)[None, :, :, first_block:, :])
    if bad:
        x[:, 0, :, min(1, b - 1)] += BAD
    return x[:, 0] - x[:, 1]


def rerun_flagged(rng: np.random.Generator, r: np.ndarray, start_sd: float, window_sd: float, up: float,
                  drift: float) -> tuple[np.ndarray, np.ndarray]:
    """A start flagged at either point is re-run once as a fresh start (at the end of the schedule)."""
    b, w = r.shape[-2], r.shape[-1]
    flag = screen_starts_np(r.mean(-1)).any(1)  # (T, B)
    if not flag.any():
        return r, flag
    fresh = np.stack([draw(rng, r.shape[0], 1, w, start_sd, window_sd, up, drift, first_block=b + i)[:, :, 0]
                      for i in range(b)], 2)  # (T, P, B, W): start i's re-run runs as block b + i
    return np.where(flag[:, None, :, None], fresh, r), flag


def judge(r: np.ndarray, alpha: float | None = None) -> dict[str, np.ndarray]:
    ps, fl, half, _ = decide_np(r.mean(-1), THR, ALPHA if alpha is None else alpha)  # (T, P)
    return {"pass": ps, "fail": fl, "half": half}


def rate(x: np.ndarray) -> float:
    return float(x.mean())


def pct(x: float) -> str:
    return f"{100 * x:.2f}"


# ----------------------------------------------------------------------------- fidelity

def fidelity(rng: np.random.Generator, trials: int = 400) -> None:
    bad = 0
    for _ in range(trials):
        b, w = int(rng.integers(1, 7)), int(rng.integers(1, 9))
        r = rng.normal(rng.normal(0, 0.03), rng.uniform(0.001, 0.03), (b, 1)) + rng.normal(
            0, rng.uniform(0.002, 0.03), (b, w))
        if rng.uniform() < 0.3 and b >= 3:
            r[int(rng.integers(b))] += rng.choice([BAD, -BAD / 2])
        on = np.exp(r) * rng.uniform(50, 9000, (b, 1))
        off = on / np.exp(r)
        blocks = [list(zip(on[i].tolist(), off[i].tolist(), strict=True)) for i in range(b)]
        thr = float(rng.choice([0.0, 0.02, -0.01]))
        alpha = float(rng.choice([0.01, 0.05, 0.005]))
        d = decide_nested(blocks, threshold=thr, alpha=alpha)
        ps, fl, half, p = decide_np(r.mean(-1), thr, alpha)
        want = "pass" if ps else ("fail" if fl else "inconclusive")
        bad += int(want != d.outcome.value)
        if b >= 2:
            bad += int(abs(math.log1p(d.upper) - math.log1p(d.lower) - 2 * float(half)) > 1e-9)
            bad += int(abs(float(p) - (d.p_value or 0.0)) > 1e-7)
            c = components(blocks)
            if w >= 2:
                s_np, w_np = components_np(r)
                bad += int(abs(float(s_np) - (c.start_sd or 0.0)) > 1e-9 or abs(float(w_np) - (c.window_sd or 0.0))
                           > 1e-9)
        bad += int(screen_starts(blocks) != list(np.flatnonzero(screen_starts_np(r.mean(-1)))))
    if bad:
        raise SystemExit(f"fidelity: {bad} disagreements between the numpy rules and pytest_p2p.stats")
    print(f"fidelity: numpy rules agree with stats.decide_nested / components / screen_starts on {trials} random "
          "campaigns (1-6 starts x 1-8 windows)")


# ----------------------------------------------------------------------------- tables

def pf(d: dict[str, np.ndarray]) -> str:
    """'pass / fail' rates (%) of a judged cell."""
    return f"{pct(rate(d['pass']))} / {pct(rate(d['fail']))}"


def screened(rng: np.random.Generator, t: int, b: int, w: int, s_sd: float, w_sd: float,
             up: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], float]:
    """One bad start: (judged without the screen, judged after re-running flagged starts, re-run rate)."""
    rb = draw(rng, t, b, w, s_sd, w_sd, up, bad=True)
    rr, flag = rerun_flagged(rng, rb, s_sd, w_sd, up, 0.0)
    return judge(rb), judge(rr), rate(flag.any(1))


def table_grid(rng: np.random.Generator, t: int, quick: bool) -> dict[str, float]:
    bs, ws = ((3, 6), (4,)) if quick else ((3, 4, 6), (4, 8))
    print(f"\n## 1. Nested campaigns: 2 points x 2 arms, threshold {THR:+.0%}, alpha {ALPHA:.2%} per wrong verdict, "
          f"{t} campaigns a cell")
    print("Rates in %.  'pass / fail' at a true 0 % are both wrong verdicts (each must stay <= 1 % per decision; "
          "both points pooled); family = a pass (or a fail) at either point of the campaign; drift = 0.5 %/window "
          "in time order; bad start = p2p_on 20 % low in one start, judged as it is or after stats.screen_starts "
          "re-ran the flagged start; re-run = campaigns that re-ran a start (with the bad start / clean); "
          "half-width = mean 98 % CI half-width (log units ~ %) simulated / stats.expected_halfwidth\n")
    print("| starts | windows | start sd | window sd | half-width sim / formula | true 0: pass / fail "
          "| family: pass / fail | drift ABBA: pass / fail | drift AB: pass / fail | +5 %: pass | +30 %: pass "
          "| bad start, true 0, no screen / screened: pass / fail | bad start, +5 %: pass no screen / screened "
          "| re-run: bad / clean |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst = {"each": 0.0, "family": 0.0, "drift": 0.0, "screened": 0.0, "clean_rerun": 0.0}
    for b in bs:
        for w in ws:
            for s_sd in (0.0, 0.005, 0.02):
                for w_sd in (0.005, 0.02):
                    null = judge(draw(rng, t, b, w, s_sd, w_sd, 0.0))
                    fam_p, fam_f = rate(null["pass"].any(1)), rate(null["fail"].any(1))
                    dr = judge(draw(rng, t, b, w, s_sd, w_sd, 0.0, drift=0.005))
                    dab = judge(draw(rng, t, b, w, s_sd, w_sd, 0.0, drift=0.005, schedule="ab"))
                    up5 = judge(draw(rng, t, b, w, s_sd, w_sd, 0.05))
                    up30 = judge(draw(rng, t, b, w, s_sd, w_sd, 0.30))
                    bad0, scr0, rerun0 = screened(rng, t, b, w, s_sd, w_sd, 0.0)
                    bad5, scr5, _ = screened(rng, t, b, w, s_sd, w_sd, 0.05)
                    _, clean_flag = rerun_flagged(rng, draw(rng, t, b, w, s_sd, w_sd, 0.0), s_sd, w_sd, 0.0, 0.0)
                    worst["each"] = max(worst["each"], rate(null["pass"]), rate(null["fail"]))
                    worst["family"] = max(worst["family"], fam_p, fam_f)
                    worst["drift"] = max(worst["drift"], rate(dr["pass"]), rate(dr["fail"]))
                    worst["screened"] = max(worst["screened"], rate(scr0["pass"]), rate(scr0["fail"]))
                    worst["clean_rerun"] = max(worst["clean_rerun"], rate(clean_flag.any(1)))
                    print(f"| {b} | {w} | {s_sd:.1%} | {w_sd:.1%} | {100 * rate(null['half']):.2f} / "
                          f"{100 * expected_halfwidth(s_sd, w_sd, b, w, ALPHA):.2f} | {pf(null)} | "
                          f"{pct(fam_p)} / {pct(fam_f)} | {pf(dr)} | {pf(dab)} | {pct(rate(up5['pass']))} | "
                          f"{pct(rate(up30['pass']))} | {pf(bad0)} -> {pf(scr0)} | {pct(rate(bad5['pass']))} -> "
                          f"{pct(rate(scr5['pass']))} | {pct(rerun0)} / {pct(rate(clean_flag.any(1)))} |", flush=True)
    print(f"\nworst wrong-verdict rate per decision and kind at true 0 %: {pct(worst['each'])} % (drift, ABBA: "
          f"{pct(worst['drift'])} %; a bad start, screened: {pct(worst['screened'])} %); worst family over the 2 "
          f"points, per kind: {pct(worst['family'])} %; worst clean campaigns re-running a start: "
          f"{pct(worst['clean_rerun'])} %")
    return worst


def table_adaptive(rng: np.random.Generator, t: int) -> None:
    print(f"\n## 2. Adding starts while undecided: SequentialPlan(alpha 1 %, 3, 6) with starts as the unit, {t} "
          "campaigns a cell")
    print("a point's verdict is its first decided look; starts are added while either point is undecided; "
          "wrong = pass or fail at true 0 % (per decision)\n")
    print("| windows | start sd | window sd | true 0: pass / fail | +2 %: pass | +5 %: pass | mean starts (+5 %) |")
    print("|---|---|---|---|---|---|---|")
    plan = SequentialPlan(ALPHA, 3, 6)
    for w in (4, 8):
        for s_sd, w_sd in ((0.005, 0.02), (0.02, 0.005), (0.02, 0.02)):
            cells = []
            starts = 0.0
            for up in (0.0, 0.02, 0.05):
                r = draw(rng, t, 6, w, s_sd, w_sd, up)
                ps = np.zeros((t, P), bool)
                fl = np.zeros((t, P), bool)
                used = np.full(t, 6)
                for k in range(3, 7):
                    a, f, _, _ = decide_np(r[:, :, :k].mean(-1), THR, plan.alpha_at(k))
                    open_ = ~(ps | fl)
                    ps |= a & open_
                    fl |= f & open_
                    done = (ps | fl).all(1) & (used == 6)
                    used[done] = k
                    if (ps | fl).all():
                        break
                if up == 0.0:
                    cells.append(f"{pct(rate(ps))} / {pct(rate(fl))}")
                else:
                    cells.append(pct(rate(ps)))
                starts = float(used.mean())
            print(f"| {w} | {s_sd:.1%} | {w_sd:.1%} | " + " | ".join(cells) + f" | {starts:.2f} |", flush=True)


def table_old_vs_new(rng: np.random.Generator, t: int) -> None:
    hour = 3600.0
    print(f"\n## 3. One hour of campaign: the OLD design (restart per rep, one window per start) vs resident servers, "
          f"{t} campaigns a cell")
    print("costs: one server start S s, one window w s per arm and point.  OLD pair = 2 x (S + 2 w) (each arm's slot "
          "restarts its server); NEW start = 2 S + 2 x 2 W w (both servers, then W window pairs at each point).  "
          "half-width = mean 98 % CI half-width (%); pass = decided pass at true +2 % (threshold 0 %, alpha 1 %); "
          "wrong = either wrong verdict at true 0 %; measured = share of wall time under load; 'planner' = "
          "stats.plan_for for a 2 % half-width within 12 starts\n")
    print("| S / w (s) | start sd | window sd | design | starts x windows | measured | half-width | +2 %: pass "
          "| true 0: wrong |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s_cost, w_cost in ((60.0, 20.0), (100.0, 15.0)):
        for s_sd, w_sd in ((0.005, 0.02), (0.02, 0.02), (0.02, 0.005)):
            plan = plan_for(s_sd, w_sd, 0.02, ALPHA, 2 * s_cost, 2 * w_cost, 12, points=P)
            designs = [("OLD", int(hour // (2 * (s_cost + P * w_cost))), 1)]
            for w in (4, 8):
                designs.append((f"NEW W={w}", int(hour // (2 * s_cost + 2 * P * w * w_cost)), w))
            designs.append(("planner", plan.starts, plan.windows))
            for name, b, w in designs:
                if name == "OLD":
                    secs, meas = b * 2 * (s_cost + P * w_cost), P * w_cost / (s_cost + P * w_cost)
                else:
                    secs = b * (2 * s_cost + 2 * P * w * w_cost)
                    meas = 2 * P * w * w_cost / (2 * s_cost + 2 * P * w * w_cost)
                null = judge(draw(rng, t, b, w, s_sd, w_sd, 0.0))
                up2 = judge(draw(rng, t, b, w, s_sd, w_sd, 0.02))
                label = f"{name} ({secs / 60:.0f} min)"
                print(f"| {s_cost:.0f} / {w_cost:.0f} | {s_sd:.1%} | {w_sd:.1%} | {label} | {b} x {w} | {meas:.0%} | "
                      f"{100 * rate(null['half']):.2f} | {pct(rate(up2['pass']))} | "
                      f"{pct(rate(null['pass'] | null['fail']))} |", flush=True)


def main() -> None:
    global ALPHA
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer cells and 500 trials (smoke)")
    ap.add_argument("--alpha", type=float, default=ALPHA,
                    help="one-sided alpha per point (the campaign splits 1 %% over its points: 0.005 for 2)")
    args = ap.parse_args()
    ALPHA = args.alpha
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    fidelity(rng, 100 if args.quick else 400)
    t = 500 if args.quick else args.trials
    print(f"command: python benchmarks/verdict_nested.py --trials {args.trials} --seed {args.seed}"
          f"{' --quick' if args.quick else ''}{f' --alpha {ALPHA:g}' if ALPHA != 0.01 else ''}")
    table_grid(rng, t, args.quick)
    table_adaptive(rng, t)
    table_old_vs_new(rng, t)
    print(f"\nelapsed {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
