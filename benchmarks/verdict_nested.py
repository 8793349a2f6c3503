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
* optionally starts made at once (table 4, ``campaign.starts_at_once: k``): a launch starts ``k``
  servers per arm together, each its own start, so ``B`` starts = ``L`` launches x ``k``; a launch
  effect N(0, ``launch_sd``) on the paired log ratio is shared by the ``k`` starts of the launch
  (both points, every window), which the t interval on the ``B`` start means (df ``B - 1``) does
  not know about.
* table 5: the same with the launch guard (``launch_guard_np``, as ``stats.launch_check``): a one-way ANOVA F
  test of the start means with the launch as the factor; where it fires (p < gamma) the point is judged on the
  L launch means (df ``L - 1``) instead of the B start means.

* table 7 (``--only position``): p2p_on slower in its point's first and last window of a start, under the
  campaign's own window order (``campaign.schedule.order``), with 4-6 starts of 2 and 4 window pairs.

* table 8 (``--only fit``): the first-arm fit (``stats.sequence_fit``, ``decide_nested(sequences=)``): the plain
  start means against the fit (order-balanced mean, spread within orders, ``B - 2`` df) and against choosing the
  fit by its F test, with no order effect, table 7's ends effect, and p2p_on climbing after its start.

* table 6 (``--only screens``): the campaign's in-run window screens (``campaign.adaptive.screen_windows_start``:
  a window pair off against its start, or an arm's window off against that arm's windows at the point over every
  start so far, is measured again once on the same server), with and without a cold first window.

Each point is judged by ``stats.decide_nested`` (threshold ``THR``, one-sided alpha 1 % per
wrong verdict).  The rules are re-implemented in numpy for speed; ``fidelity()`` first checks
them against the package on random inputs and aborts on any disagreement.

Usage: python benchmarks/verdict_nested.py [--trials 4000] [--seed 1] [--quick]
           [--only {grid,adaptive,old_vs_new,launch,guard,screens,position,fit}]
``--only launch`` runs tables 4 and 5 (table 5 after table 4 on the same rng, as a full run does);
``--only guard`` runs table 5 alone (same code, other random numbers: the rng has not drawn table 4's).
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

from pytest_p2p.campaign.schedule import first_arm, order  # noqa: E402
from pytest_p2p.stats import (  # noqa: E402
    SequentialPlan,
    components,
    decide_nested,
    expected_halfwidth,
    fits_sequences,
    plan_for,
    screen_starts,
    sequence_fit,
)
from pytest_p2p.stats.decide import SCREEN_FLOOR, SCREEN_Z  # noqa: E402
from pytest_p2p.stats.nested import MIN_SEQUENCE_DF  # noqa: E402

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


def launch_guard_np(m: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The launch guard's F test: m (..., S) start means in launch order, L = S / k launches of k starts.

    -> (F, p, launch means (..., L)).  One-way ANOVA with the launch as the factor (balanced):
    MS_between = k * sum_l (M_l - mean(M))^2 / (L - 1), MS_within = sum_l sum_s (m_s - M_l)^2 / (S - L),
    F = MS_between / MS_within on (L - 1, S - L) df, p = P(F' >= F).  MS_within = 0: p = 0 where
    MS_between > 0 (F = inf), else p = 1 (F = 0).  Needs L >= 2 and k >= 2.
    """
    s = m.shape[-1]
    if k < 2 or s % k or s // k < 2:
        raise ValueError(f"the launch guard needs >= 2 whole launches of >= 2 starts, got {s} starts, k = {k}")
    n_l = s // k
    g = m.reshape(*m.shape[:-1], n_l, k)
    lm = g.mean(-1)
    msb = k * ((lm - lm.mean(-1, keepdims=True)) ** 2).sum(-1) / (n_l - 1)
    msw = ((g - lm[..., None]) ** 2).sum((-2, -1)) / (s - n_l)
    pos = msw > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(pos, msb / np.where(pos, msw, 1.0), np.where(msb > 0, np.inf, 0.0))
    p = np.where(pos, sst.f.sf(f, n_l - 1, s - n_l), np.where(msb > 0, 0.0, 1.0))
    return f, p, lm


def decide_guarded_np(m: np.ndarray, k: int, thr: float, alpha: float,
                      gamma: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """m (..., S) start means in launch order, launches of k -> (pass, fail, half-width, fired), per point.

    ``gamma`` None (or k = 1: every start its own launch) is no guard: ``decide_np`` on the S start means,
    df S - 1.  Else where ``launch_guard_np``'s p < gamma the point is judged by ``decide_np`` on its L
    launch means (df L - 1), elsewhere on its S start means.
    """
    ps, fl, half, _ = decide_np(m, thr, alpha)
    if gamma is None or k == 1:
        return ps, fl, half, np.zeros(ps.shape, bool)
    _, p, lm = launch_guard_np(m, k)
    fired = p < gamma
    ps_l, fl_l, half_l, _ = decide_np(lm, thr, alpha)
    return np.where(fired, ps_l, ps), np.where(fired, fl_l, fl), np.where(fired, half_l, half), fired


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


def start_effects(rng: np.random.Generator, t: int, b: int, start_sd: float) -> np.ndarray:
    """(T, A, P, B, 1) start effects: SD ``start_sd / sqrt(2)`` per arm, half the variance shared by the points."""
    s = start_sd / math.sqrt(2)
    return (math.sqrt(SHARED) * rng.normal(0, s, (t, A, 1, b, 1))
            + math.sqrt(1 - SHARED) * rng.normal(0, s, (t, A, P, b, 1)))


def draw(rng: np.random.Generator, t: int, b: int, w: int, start_sd: float, window_sd: float, up: float,
         drift: float = 0.0, schedule: str = "abba", bad: bool = False, first_block: int = 0,
         launch: int = 1, launch_sd: float = 0.0) -> np.ndarray:
    """(T, P, B, W) paired log ratios of ``t`` campaigns (blocks numbered from ``first_block`` for drift).

    ``launch`` = k starts made at once: blocks 0..k-1 are launch 0, k..2k-1 launch 1, ...  The launch
    effect goes on p2p_on's log values only, one value per launch, so the paired log ratio carries
    exactly ``launch_sd``, shared by both points, every window and the k starts of the launch (an
    arm-symmetric split would give the same ratio).  It is drawn only when ``launch_sd > 0``, so the
    other tables draw the same numbers from the rng as before it existed.
    """
    if launch < 1 or b % launch:
        raise ValueError(f"{b} starts are not whole launches of {launch}")
    if drift and launch > 1:
        raise ValueError("drift follows the sequential time order; starts made at once interleave it differently")
    x = start_effects(rng, t, b, start_sd) + rng.normal(0, window_sd / math.sqrt(2), (t, A, P, b, w))
    if launch_sd > 0:
        c = rng.normal(0, launch_sd, (t, b // launch, 1))  # (T, L, 1)
        x[:, 0] += np.repeat(c, launch, axis=1)[:, None]  # (T, 1, B, 1): the k starts of a launch share it
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


def judge_guarded(r: np.ndarray, k: int, gamma: float | None) -> dict[str, np.ndarray]:
    """``judge`` with the launch guard at level ``gamma`` (None: no guard); r (T, P, B, W), launches of k."""
    ps, fl, half, fired = decide_guarded_np(r.mean(-1), k, THR, ALPHA, gamma)  # (T, P)
    return {"pass": ps, "fail": fl, "half": half, "fired": fired}


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


def fidelity_guard(trials: int = 400, seed: int = 20261126) -> None:
    """``launch_guard_np`` against scipy.stats.f_oneway (and stats.launch_check / decide_nested, if present).

    Its own rng, so the tables draw the same numbers as without it.  Aborts on any disagreement.
    """
    rng = np.random.default_rng(seed)
    bad = 0
    fired = 0
    for _ in range(trials):
        n_l, k = int(rng.integers(2, 6)), int(rng.integers(2, 6))
        shape = (int(rng.integers(1, 4)), P, n_l * k)
        m = rng.normal(0, rng.uniform(0.001, 0.03), shape) + np.repeat(
            rng.normal(0, rng.choice([0.0, 0.005, 0.03]), (*shape[:-1], n_l)), k, -1)
        f, p, lm = launch_guard_np(m, k)  # vectorised over the leading axes
        for idx in np.ndindex(*shape[:-1]):
            ref = sst.f_oneway(*m[idx].reshape(n_l, k))
            bad += int(not math.isclose(float(f[idx]), float(ref.statistic), rel_tol=1e-9, abs_tol=1e-12))
            bad += int(not math.isclose(float(p[idx]), float(ref.pvalue), rel_tol=1e-7, abs_tol=1e-12))
            bad += int(not np.allclose(lm[idx], m[idx].reshape(n_l, k).mean(-1), rtol=0, atol=1e-15))
        fired += int((p < 0.25).sum())
    # MS_within = 0: F = inf, p = 0 where the launch means differ; F = 0, p = 1 where all starts are equal
    f0, p0, _ = launch_guard_np(np.array([[0.1, 0.1, 0.3, 0.3], [0.2, 0.2, 0.2, 0.2]]), 2)
    bad += int(not (np.isinf(f0[0]) and p0[0] == 0.0 and f0[1] == 0.0 and p0[1] == 1.0))
    if bad:
        raise SystemExit(f"fidelity: launch_guard_np disagrees with scipy.stats.f_oneway in {bad} checks")
    msg = (f"fidelity: launch_guard_np's F, p and launch means agree with scipy.stats.f_oneway on {trials} random "
           f"batches (2-5 launches of 2-5 starts; guard p < 0.25 in {fired} points)")
    try:
        from pytest_p2p.stats import launch_check
        from pytest_p2p.stats.nested import LAUNCH_GUARD_LEVEL
    except ImportError:
        print(msg + "; stats.launch_check not present, not compared")
        return
    bad = fired = 0
    n = trials // 2
    for _ in range(n):
        n_l, k, w = int(rng.integers(2, 5)), int(rng.integers(2, 5)), int(rng.integers(1, 5))
        b = n_l * k
        r = (rng.normal(rng.normal(0, 0.03), rng.uniform(0.001, 0.03), (b, 1))
             + np.repeat(rng.normal(0, rng.choice([0.0, 0.01, 0.03]), (n_l, 1)), k, 0)
             + rng.normal(0, rng.uniform(0.002, 0.03), (b, w)))
        on = np.exp(r) * rng.uniform(50, 9000, (b, 1))
        off = on / np.exp(r)
        blocks = [list(zip(on[i].tolist(), off[i].tolist(), strict=True)) for i in range(b)]
        labels = [i // k for i in range(b)]
        thr = float(rng.choice([0.0, 0.02, -0.01]))
        alpha = float(rng.choice([0.01, 0.05, 0.005]))
        chk = launch_check(r.mean(-1).tolist(), labels)
        f, p, _ = launch_guard_np(r.mean(-1), k)
        bad += int(not (math.isclose(float(f), chk.f or 0.0, rel_tol=1e-7) and math.isclose(float(p), chk.p or 0.0,
                                                                                          rel_tol=1e-6, abs_tol=1e-12)))
        d = decide_nested(blocks, threshold=thr, alpha=alpha, launches=labels)
        ps, fl, _, fd = decide_guarded_np(r.mean(-1), k, thr, alpha, LAUNCH_GUARD_LEVEL)
        bad += int(("pass" if ps else ("fail" if fl else "inconclusive")) != d.outcome.value)
        bad += int(bool(fd) != (chk.status == "fired"))
        fired += int(fd)
    if bad:
        raise SystemExit(f"fidelity: decide_guarded_np disagrees with stats.launch_check / decide_nested(launches=) "
                         f"in {bad} checks")
    print(msg + f"; its F, p and verdicts agree with stats.launch_check / decide_nested(launches=) at level "
          f"{LAUNCH_GUARD_LEVEL:g} on {n} random campaigns (2-4 launches of 2-4 starts x 1-4 windows; fired in "
          f"{fired})")


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


LAUNCH_DESIGNS = ((3, 5, 1), (6, 2, 3), (6, 2, 6), (8, 2, 4))  # (B starts, W windows, k starts per launch)
LAUNCH_TRUTH = ((0.006, 0.010), 0.02, (0.0, 0.003, 0.006, 0.010))  # start sds, window sd, launch sds


def design_name(b: int, w: int, k: int) -> str:
    return f"{b} x {w} sequential" if k == 1 else f"{b} x {w}, {b // k} launch{'es' if b // k > 1 else ''} of {k}"


def table_launch(rng: np.random.Generator, t: int) -> dict[str, dict[str, float]]:
    """Starts made at once: does a launch effect shared by the k starts of a launch break the t interval?

    The verdict treats the B starts as independent (df B - 1), but with k > 1 they come in L = B / k
    launches, and a launch effect moves all k start means together: it adds to the mean's error with
    weight 1 / L, yet shows up in the spread of the B start means only as far as launches differ.
    """
    s_sds, w_sd, l_sds = LAUNCH_TRUTH
    nominal = 2 * ALPHA
    tol = 3 * math.sqrt(nominal * (1 - nominal) / t)
    print(f"\n## 4. Starts made at once: a launch effect shared by the starts of one launch, {t} campaigns a cell")
    print(f"Each design is B starts x W window pairs per point, made as L launches of k starts per arm "
          f"(campaign.starts_at_once: k; all 2k servers of a launch resident together, windows alternating over "
          f"replicas and arms); the verdict is unchanged: t interval on the B start means, df B - 1, threshold "
          f"{THR:+.0%}, alpha {ALPHA:.2%} per wrong verdict and point.  launch sd = SD of a launch effect on the "
          f"paired log ratio, shared by both points, every window and the k starts of the launch.  For k = 1 "
          f"(sequential) every start is its own launch, so the launch effect is just part of the start effect "
          f"(start means spread as sqrt(start sd^2 + launch sd^2)) and the interval accounts for it.  window sd "
          f"{w_sd:.1%}.  wrong = either wrong verdict at true 0 % (pass or fail; both points pooled; nominal "
          f"{pct(nominal)} %); half-width = mean 98 % CI half-width (%) at true 0 %; +2 %: pass = decided pass "
          f"at true +2 %\n")
    print("| start sd | launch sd | design | launches x starts at once | starts x windows | half-width "
          "| true 0: wrong | +2 %: pass |")
    print("|---|---|---|---|---|---|---|---|")
    res: dict[str, dict[str, float]] = {}
    for s_sd in s_sds:
        for l_sd in l_sds:
            for b, w, k in LAUNCH_DESIGNS:
                null = judge(draw(rng, t, b, w, s_sd, w_sd, 0.0, launch=k, launch_sd=l_sd))
                up2 = judge(draw(rng, t, b, w, s_sd, w_sd, 0.02, launch=k, launch_sd=l_sd))
                wrong, half, power = rate(null["pass"] | null["fail"]), rate(null["half"]), rate(up2["pass"])
                res[f"{design_name(b, w, k)}|{s_sd}|{l_sd}"] = {"wrong": wrong, "half": half, "pass": power}
                print(f"| {s_sd:.1%} | {l_sd:.1%} | {design_name(b, w, k)} | {b // k} x {k} | {b} x {w} | "
                      f"{100 * half:.2f} | {pct(wrong)} | {pct(power)} |", flush=True)
    print(f"\nWhat the table shows (nominal wrong rate {pct(nominal)} %; 'above' = more than {pct(nominal + tol)} %, "
          f"nominal + 3 Monte Carlo SEs at {t} campaigns):")
    for b, w, k in LAUNCH_DESIGNS:
        name = design_name(b, w, k)
        cells = {(s, lsd): res[f"{name}|{s}|{lsd}"] for s in s_sds for lsd in l_sds}
        at0 = [cells[(s, 0.0)]["wrong"] for s in s_sds]
        (ws, wl), worst = max(cells.items(), key=lambda kv: kv[1]["wrong"])
        above = [(lsd, s) for (s, lsd), c in sorted(cells.items(), key=lambda kv: kv[0][::-1])
                 if c["wrong"] > nominal + tol]
        first = (f"above nominal in {len(above)} of {len(cells)} cells (the smallest launch sd among them "
                 f"{above[0][0]:.1%})" if above else f"above nominal in none of {len(cells)} cells")
        by_start = "; ".join(
            f"start sd {s:.1%}: half-width {100 * cells[(s, l_sds[0])]['half']:.2f} -> "
            f"{100 * cells[(s, l_sds[-1])]['half']:.2f} %, +2 % pass {pct(cells[(s, l_sds[0])]['pass'])} -> "
            f"{pct(cells[(s, l_sds[-1])]['pass'])} %" for s in s_sds)
        print(f"- {name}: wrong {pct(min(at0))}-{pct(max(at0))} % at launch sd 0; largest {pct(worst['wrong'])} % "
              f"(start sd {ws:.1%}, launch sd {wl:.1%}); {first}.  From launch sd {l_sds[0]:.1%} to "
              f"{l_sds[-1]:.1%}: {by_start}")
    return res


GUARD_DESIGNS = ((3, 5, 1), (6, 2, 3), (6, 2, 2), (8, 2, 4), (8, 2, 2))  # no single launch of several starts
GUARD_TRUTH = ((0.006, 0.010), 0.02, (0.0, 0.003, 0.006, 0.010, 0.020))  # start sds, window sd, launch sds
GUARDS = (None, 0.05, 0.25)  # no guard, guard levels gamma


def guard_name(g: float | None) -> str:
    return "no guard" if g is None else f"gamma {g:g}"


def table_guard(rng: np.random.Generator, t: int) -> dict[str, dict[str, float]]:
    """Table 4's launch effect against the launch guard: how much of the excess does it take back, at what cost?"""
    fidelity_guard()
    s_sds, w_sd, l_sds = GUARD_TRUTH
    nominal = 2 * ALPHA
    tol = 3 * math.sqrt(nominal * (1 - nominal) / t)
    shown = [g for g in GUARDS if g is not None]
    print(f"\n## 5. Starts made at once, with the launch guard, {t} campaigns a cell")
    print(f"The designs of table 4 with at least 2 launches (a single launch of several starts is refused: a launch "
          f"effect cannot be seen there), and the sequential 3 x 5 as the reference (k = 1: no guard applies, its "
          f"guard columns repeat 'no guard').  The guard, per point: a one-way ANOVA of the point's B start means with "
          f"the launch as the factor, F = MS between launches / MS within on (L - 1, B - L) df; where its p < gamma "
          f"the point is judged on its L launch means (t interval, df L - 1), else on its B start means (df B - 1) "
          f"as in table 4.  Threshold {THR:+.0%}, alpha {ALPHA:.2%} per wrong verdict and point; the three "
          f"settings judge the same simulated campaigns.  window sd {w_sd:.1%}.  wrong = either wrong verdict at "
          f"true 0 % (both points pooled; nominal {pct(nominal)} %); pass = decided pass at true +2 %; fired = share "
          f"of campaigns at true 0 % where the guard at gamma {shown[-1]:g} fired at either point / share of points\n")
    print("| start sd | launch sd | design | launches x starts at once | starts x windows | "
          + " | ".join(f"true 0: wrong, {guard_name(g)}" for g in GUARDS) + " | "
          + " | ".join(f"+2 %: pass, {guard_name(g)}" for g in GUARDS)
          + f" | fired at gamma {shown[-1]:g}, true 0: campaigns / points |")
    print("|---|---|---|---|---|" + "---|" * (2 * len(GUARDS) + 1))
    res: dict[str, dict[str, float]] = {}
    for s_sd in s_sds:
        for l_sd in l_sds:
            for b, w, k in GUARD_DESIGNS:
                r0 = draw(rng, t, b, w, s_sd, w_sd, 0.0, launch=k, launch_sd=l_sd)
                r2 = draw(rng, t, b, w, s_sd, w_sd, 0.02, launch=k, launch_sd=l_sd)
                cells: list[str] = []
                passes: list[str] = []
                for g in GUARDS:
                    null, up2 = judge_guarded(r0, k, g), judge_guarded(r2, k, g)
                    wrong, power = rate(null["pass"] | null["fail"]), rate(up2["pass"])
                    res[f"{design_name(b, w, k)}|{s_sd}|{l_sd}|{g}"] = {
                        "wrong": wrong, "pass": power, "fired_c": rate(null["fired"].any(1)),
                        "fired_p": rate(null["fired"])}
                    cells.append(pct(wrong))
                    passes.append(pct(power))
                fd = res[f"{design_name(b, w, k)}|{s_sd}|{l_sd}|{shown[-1]}"]
                fired = "n/a (k = 1)" if k == 1 else f"{pct(fd['fired_c'])} / {pct(fd['fired_p'])}"
                print(f"| {s_sd:.1%} | {l_sd:.1%} | {design_name(b, w, k)} | {b // k} x {k} | {b} x {w} | "
                      + " | ".join(cells) + " | " + " | ".join(passes) + f" | {fired} |", flush=True)
    print(f"\nWhat the table shows (nominal wrong rate {pct(nominal)} %; 'above' = more than {pct(nominal + tol)} %, "
          f"nominal + 3 Monte Carlo SEs at {t} campaigns; cost = +2 % pass rate lost to the guard at launch sd 0, "
          f"where there is no launch effect to find):")
    for b, w, k in GUARD_DESIGNS:
        name = design_name(b, w, k)
        parts = []
        for g in (GUARDS[:1] if k == 1 else GUARDS):
            cells = {(s, lsd): res[f"{name}|{s}|{lsd}|{g}"] for s in s_sds for lsd in l_sds}
            (ws, wl), worst = max(cells.items(), key=lambda kv: kv[1]["wrong"])
            above = sum(c["wrong"] > nominal + tol for c in cells.values())
            part = (f"{guard_name(g)}: largest wrong {pct(worst['wrong'])} % (start sd {ws:.1%}, launch sd {wl:.1%}), "
                    f"above nominal in {above} of {len(cells)} cells")
            if g is not None:
                cost = ", ".join(
                    f"start sd {s:.1%}: {pct(res[f'{name}|{s}|0.0|None']['pass'])} -> {pct(cells[(s, 0.0)]['pass'])} % "
                    f"(fired in {pct(cells[(s, 0.0)]['fired_c'])} % of campaigns)" for s in s_sds)
                part += f"; cost at launch sd 0: {cost}"
            parts.append(part)
        print(f"- {name}: " + "; ".join(parts) + ("  (k = 1: no guard applies)" if k == 1 else ""))
    return res


# ----------------------------------------------------------------------------- table 6: the in-run window screens

def draw_arms(rng: np.random.Generator, t: int, b: int, w: int, start_sd: float, window_sd: float,
              up: float) -> tuple[np.ndarray, np.ndarray]:
    """(start effects (T, A, P, B, 1), log values (T, A, P, B, W)) of each arm: ``draw``'s model, kept per arm.

    The screens below look at each arm's values (not only the paired ratio), so the arms are kept apart; the
    start effect is returned too, since a window measured again runs on the same server (same effect, fresh
    noise)."""
    eff = start_effects(rng, t, b, start_sd)
    eff[:, 0] += math.log1p(up)
    return eff, eff + rng.normal(0, window_sd / math.sqrt(2), (t, A, P, b, w))


def window_flags_np(x: np.ndarray, p: int, b: int) -> np.ndarray:
    """(T, W) window pairs of start ``b`` at point ``p`` the campaign's window screens flag, on x (T, A, P, B, W) as
    measured so far: a ratio off against its start (>= 3 pairs), or either arm's value off against that arm's
    windows at the point over starts 0..b (none where every window of this start is: a slow server)."""
    t, w_n = x.shape[0], x.shape[-1]
    odd = outliers_np(x[:, 0, p, b] - x[:, 1, p, b]) if w_n >= 3 else np.zeros((t, w_n), bool)
    for a in range(A):
        mine = outliers_np(x[:, a, p, :b + 1].reshape(t, -1))[:, b * w_n:]
        mine[mine.all(-1)] = False
        odd |= mine
    return odd


def screen_windows_np(rng: np.random.Generator, eff: np.ndarray, x: np.ndarray,
                      window_sd: float) -> tuple[np.ndarray, np.ndarray]:
    """The campaign's window screens as it runs them (``campaign.adaptive.screen_windows_start``, once per start
    and point, right after the start's windows at that point): a window pair whose ratio sits off against its
    start's other pairs (``stats.screen_windows``, >= 3 pairs), or whose value of either arm sits off against that
    arm's windows at the point over every start so far (``stats.outliers``; none where every window of this start
    would be flagged: a slow server, left to the start screen), is measured again once on the same servers.

    x (T, A, P, B, W) is changed in place; returns (x, re-measured (T, P, B, W))."""
    t, _, p_n, b_n, w_n = x.shape
    again = np.zeros((t, p_n, b_n, w_n), bool)
    for b in range(b_n):
        for p in range(p_n):
            odd = window_flags_np(x, p, b)
            if odd.any():
                fresh = eff[:, :, p, b] + rng.normal(0, window_sd / math.sqrt(2), (t, A, w_n))
                x[:, :, p, b] = np.where(odd[:, None], fresh, x[:, :, p, b])
                again[:, p, b] = odd
    return x, again


def fidelity_window_screens(rng: np.random.Generator, trials: int = 200) -> None:
    """The numpy window screens against ``campaign.adaptive.screen_windows_start`` on random campaigns (before any
    window is measured again: the first start's flags, then each later start's on the values so far)."""
    from pytest_p2p.campaign import adaptive
    from pytest_p2p.campaign.config import parse_campaign

    bad = flagged = 0
    for _ in range(trials):
        b_n, w_n = int(rng.integers(1, 5)), int(rng.integers(2, 6))
        cfg = parse_campaign({"kind": "model", "arms": ["p2p_on", "p2p_off"], "concurrency": [16, 64],
                              "starts": b_n, "windows": w_n, "residency": "resident", "min_uplift": "0%"}, "sim.yaml")
        eff, x = draw_arms(rng, 1, b_n, w_n, float(rng.uniform(0, 0.03)), float(rng.uniform(0.002, 0.04)),
                           float(rng.uniform(-0.1, 0.5)))
        if rng.uniform() < 0.5:  # a cold or slow window (or a slow server) somewhere
            x[0, int(rng.integers(A)), int(rng.integers(P)), int(rng.integers(b_n)),
              slice(None) if rng.uniform() < 0.2 else int(rng.integers(w_n))] += BAD
        vals = np.exp(x[0]) * 3000.0
        data: dict[tuple[str, str], dict[int, dict[str, object]]] = {}
        for a, arm in enumerate(("p2p_on", "p2p_off")):
            for p, point in enumerate(("c16", "c64")):
                data[(arm, point)] = {blk * w_n + wi + 1: {"output_throughput": float(vals[a, p, blk, wi]),
                                                           "completed": 100,
                                                           "meta": {"start": blk + 1, "window": wi + 1}}
                                      for blk in range(b_n) for wi in range(w_n)}
        for blk in range(b_n):
            for p, point in enumerate(("c16", "c64")):
                upto = {k: {r: d for r, d in reps.items() if r <= (blk + 1) * w_n} for k, reps in data.items()}
                want = sorted(adaptive.screen_windows_start(upto, cfg, "model", point, blk + 1))
                got = [int(i) + 1 for i in np.flatnonzero(window_flags_np(x, p, blk)[0])]
                bad += int(got != want)
                flagged += len(want)
    if bad:
        raise SystemExit(f"fidelity: the numpy window screens disagree with campaign.adaptive.screen_windows_start "
                         f"in {bad} checks")
    print(f"fidelity: the numpy window screens agree with campaign.adaptive.screen_windows_start on {trials} random "
          f"campaigns (1-4 starts x 2-5 window pairs, a cold window or slow server in half; {flagged} windows "
          "flagged)")


def table_window_screens(rng: np.random.Generator, t: int, quick: bool) -> dict[str, float]:
    """Table 6: do the in-run window screens move the verdict's error rates?  They re-measure a window only by
    looking at the measured values, so they could bias what is judged; they must not."""
    bs, ws = ((3,), (2, 5)) if quick else ((3, 6), (2, 5))
    print(f"\n## 6. The in-run window screens (ratio within a start, and each arm's values at the point over every "
          f"start so far), {t} campaigns a cell, alpha {ALPHA:.2%} per wrong verdict")
    print("Rates in %.  'screens off / on': the same campaigns judged as measured, and after the screens re-measured "
          "the window pairs they flagged (once, same server, fresh noise); re-measured = window pairs measured again "
          "per 100 campaigns; cold = the campaign's first window (p2p_on, c16, start 1) 20 % low (the 2x H100 run of "
          "2026-11-27: 2400 tok/s against 2872-3211 after its warm-up); found = campaigns whose cold window the "
          "screens re-measured (with 2 window pairs a start the first start's arm values are 2 a point, too few to "
          "judge: a cold window there is the start screen's, table 1); both points pooled\n")
    print("| starts | window pairs | start sd | window pair sd | true 0: pass / fail, screens off -> on "
          "| re-measured per 100 (true 0) | +5 %: pass off -> on | cold, true 0: pass / fail off -> on "
          "| cold, +20 %: c16 half-width off -> on | cold found |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    worst = {"null_on": 0.0, "cold_on": 0.0, "remeasured": 0.0, "found_min": 1.0}
    for b in bs:
        for w in ws:
            for s_sd in (0.0, 0.006, 0.02):
                for w_sd in (0.005, 0.02, 0.04, 0.08):
                    eff, x = draw_arms(rng, t, b, w, s_sd, w_sd, 0.0)
                    off = judge(x[:, 0] - x[:, 1])
                    x, again = screen_windows_np(rng, eff, x, w_sd)
                    on = judge(x[:, 0] - x[:, 1])
                    eff5, x5 = draw_arms(rng, t, b, w, s_sd, w_sd, 0.05)
                    up_off = judge(x5[:, 0] - x5[:, 1])
                    x5 = screen_windows_np(rng, eff5, x5, w_sd)[0]
                    up_on = judge(x5[:, 0] - x5[:, 1])
                    effc, xc = draw_arms(rng, t, b, w, s_sd, w_sd, 0.0)
                    xc[:, 0, 0, 0, 0] += BAD
                    cold_off = judge(xc[:, 0] - xc[:, 1])
                    xc, again_c = screen_windows_np(rng, effc, xc, w_sd)
                    cold_on = judge(xc[:, 0] - xc[:, 1])
                    eff20, x20 = draw_arms(rng, t, b, w, s_sd, w_sd, 0.20)
                    x20[:, 0, 0, 0, 0] += BAD
                    h_off = judge(x20[:, 0] - x20[:, 1])["half"][:, 0]
                    x20 = screen_windows_np(rng, eff20, x20, w_sd)[0]
                    h_on = judge(x20[:, 0] - x20[:, 1])["half"][:, 0]
                    found = rate(again_c[:, 0, 0, 0])
                    per100 = 100 * float(again.sum((1, 2, 3)).mean())
                    worst["null_on"] = max(worst["null_on"], rate(on["pass"]), rate(on["fail"]))
                    worst["cold_on"] = max(worst["cold_on"], rate(cold_on["pass"]), rate(cold_on["fail"]))
                    worst["remeasured"] = max(worst["remeasured"], per100)
                    if w >= 3 and w_sd <= 0.02:
                        worst["found_min"] = min(worst["found_min"], found)
                    print(f"| {b} | {w} | {s_sd:.1%} | {w_sd:.1%} | {pf(off)} -> {pf(on)} | {per100:.1f} | "
                          f"{pct(rate(up_off['pass']))} -> {pct(rate(up_on['pass']))} | {pf(cold_off)} -> "
                          f"{pf(cold_on)} | {100 * float(np.mean(h_off)):.2f} -> {100 * float(np.mean(h_on)):.2f} | "
                          f"{pct(found)} |", flush=True)
    print(f"\nscreens on: worst wrong-verdict rate per decision and kind at true 0 %: {pct(worst['null_on'])} %; "
          f"with a cold first window: {pct(worst['cold_on'])} %; most window pairs re-measured per 100 unchanged "
          f"campaigns: {worst['remeasured']:.1f}; the cold window found in at least {pct(worst['found_min'])} % of "
          "campaigns of >= 3 window pairs a start where window pairs vary by <= 2 %")
    return worst


TABLES = ("grid", "adaptive", "old_vs_new", "launch", "guard", "screens", "position", "fit")
POS_EFFECT = 0.04  # table 7: p2p_on's windows at a point's ends of a start this much slower (2x H200: 3-5 %)


def on_at_ends(b: int, w: int) -> np.ndarray:
    """(B, W) 1 where p2p_on's window of pair ``w`` of start ``b`` is its point's first or last window.

    The campaign's own order (``campaign.schedule.order``): ABBA over a start's window pairs, the first arm
    alternating from start to start, each point's windows one after the other within a start."""
    out = np.zeros((b, w))
    for blk in range(b):
        seq = [arm for wi in range(w) for arm in order(["on", "off"], blk + 1, wi + 1)]
        for wi in range(w):
            k = 2 * wi + order(["on", "off"], blk + 1, wi + 1).index("on")
            out[blk, wi] = 1.0 if k in (0, len(seq) - 1) else 0.0
    return out


def table_position(rng: np.random.Generator, t: int) -> dict[str, float]:
    """Table 7: p2p_on slower in its point's first and last window of a start (2x H200, 2026-11-27: c16 start
    means 23.2 / 27.9 / 23.4 / 27.8 / 23.8 % with 2 window pairs, by the arm that went first).

    The truth is the uplift a balanced design measures: with the effect ``e`` on p2p_on's windows at the ends,
    the true log uplift is ``up - e * share``, ``share`` the fraction of p2p_on's windows at the ends over an
    even number of starts (each start's order is mirrored by the next's). A campaign of an odd number of starts
    leans to the odd starts' order; the start spread counts the alternation either way."""
    print(f"\n## 7. A position effect: p2p_on {100 * POS_EFFECT:.0f} % slower in its point's first and last window "
          f"of a start, under the campaign's order (ABBA, first arm alternating between starts); true uplift at the "
          f"threshold {THR:+.0%} as a balanced design measures it; {t} campaigns a cell\n")
    print("| starts | windows | start sd | window sd | effect | true 0: pass / fail | +5 %: pass | "
          "half-width |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for w in (2, 4):
        share = float(on_at_ends(2, w).mean())
        for b in (4, 5, 6):
            ends = on_at_ends(b, w)[None, None]  # (1, 1, B, W)
            for s_sd, w_sd in ((0.005, 0.02), (0.01, 0.03)):
                for eff in (0.0, POS_EFFECT):
                    shift = math.log1p(-eff)
                    row = []
                    for up in (0.0, 0.05):
                        base = math.expm1(math.log1p(up) - shift * share)  # the balanced truth is `up`
                        r = draw(rng, t, b, w, s_sd, w_sd, base) + shift * ends
                        row.append(judge(r))
                    worst = max(worst, rate(row[0]["pass"]), rate(row[0]["fail"]))
                    print(f"| {b} | {w} | {s_sd:.1%} | {w_sd:.1%} | {eff:.0%} | {pf(row[0])} | "
                          f"{pct(rate(row[1]['pass']))} | {100 * rate(row[0]['half']):.2f} |", flush=True)
    print(f"\nworst wrong-verdict rate per decision and kind at the true threshold: {pct(worst)} %")
    return {"worst": worst}


# ----------------------------------------------------------------------------- table 8: the first-arm fit

PRETEST = 0.25  # table 8's "chosen by a test" rule: fit only where the orders' F test has p below this
CLIMB = 0.06  # table 8: p2p_on this much slower at a start's first window, the gap closing by 1/e every CLIMB_TAU
CLIMB_TAU = 3.0  # windows (2x H200, 2026-11-27: p2p_on climbed for minutes after its start, p2p_off stayed flat)


def decide_fit_np(m: np.ndarray, thr: float, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """m (..., B) block means, start 1 first -> (pass, fail, half-width, F test p) of the first-arm fit as
    ``stats.sequence_fit`` makes it: odd starts one order, even starts the other (``campaign.schedule.first_arm``),
    the plain mean of the two orders' means, the spread pooled within them on B - 2 df."""
    b = m.shape[-1]
    g1, g2 = m[..., 0::2], m[..., 1::2]
    n1, n2 = g1.shape[-1], g2.shape[-1]
    m1, m2 = g1.mean(-1), g2.mean(-1)
    ss = ((g1 - m1[..., None]) ** 2).sum(-1) + ((g2 - m2[..., None]) ** 2).sum(-1)
    var = ss / (b - 2)
    mu = (m1 + m2) / 2
    half = float(sst.t.ppf(1 - alpha, b - 2)) * np.sqrt(var * (1 / n1 + 1 / n2) / 4)
    t = math.log1p(thr)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (m1 - m2) ** 2 / (1 / n1 + 1 / n2) / var
    return mu - half >= t, mu + half < t, half, sst.f.sf(f, 1, b - 2)


def fidelity_fit(rng: np.random.Generator, trials: int = 400) -> None:
    """``decide_fit_np`` against ``stats.decide_nested(sequences=)`` on random campaigns of 6-9 starts with an
    order effect of random size; aborts on any disagreement."""
    bad = 0
    for _ in range(trials):
        b, w = int(rng.integers(6, 10)), int(rng.integers(1, 5))
        eff = rng.normal(0, 0.03) * (np.arange(b) % 2)[:, None]
        r = rng.normal(rng.normal(0, 0.03), rng.uniform(0.001, 0.03), (b, 1)) + eff + rng.normal(
            0, rng.uniform(0.002, 0.03), (b, w))
        on = np.exp(r) * rng.uniform(50, 9000, (b, 1))
        blocks = [list(zip(on[i].tolist(), (on[i] / np.exp(r[i])).tolist(), strict=True)) for i in range(b)]
        thr, alpha = float(rng.choice([0.0, 0.02, -0.01])), float(rng.choice([0.01, 0.05, 0.005]))
        d = decide_nested(blocks, threshold=thr, alpha=alpha,
                          sequences=[first_arm(["on", "off"], s + 1) for s in range(b)])
        ps, fl, half, p = decide_fit_np(r.mean(-1), thr, alpha)
        bad += int(("pass" if ps else "fail" if fl else "inconclusive") != d.outcome.value)
        bad += int(abs(math.log1p(d.upper) - math.log1p(d.lower) - 2 * float(half)) > 1e-9)
        fit = sequence_fit(list(r.mean(-1)), [first_arm(["on", "off"], s + 1) for s in range(b)])
        bad += int(fit.p is None or abs(fit.p - float(p)) > 1e-7)
    if bad:
        raise SystemExit(f"fidelity: {bad} disagreements between decide_fit_np and stats.decide_nested(sequences=)")
    print(f"fidelity: decide_fit_np agrees with stats.decide_nested(sequences=) on {trials} random campaigns "
          "(6-9 starts x 1-4 windows, order effects)")


def climb_penalty(b: int, w: int) -> np.ndarray:
    """(P, B, W) log penalty on p2p_on's window of pair ``w`` at point ``p`` of start ``b``: ``-CLIMB * exp(-k /
    CLIMB_TAU)`` at its window's place ``k`` in the start (points one after the other, the campaign's order)."""
    out = np.zeros((P, b, w))
    for blk in range(b):
        for p in range(P):
            for wi in range(w):
                k = p * 2 * w + 2 * wi + order(["on", "off"], blk + 1, wi + 1).index("on")
                out[p, blk, wi] = math.log1p(-CLIMB * math.exp(-k / CLIMB_TAU))
    return out


def table_fit(rng: np.random.Generator, t: int) -> dict[str, float]:
    """Table 8: the first-arm fit, the plain start means, and the fit chosen by its F test, on the same campaigns.

    The truth is the uplift a balanced design measures (both orders weighed alike), as in table 7: an effect of
    the order moves it by its mean over both orders. "rule" is what the campaign does: the plain start means below
    :data:`stats.nested.MIN_SEQUENCE_DF` + 2 starts, the fit from there on; both columns are shown at every start
    count, the rows the rule judges with the fit marked."""
    print(f"\n## 8. The first-arm fit: ABBA within a start, the first arm alternating between starts, 2 window "
          f"pairs a start; true uplift at the threshold {THR:+.0%} and +5 %; {t} campaigns a cell; effects: none, "
          f"p2p_on {100 * POS_EFFECT:.0f} % slower at its point's ends (table 7), p2p_on {100 * CLIMB:.0f} % slower "
          f"at a start's first window, the gap closing by 1/e every {CLIMB_TAU:g} windows (a climb)\n")
    print("| starts (rule) | start sd | window sd | effect | true 0 wrong: plain / fit / by test | +5 % pass: plain / "
          "fit | half-width: plain / fit |")
    print("|---|---|---|---|---|---|---|")
    worst = {"plain": 0.0, "fit": 0.0, "rule": 0.0, "test": 0.0}
    w = 2
    for b in (4, 5, 6, 8):
        fits = fits_sequences(b)
        for s_sd, w_sd in ((0.005, 0.02), (0.01, 0.03)):
            for name in ("none", "ends", "climb"):
                if name == "ends":
                    shift = math.log1p(-POS_EFFECT) * on_at_ends(b, w)[None, None]  # (1, 1, B, W)
                    mean_shift = math.log1p(-POS_EFFECT) * float(on_at_ends(2, w).mean())
                elif name == "climb":
                    shift = climb_penalty(b, w)[None]  # (1, P, B, W)
                    mean_shift = climb_penalty(2, w).mean((1, 2))[None, :, None, None]  # per point: both orders
                else:
                    shift, mean_shift = np.zeros((1, 1, 1, 1)), 0.0
                cells = []
                for up in (0.0, 0.05):
                    r = draw(rng, t, b, w, s_sd, w_sd, up) + shift - mean_shift  # the balanced truth is `up`
                    m = r.mean(-1)
                    plain = decide_np(m, THR, ALPHA)
                    fit = decide_fit_np(m, THR, ALPHA)
                    chosen = tuple(np.where(fit[3] < PRETEST, f, q) for f, q in zip(fit[:3], plain[:3], strict=True))
                    cells.append((plain, fit, chosen))
                (p0, f0, c0), (p5, f5, _) = cells
                wrong = {k: max(rate(x[0]), rate(x[1])) for k, x in (("plain", p0), ("fit", f0), ("test", c0))}
                wrong["rule"] = wrong["fit"] if fits else wrong["plain"]
                for k, v in wrong.items():
                    worst[k] = max(worst[k], v)
                print(f"| {b} ({'fit' if fits else 'plain'}) | {s_sd:.1%} | {w_sd:.1%} | {name} | "
                      f"{pct(wrong['plain'])} / {pct(wrong['fit'])} / {pct(wrong['test'])} | "
                      f"{pct(rate(p5[0]))} / {pct(rate(f5[0]))} | "
                      f"{100 * float(np.median(p0[2])):.2f} / {100 * float(np.median(f0[2])):.2f} |", flush=True)
    print(f"\nworst wrong-verdict rate per decision and kind at the true threshold: plain {pct(worst['plain'])} %, "
          f"fit {pct(worst['fit'])} %, the rule (fit from {MIN_SEQUENCE_DF + 2} starts) {pct(worst['rule'])} %, "
          f"the fit chosen by its F test (p < {PRETEST:g}) {pct(worst['test'])} %")
    return worst


def main() -> None:
    global ALPHA
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer cells and 500 trials (smoke)")
    ap.add_argument("--alpha", type=float, default=ALPHA,
                    help="one-sided alpha per point (the campaign splits 1 %% over its points: 0.005 for 2)")
    ap.add_argument("--only", choices=TABLES, default=None,
                    help="run one table (fidelity() still runs first; 'launch' = tables 4 and 5, 'guard' = "
                         "table 5 alone); default: all")
    args = ap.parse_args()
    ALPHA = args.alpha
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    fidelity(rng, 100 if args.quick else 400)
    t = 500 if args.quick else args.trials
    print(f"command: python benchmarks/verdict_nested.py --trials {args.trials} --seed {args.seed}"
          f"{' --quick' if args.quick else ''}{f' --alpha {ALPHA:g}' if ALPHA != 0.01 else ''}"
          f"{f' --only {args.only}' if args.only else ''}")
    run = TABLES if args.only is None else (args.only,)
    if "grid" in run:
        table_grid(rng, t, args.quick)
    if "adaptive" in run:
        table_adaptive(rng, t)
    if "old_vs_new" in run:
        table_old_vs_new(rng, t)
    if "launch" in run:
        table_launch(rng, t)
    if "launch" in run or "guard" in run:
        table_guard(rng, t)
    if "screens" in run:
        fidelity_window_screens(rng, 60 if args.quick else 200)
        table_window_screens(rng, t, args.quick)
    if "position" in run:
        table_position(rng, t)
    if "fit" in run:
        fidelity_fit(rng, 100 if args.quick else 400)
        table_fit(rng, t)
    print(f"\nelapsed {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
