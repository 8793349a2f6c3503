"""False alarms and detection of the verdict, by simulation (issue 9, item 10).

Every campaign here is SIMULATED, with known truth.  A campaign is 4 concurrencies x 2 arms;
each arm x point has one primary metric (output throughput) judged against K baseline
runs, plus the uplift history at each point: 12 primary tests in one Holm family at the
campaign alpha (1 %), exactly as ``pytest_p2p.verdict.campaign_judge`` does.  (The other
~25 metrics of a real campaign cannot fail a check, so they do not enter the failure rate.)

Noise model, on log values: a run effect per (run, arm) with SD ``tau`` (run-to-run
spread, independent per arm: the harder case for the uplift history), per-rep noise with
SD ``cv`` (within-run), a linear drift of ``-drift`` per slot in schedule order, and in
the current run one rep (one slot of arm p2p_on, all its points) 20 % low that telemetry
did not flag.  The screen (``stats.screen_pairs``) re-runs a flagged rep as an extra pair
at the end of the schedule; ``--no-screen`` shows what happens without it.

With K >= 10 baseline runs the scenario tests and, separately, the uplift-history tests of
a campaign moderate their run-to-run spreads with each other (``stats.spread_prior``, the
package's empirical-Bayes prior); ``--no-moderate`` shows the rules without it.

The decision rules are re-implemented here in numpy (scipy's t distribution) for speed;
``fidelity()`` first checks them against the package's own ``decide_change`` /
``decide_uplift`` / ``family_wise`` on random inputs and aborts on any disagreement.

Usage: python benchmarks/verdict_power.py [--trials 4000] [--seed 1] [--quick]
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

from pytest_p2p.stats import (  # noqa: E402
    MODERATE_MIN_REPS,
    MODERATE_MIN_RUNS,
    Outcome,
    RunStats,
    SequentialPlan,
    decide_change,
    decide_uplift,
    family_wise,
    outlying_slots,
    screen_starts,
    screen_windows,
    spread_prior,
)

ALPHA = 0.01  # campaign family-wise
UPLIFT_ALPHA = 0.01  # per uplift verdict
TOL = 0.03  # baseline tolerance (default)
UP_THR = 0.05  # uplift threshold (default min_uplift)
OUTLIER = math.log(0.8)
A, P = 2, 4  # arms (on, off), points


# ----------------------------------------------------------------------------- rules (numpy)

def tq(p: float | np.ndarray, df: np.ndarray) -> np.ndarray:
    return np.asarray(sst.t.ppf(p, df))


MODERATE = True  # --no-moderate turns the spread prior off
SATTERTHWAITE_ALWAYS = False  # the rule before issue 29 item 4: the negative correction for more current reps


def _trigamma_inv(y: np.ndarray) -> np.ndarray:
    x = 0.5 + 1.0 / y
    for _ in range(60):
        tri = ssp.polygamma(1, x)
        x = x + tri * (1 - tri / y) / ssp.polygamma(2, x)
    return x


def moderate_np(sm2: np.ndarray, d: float) -> tuple[np.ndarray, np.ndarray]:
    """sm2 (T, m) run-mean variances with d df -> (posterior variances, their df), as stats.spread_prior."""
    m = sm2.shape[1]
    e = np.log(sm2) - ssp.digamma(d / 2) + math.log(d / 2)
    mean = e.mean(1)
    excess = e.var(1, ddof=1) - float(ssp.polygamma(1, d / 2))
    cap = (m - 1) * d
    d0 = np.full(sm2.shape[0], float(cap))
    pos = excess > 0
    d0[pos] = np.minimum(2 * _trigamma_inv(excess[pos]), cap)
    s02 = np.exp(mean + ssp.digamma(d0 / 2) - np.log(d0 / 2))
    return (d0[:, None] * s02[:, None] + d * sm2) / (d0[:, None] + d), np.broadcast_to((d + d0)[:, None], sm2.shape)


def trend_var(x: np.ndarray) -> np.ndarray:
    """Variance about the least-squares line through the last axis (rep order), n - 2 df: RunStats.trend_var."""
    n = x.shape[-1]
    c = np.arange(n) - (n - 1) / 2
    slope = (x * c).sum(-1) / (c * c).sum()
    resid = x - x.mean(-1, keepdims=True) - slope[..., None] * c
    return (resid ** 2).sum(-1) / (n - 2)


def decide_change_np(bm: np.ndarray, bv: np.ndarray, nb: int, cm: np.ndarray, cv: np.ndarray, nc: int,
                     tol: float, alpha: float, min_runs: int = 3, btv: np.ndarray | None = None,
                     ctv: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bm/bv (..., K) baseline run log means/variances; cm/cv (...) current.  -> (fail, pass, p).

    With a leading trial axis and test axes between it and K (``bm.ndim >= 3``), the tests of
    each trial moderate their run-to-run spreads with each other from MODERATE_MIN_RUNS runs on.
    """
    k = bm.shape[-1]
    thr = math.log1p(-tol)
    g = cm - bm.mean(-1)
    df_w = k * (nb - 1) + (nc - 1)
    sw2 = ((nb - 1) * bv.sum(-1) + (nc - 1) * cv) / df_w if df_w else np.zeros_like(cm)
    # the package's F screen: a current run clearly noisier than the history widens its own interval
    sb2 = bv.mean(-1)
    kk = nc - 1
    c = 2.0 / (9.0 * kk)
    crit = max(1.0 - c + float(sst.norm.ppf(0.99)) * math.sqrt(c), 0.0) ** 3
    extra = np.where((cv > sb2 * crit) & (sb2 > 0), (cv - sb2) / nc, 0.0) if nb > 1 else np.zeros_like(cm)
    if k >= min_runs:
        sm2 = bm.var(-1, ddof=1)
        dfm = np.full(sm2.shape, float(k - 1))
        if MODERATE and bm.ndim >= 3 and k >= MODERATE_MIN_RUNS and nc >= MODERATE_MIN_REPS:
            post, dtot = moderate_np(sm2.reshape(sm2.shape[0], -1), float(k - 1))
            sm2, dfm = post.reshape(sm2.shape), dtot.reshape(sm2.shape)
        a1 = sm2 * (1 + 1 / k)
        a2 = sw2 * (1 / nc - 1 / nb)
        if not SATTERTHWAITE_ALWAYS:  # more current reps than the baseline runs: judged as if it had theirs
            a2 = np.maximum(a2, 0.0)
        fw2 = sw2  # the floor's within-run variance: about the rep-order line where every run has 4+ reps
        if btv is not None and ctv is not None and nb >= 4 and nc >= 4:
            fw2 = ((nb - 2) * btv.sum(-1) + (nc - 2) * ctv) / (k * (nb - 2) + nc - 2)
        floor = sm2 / k + fw2 / nc
        comb = a1 + a2 + extra
        den = a1 ** 2 / dfm + a2 ** 2 / df_w + extra ** 2 / max(1, nc - 1)
        v = np.maximum(comb, floor + extra)
        ok_d = (den > 0) & (comb > 0)
        df = np.maximum(1.0, np.where(ok_d, comb ** 2 / np.where(ok_d, den, 1), dfm))
        fthr = thr
    else:
        tau = np.maximum(abs(thr), np.sqrt(sw2))
        v = tau ** 2 * (1 + 1 / k) + sw2 * (1 / nc + (1 / nb) / k) + extra
        df = np.full_like(v, float(df_w) if df_w else np.inf)
        fthr = 3 * thr
    se = np.sqrt(v)
    p = sst.t.cdf((g - fthr) / se, df)
    fail = g + tq(1 - alpha, df) * se < fthr
    ok = (g - tq(0.95, df) * se > 2 * thr) if k >= min_runs else np.zeros_like(fail)
    return fail, ok, p


def holm_any(p: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """p (T, m) -> (any rejection per trial, rejected mask (T, m))."""
    m = p.shape[1]
    order = np.argsort(p, axis=1)
    ps = np.take_along_axis(p, order, 1) * (m - np.arange(m))
    adj_sorted = np.maximum.accumulate(np.minimum(ps, 1.0), axis=1)
    adj = np.empty_like(adj_sorted)
    np.put_along_axis(adj, order, adj_sorted, 1)
    rej = adj <= alpha
    return rej.any(1), rej


def uplift_np(r: np.ndarray, thr: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """r (..., n) paired log ratios -> (pass, fail)."""
    n = r.shape[-1]
    m, s = r.mean(-1), r.std(-1, ddof=1)
    half = float(sst.t.ppf(1 - alpha, n - 1)) * s / math.sqrt(n)
    t = math.log1p(thr)
    return m - half >= t, m + half < t


# ----------------------------------------------------------------------------- the screen (numpy)

def outliers_np(x: np.ndarray, z: float = 5.0, floor: float = 0.02) -> np.ndarray:
    """x (..., n) log values -> flags (..., n), as ``stats.outliers``."""
    n = x.shape[-1]
    if n < 3:
        return np.zeros(x.shape, bool)
    flags = np.zeros(x.shape, bool)
    for i in range(n):
        rest = np.delete(x, i, axis=-1)
        med = np.median(rest, -1)
        scale = np.maximum(1.4826 * np.median(np.abs(rest - med[..., None]), -1), floor)
        flags[..., i] = np.abs(x[..., i] - med) > z * scale
    too_many = flags.sum(-1) > n // 3
    flags[too_many] = False
    return flags


def slots_np(x: np.ndarray, alpha: float = 0.01, min_size: float = 0.10) -> np.ndarray:
    """x (..., P, n) log values of one arm -> flags (..., n), as ``stats.outlying_slots``."""
    p, n = x.shape[-2], x.shape[-1]
    if p < 2 or n < 3:
        return np.zeros(x.shape[:-2] + (n,), bool)
    crit = float(sst.t.ppf(1 - alpha / 2, p * (n - 2)))
    flags = np.zeros(x.shape[:-2] + (n,), bool)
    for i in range(n):
        rest = np.delete(x, i, axis=-1)
        score = (x[..., i] - rest.mean(-1)).mean(-1)
        se = np.sqrt(rest.var(-1, ddof=1).mean(-1) * (1 + 1 / (n - 1)) / p)
        flags[..., i] = (np.abs(score) >= min_size) & ((se == 0) | (np.abs(score) > crit * se))
    flags[flags.sum(-1) > n // 3] = False
    return flags


# ----------------------------------------------------------------------------- campaigns

def slot_positions(n: int, schedule: str) -> np.ndarray:
    """(A, n) slot index of arm a's rep r: ABBA reverses every other block."""
    pos = np.zeros((A, n))
    for r in range(n):
        first = 0 if (schedule == "ab" or r % 2 == 0) else 1
        pos[first, r], pos[1 - first, r] = 2 * r, 2 * r + 1
    return pos


def draw_runs(rng: np.random.Generator, t: int, runs: int, n: int, cv: float, tau: float, drift: float,
              schedule: str) -> np.ndarray:
    """(T, runs, A, P, n) log values of unchanged runs (level 0)."""
    x = rng.normal(0.0, cv, (t, runs, A, P, n))
    x += rng.normal(0.0, tau, (t, runs, A, 1, 1))
    x += -drift * slot_positions(n, schedule)[None, None, :, None, :]
    return x


def screen_and_rerun(rng: np.random.Generator, cur: np.ndarray, truth: np.ndarray, cv: float,
                     drift: float, slots: bool = True) -> np.ndarray:
    """cur (T, A, P, n); truth (T, A, P, 1) the current run's true level (its run effect plus any true
    change): each flagged pair is re-run once — fresh values of both arms, with the same truth (a re-run
    measures the same system; only the bad rep's excursion is gone), in new slots at the end of the schedule."""
    ratios = cur[:, 0] - cur[:, 1]
    flag = outliers_np(ratios) | outliers_np(cur[:, 0]) | outliers_np(cur[:, 1])  # (T, P, n)
    if slots:  # a slot off at every point together: re-run that pair at all points
        flag |= (slots_np(cur[:, 0]) | slots_np(cur[:, 1]))[:, None, :]
    if not flag.any():
        return cur
    n = cur.shape[-1]
    fresh = truth + rng.normal(0.0, cv, cur.shape) - drift * (2 * n + np.arange(A))[None, :, None, None]
    return np.where(flag[:, None], fresh, cur)


def run_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x.mean(-1), x.var(-1, ddof=1)


def campaign_fail(rng: np.random.Generator, t: int, k: int, n: int, cv: float, tau: float, drift: float,
                  schedule: str, *, outlier: bool, screen: bool, offset: tuple[float, float] = (0.0, 0.0),
                  one_scenario: float = 0.0, adaptive_max: int = 0, slots: bool = True) -> dict[str, float]:
    """Per-campaign rates: any primary fails (scenario or uplift), and which kind."""
    base = draw_runs(rng, t, k, n, cv, tau, drift, schedule)
    nmax = max(n, adaptive_max)
    truth = np.broadcast_to(rng.normal(0.0, tau, (t, A, 1, 1)), (t, A, P, 1)).copy()  # run effect per arm
    truth[:, 0] += offset[0]
    truth[:, 1] += offset[1]
    truth[:, 0, P - 1] += one_scenario
    cur_full = rng.normal(0.0, cv, (t, A, P, nmax)) + truth - drift * slot_positions(nmax, schedule)[None, :, None, :]
    if outlier:
        cur_full[:, 0, :, 1] += OUTLIER
    looks = list(range(n, nmax + 1)) if adaptive_max else [n]
    plan = SequentialPlan(ALPHA, n, nmax) if adaptive_max else None
    bm, bv = run_stats(base)  # (T, K, A, P)
    btv = trend_var(base)
    br = base[:, :, 0] - base[:, :, 1]  # (T, K, P, n) paired log ratios per baseline run
    brm, brv = run_stats(br)
    brtv = trend_var(br)
    done = np.zeros(t, bool)
    failed = np.zeros(t, bool)
    fail_sc = np.zeros(t, bool)
    fail_up = np.zeros(t, bool)
    hit = np.zeros(t, bool)
    hit_any = np.zeros(t, bool)
    for nc in looks:
        cur = cur_full[..., :nc]
        if screen and nc >= 3:
            cur = screen_and_rerun(rng, cur, truth, cv, drift, slots)
        alpha = plan.alpha_at(nc) if plan else ALPHA
        cm, cvv = run_stats(cur)  # (T, A, P)
        f1, ok1, p1 = decide_change_np(np.moveaxis(bm, 1, -1), np.moveaxis(bv, 1, -1), n, cm, cvv, nc, TOL, alpha,
                                       btv=np.moveaxis(btv, 1, -1), ctv=trend_var(cur))
        rm, rv = run_stats(cur[:, 0] - cur[:, 1])  # (T, P)
        f2, ok2, p2 = decide_change_np(np.moveaxis(brm, 1, -1), np.moveaxis(brv, 1, -1), n, rm, rv, nc, TOL, alpha,
                                       btv=np.moveaxis(brtv, 1, -1), ctv=trend_var(cur[:, 0] - cur[:, 1]))
        p = np.concatenate([p1.reshape(t, -1), p2.reshape(t, -1)], 1)
        anyrej, rej = holm_any(p, alpha)
        new = anyrej & ~done
        failed |= new
        fail_sc |= new & rej[:, :A * P].any(1)
        fail_up |= new & rej[:, A * P:].any(1)
        hit |= new & rej[:, P - 1]  # the p2p_on scenario at the last point
        hit_any |= new & (rej[:, P - 1] | rej[:, A * P + P - 1])  # ... or the uplift history at that point
        allpass = np.concatenate([ok1.reshape(t, -1), ok2.reshape(t, -1)], 1).all(1)
        done |= anyrej | allpass
        if done.all():
            break
    return {"fail": failed.mean(), "scenario": fail_sc.mean(), "uplift": fail_up.mean(), "hit": hit.mean(),
            "hit_any": hit_any.mean()}


def uplift_rule(rng: np.random.Generator, t: int, true_up: float, cv: float, drift: float, schedule: str,
                n: int, adaptive_max: int = 0, outlier: bool = False) -> tuple[float, float, float]:
    """(pass, fail, inconclusive) rates of the min-uplift rule at one point."""
    nmax = max(n, adaptive_max)
    x = rng.normal(0, cv, (t, A, nmax)) - drift * slot_positions(nmax, schedule)[None]
    x[:, 0] += math.log1p(true_up)
    if outlier:
        x[:, 0, 1] += OUTLIER
    plan = SequentialPlan(UPLIFT_ALPHA, n, nmax) if adaptive_max else None
    res_pass = np.zeros(t, bool)
    res_fail = np.zeros(t, bool)
    done = np.zeros(t, bool)
    for nc in range(n, nmax + 1) if adaptive_max else [n]:
        r = x[:, 0, :nc] - x[:, 1, :nc]
        ps, fl = uplift_np(r, UP_THR, plan.alpha_at(nc) if plan else UPLIFT_ALPHA)
        res_pass |= ps & ~done
        res_fail |= fl & ~done
        done |= ps | fl
    return res_pass.mean(), res_fail.mean(), 1 - done.mean()


# ----------------------------------------------------------------------------- resident arms (starts x windows)

def draw_nested(rng: np.random.Generator, t: int, runs: int, s: int, w: int, cv: float, start_sd: float, tau: float,
                drift: float) -> np.ndarray:
    """(T, runs, A, P, S, W) log values of unchanged resident-arm runs: a run effect per (run, arm) (``tau``),
    a start effect per (run, arm, start) shared by the start's points (``start_sd``), window noise (``cv``) and a
    linear drift over each start's ABBA windows (cancels in the ratio, not in one arm's mean)."""
    x = rng.normal(0.0, cv, (t, runs, A, P, s, w))
    x += rng.normal(0.0, tau, (t, runs, A, 1, 1, 1))
    x += rng.normal(0.0, start_sd, (t, runs, A, 1, s, 1))
    x += -drift * slot_positions(w, "abba")[None, None, :, None, None, :]
    return x


def screen_nested(rng: np.random.Generator, cur: np.ndarray, level: np.ndarray, eff: np.ndarray, cv: float,
                  start_sd: float, drift: float) -> np.ndarray:
    """cur (T, A, P, S, W); level (T, A, P) the run's true level; eff (T, A, 1, S, 1) its start effects.  The
    resident screens as the campaign runs them (``campaign/adaptive.py``): a whole start whose mean ratio sits off
    at some point (``stats.screen_starts``) is started again -- fresh start effects of both arms, fresh windows, at
    every point; then a window pair odd within its start (``stats.screen_windows``) is measured again in that
    start -- the same start effect, fresh noise."""
    s, w = cur.shape[-2], cur.shape[-1]
    pos = -drift * slot_positions(w, "abba")[None, :, None, None, :]
    if s >= 3:
        bad_start = outliers_np((cur[:, 0] - cur[:, 1]).mean(-1)).any(1)  # (T, S): off at some point
        if bad_start.any():
            new_eff = rng.normal(0.0, start_sd, eff.shape)
            eff = np.where(bad_start[:, None, None, :, None], new_eff, eff)
            fresh = level[..., None, None] + eff + rng.normal(0.0, cv, cur.shape) + pos
            cur = np.where(bad_start[:, None, None, :, None], fresh, cur)
    if w >= 3:
        odd = outliers_np(cur[:, 0] - cur[:, 1])  # (T, P, S, W), each window against its own start
        if odd.any():
            fresh = level[..., None, None] + eff + rng.normal(0.0, cv, cur.shape) + pos
            cur = np.where(odd[:, None], fresh, cur)
    return cur


def nested_campaign(rng: np.random.Generator, t: int, k: int, s: int, w: int, cv: float, start_sd: float, tau: float,
                    *, drift: float = 0.002, bad: bool = False, offset: tuple[float, float] = (0.0, 0.0),
                    one_scenario: float = 0.0, screen: bool = True, families: str = "one",
                    alpha: float = ALPHA) -> dict[str, float]:
    """A resident-arm campaign (``s`` starts x ``w`` window pairs a point) against K resident baseline runs.

    Every run's value of (arm, point) is the mean of its ``s * w`` reps (start-major, as the rep files are
    numbered), so :func:`decide_change_np` sees what ``RunStats.of`` sees in the package.  ``bad``: one start of
    p2p_on 20 % low at every point and, in another start, one window 20 % low at the last point, unflagged by
    telemetry.  ``families``: ``one`` (scenarios and uplift histories in one Holm family at ``alpha``).
    """
    base = draw_nested(rng, t, k, s, w, cv, start_sd, tau, drift).reshape(t, k, A, P, s * w)
    level = np.broadcast_to(rng.normal(0.0, tau, (t, A, 1)), (t, A, P)).copy()
    level[:, 0] += offset[0]
    level[:, 1] += offset[1]
    level[:, 0, P - 1] += one_scenario
    eff = rng.normal(0.0, start_sd, (t, A, 1, s, 1))
    cur = (level[..., None, None] + eff + rng.normal(0.0, cv, (t, A, P, s, w))
           - drift * slot_positions(w, "abba")[None, :, None, None, :])
    if bad:
        cur[:, 0, :, s - 1] += OUTLIER
        cur[:, 0, P - 1, 0, w - 1] += OUTLIER
    if screen:
        cur = screen_nested(rng, cur, level, eff, cv, start_sd, drift)
    cur = cur.reshape(t, A, P, s * w)
    n = s * w
    bm, bv = run_stats(base)
    br = base[:, :, 0] - base[:, :, 1]
    brm, brv = run_stats(br)
    cm, cvv = run_stats(cur)
    f1, _, p1 = decide_change_np(np.moveaxis(bm, 1, -1), np.moveaxis(bv, 1, -1), n, cm, cvv, n, TOL, alpha,
                                 btv=np.moveaxis(trend_var(base), 1, -1), ctv=trend_var(cur))
    rc = cur[:, 0] - cur[:, 1]
    rm, rv = run_stats(rc)
    f2, _, p2 = decide_change_np(np.moveaxis(brm, 1, -1), np.moveaxis(brv, 1, -1), n, rm, rv, n, TOL, alpha,
                                 btv=np.moveaxis(trend_var(br), 1, -1), ctv=trend_var(rc))
    return _family_rates(p1.reshape(t, -1), p2.reshape(t, -1), families, alpha)


def _family_rates(p1: np.ndarray, p2: np.ndarray, families: str, alpha: float) -> dict[str, float]:
    """Per-campaign rates from the scenario p-values p1 (T, A*P) and the uplift-history p-values p2 (T, P)."""
    if families == "one":
        anyrej, rej = holm_any(np.concatenate([p1, p2], 1), alpha)
        r1, r2 = rej[:, :A * P], rej[:, A * P:]
    elif families == "scenarios":  # the uplift histories as information: only the 8 scenarios share alpha
        anyrej, r1 = holm_any(p1, alpha)
        r2 = np.zeros_like(p2, bool)
    else:
        raise ValueError(families)
    hit = r1[:, P - 1]
    return {"fail": anyrej.mean(), "scenario": r1.any(1).mean(), "uplift": r2.any(1).mean(), "hit": hit.mean(),
            "hit_any": (hit | r2[:, P - 1]).mean()}


# ----------------------------------------------------------------------------- fidelity check

def fidelity(rng: np.random.Generator, trials: int = 300) -> None:
    bad = 0
    for i in range(trials):
        k = int(rng.choice([1, 2, 3, 5, 10]))
        nb, nc = 3, int(rng.choice([3, 4, 6]))
        base = rng.normal(0, rng.uniform(0.005, 0.08), (k, nb)) + rng.normal(0, 0.02, (k, 1))
        cur = rng.normal(rng.normal(0, 0.06), 0.03, nc)
        runs = [RunStats.of(list(np.exp(b))) for b in base]
        d = decide_change(runs, RunStats.of(list(np.exp(cur))), tolerance=TOL, alpha=ALPHA)
        f, ok, p = decide_change_np(base.mean(1), base.var(1, ddof=1), nb, np.array(cur.mean()),
                                    np.array(cur.var(ddof=1)), nc, TOL, ALPHA, btv=trend_var(base),
                                    ctv=np.array(trend_var(cur)))
        want = "fail" if f else ("pass" if ok else "inconclusive")
        if want != d.outcome.value or abs(float(p) - (d.p_value or 0)) > 1e-6:
            bad += 1
        r = rng.normal(0.05, 0.05, 4)
        u = decide_uplift(list(np.exp(r)), [1.0] * 4, threshold=UP_THR, alpha=UPLIFT_ALPHA)
        ps, fl = uplift_np(r, UP_THR, UPLIFT_ALPHA)
        if (u.outcome is Outcome.PASS) != bool(ps) or (u.outcome is Outcome.FAIL) != bool(fl):
            bad += 1
        if i % 30 == 0:  # Holm against the package
            pv = rng.uniform(0, 0.02, 12)
            ds = [decide_change(runs, RunStats.of(list(np.exp(cur))), tolerance=TOL, alpha=ALPHA)] * 12
            ds = [type(ds[0])(**{**d.__dict__, "p_value": float(x), "outcome": Outcome.FAIL}) for x in pv]
            pkg = np.array([x.outcome is Outcome.FAIL for x in family_wise(ds, ALPHA)])
            _, rej = holm_any(pv[None], ALPHA)
            bad += int((pkg != rej[0]).any())
    for _ in range(trials // 3):  # the spread prior: 8 tests of K >= 10 runs, against stats.spread_prior
        k, m, nb, nc = int(rng.choice([10, 12, 30])), 8, 4, int(rng.choice([4, 6]))
        base = rng.normal(0, 0.03, (m, k, nb)) + rng.normal(0, rng.uniform(0, 0.03, (m, 1, 1)), (m, k, 1))
        cur = rng.normal(rng.normal(0, 0.06, (m, 1)), 0.03, (m, nc))
        hists = [[RunStats.of(list(np.exp(b))) for b in base[i]] for i in range(m)]
        bms = base.mean(2)
        prior = spread_prior([(float(bm.var(ddof=1)), float(k - 1)) for bm in bms])
        f, ok, p = decide_change_np(bms[None], base.var(2, ddof=1)[None], nb, cur.mean(1)[None],
                                    cur.var(1, ddof=1)[None], nc, TOL, ALPHA, btv=trend_var(base)[None],
                                    ctv=trend_var(cur)[None])
        for i in range(m):
            d = decide_change(hists[i], RunStats.of(list(np.exp(cur[i]))), tolerance=TOL, alpha=ALPHA, prior=prior)
            want = "fail" if f[0, i] else ("pass" if ok[0, i] else "inconclusive")
            bad += int(want != d.outcome.value or abs(float(p[0, i]) - (d.p_value or 0)) > 1e-6)
    for _ in range(trials):
        n_pts, n_reps = int(rng.choice([2, 4])), int(rng.choice([3, 4, 6]))
        x = rng.normal(0, rng.uniform(0.01, 0.08), (n_pts, n_reps))
        if rng.uniform() < 0.5:
            x[:, int(rng.integers(n_reps))] += rng.choice([OUTLIER, -OUTLIER / 2])
        pkg = outlying_slots(np.exp(x).tolist())
        mine = list(np.flatnonzero(slots_np(x[None])[0]))
        bad += int(pkg != mine)
    for _ in range(trials // 3):  # resident runs: 3 starts x 4 windows, judged as 12 reps; the resident screens
        s_, w_, k = 3, 4, int(rng.choice([3, 10]))
        base = (rng.normal(0, 0.025, (k, s_, w_)) + rng.normal(0, 0.01, (k, s_, 1))
                + rng.normal(0, 0.01, (k, 1, 1))).reshape(k, s_ * w_)
        cur = rng.normal(rng.normal(0, 0.06), 0.025, (s_, w_)) + rng.normal(0, 0.01, (s_, 1))
        if rng.uniform() < 0.5:
            cur[int(rng.integers(s_))] += OUTLIER
        if rng.uniform() < 0.5:
            cur[int(rng.integers(s_)), int(rng.integers(w_))] += OUTLIER
        flat = cur.reshape(-1)
        d = decide_change([RunStats.of(list(np.exp(b))) for b in base], RunStats.of(list(np.exp(flat))),
                          tolerance=TOL, alpha=ALPHA)
        f, ok, p = decide_change_np(base.mean(1), base.var(1, ddof=1), s_ * w_, np.array(flat.mean()),
                                    np.array(flat.var(ddof=1)), s_ * w_, TOL, ALPHA, btv=trend_var(base),
                                    ctv=np.array(trend_var(flat)))
        want = "fail" if f else ("pass" if ok else "inconclusive")
        bad += int(want != d.outcome.value or abs(float(p) - (d.p_value or 0)) > 1e-6)
        off = rng.normal(0, 0.025, (s_, w_))
        blocks = [[(math.exp(a), math.exp(b)) for a, b in zip(cur[i], off[i], strict=True)] for i in range(s_)]
        ratio = (cur - off)[None, None]  # (T, P, S, W)
        mine_s = list(np.flatnonzero(outliers_np(ratio.mean(-1))[0, 0]))
        mine_w = [(int(b), int(w)) for b, w in zip(*np.nonzero(outliers_np(ratio)[0, 0]), strict=True)]
        bad += int(screen_starts(blocks) != mine_s) + int(screen_windows(blocks) != mine_w)
    if bad:
        raise SystemExit(f"fidelity: {bad} disagreements between numpy rules and the package")
    print(f"fidelity: numpy rules agree with pytest_p2p.stats on {trials} random cases (+ Holm, spread prior, "
          "slot screen, resident runs of 3 starts x 4 windows and their start/window screens)")


# ----------------------------------------------------------------------------- report

def pct(x: float) -> str:
    return f"{100 * x:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer cells (smoke)")
    ap.add_argument("--tables", default="1,2,3,4,5,6,7,8", help="which tables to compute (comma-separated)")
    ap.add_argument("--no-moderate", action="store_true", help="without the run-to-run spread prior")
    args = ap.parse_args()
    global MODERATE
    MODERATE = not args.no_moderate
    tables = {int(x) for x in args.tables.split(",")}
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    fidelity(rng)
    t = args.trials
    ks = [1, 3, 10, 30]
    cvs = [0.01, 0.03, 0.05, 0.08] if not args.quick else [0.03]
    taus = [0.0, 0.01, 0.02, 0.03] if not args.quick else [0.03]
    if 1 in tables:
        table_false_alarms(rng, t, ks, cvs, taus)
    if 2 in tables:
        table_detection(rng, t)
    if 3 in tables:
        table_day_vs_p2p(rng, t)
    if 4 in tables:
        table_uplift_rule(rng, t)
    if 5 in tables:
        table_slot_screen(rng, t)
    if 6 in tables:
        table_power_defaults(rng, t, args.quick)
    if 7 in tables:
        table_power_note(rng, min(t, 1000))
    if 8 in tables:
        table_more_reps(rng, t)
    print(f"\nelapsed {time.time() - t0:.0f} s")


def table_false_alarms(rng: np.random.Generator, t: int, ks: list[int], cvs: list[float], taus: list[float]) -> None:
    print(f"\n## 1. Unchanged campaigns that fail (per campaign, %), {t} trials a cell")
    print("12 primary tests (8 scenarios + 4 uplift histories), Holm at 1 %, ABBA, drift 0.5 %/slot, one unflagged "
          "-20 % rep (one slot of p2p_on, all points) in the current run; n = reps per arm of every run; "
          "'screens on' = per-point and slot screens, 'per-point only' = without the slot screen\n")
    print("| K | within CV | run-to-run | n=4 screens on: fail | (scenario / uplift) | n=4 per-point only "
          "| n=3 screens on | n=4 no screen |")
    print("|---|---|---|---|---|---|---|---|")
    worst = {4: 0.0, 3: 0.0, 0: 0.0}
    for k in ks:
        for cv in cvs:
            for tau in taus:
                on = campaign_fail(rng, t, k, 4, cv, tau, 0.005, "abba", outlier=True, screen=True)
                pp = campaign_fail(rng, t, k, 4, cv, tau, 0.005, "abba", outlier=True, screen=True, slots=False)
                on3 = campaign_fail(rng, t, k, 3, cv, tau, 0.005, "abba", outlier=True, screen=True)
                off = campaign_fail(rng, t, k, 4, cv, tau, 0.005, "abba", outlier=True, screen=False)
                worst[4] = max(worst[4], on["fail"])
                worst[3] = max(worst[3], on3["fail"])
                worst[0] = max(worst[0], pp["fail"])
                print(f"| {k} | {cv:.0%} | {tau:.0%} | {pct(on['fail'])} | {pct(on['scenario'])} / "
                      f"{pct(on['uplift'])} | {pct(pp['fail'])} | {pct(on3['fail'])} | {pct(off['fail'])} |",
                      flush=True)
    print(f"\nworst unchanged-campaign failure rate, screens on: n=4 {pct(worst[4])} %, n=3 {pct(worst[3])} %; "
          f"per-point screen only, n=4: {pct(worst[0])} %")


def table_detection(rng: np.random.Generator, t: int) -> None:
    print("\n## 2. Detection of a true -10 % drop of the primary (%), within CV <= 3 %")
    print("(a) in every scenario (system regression): any primary fails; (b) in one scenario only (p2p_on at c8): "
          "that scenario fails; (b any) that scenario or its uplift history fails.  n = reps of every run, "
          "baseline and current (the baseline verdict is one look at the end of the campaign)\n")
    print("| K | within CV | run-to-run | (a) n=3 | (a) n=4 | (a) n=6 | (b) n=3 | (b) n=4 | (b) n=6 | (b any) n=6 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    drop = math.log(0.9)
    for k in (10, 30):
        for cv in (0.01, 0.02, 0.03):
            for tau in (0.0, 0.01, 0.02):
                a_cells, b_cells = [], []
                last_any = ""
                for n in (3, 4, 6):
                    a = campaign_fail(rng, t, k, n, cv, tau, 0.005, "abba", outlier=False, screen=True,
                                      offset=(drop, drop))
                    b = campaign_fail(rng, t, k, n, cv, tau, 0.005, "abba", outlier=False, screen=True,
                                      one_scenario=drop)
                    a_cells.append(pct(a["fail"]))
                    b_cells.append(pct(b["hit"]))
                    last_any = pct(b["hit_any"])
                print(f"| {k} | {cv:.0%} | {tau:.0%} | " + " | ".join([*a_cells, *b_cells, last_any]) + " |",
                      flush=True)


def table_day_vs_p2p(rng: np.random.Generator, t: int) -> None:
    print("\n## 3. Both arms 3 % slower (a slower day) vs P2P-only loss (p2p_on -4 %), K = 10, 4 reps, screen on")
    print("| within CV | run-to-run | both -3 %: any fail | of which uplift | p2p_on -4 %: uplift history fails |"
          " any fail |")
    print("|---|---|---|---|---|---|")
    for cv in (0.01, 0.03):
        for tau in (0.0, 0.01, 0.02):
            both = campaign_fail(rng, t, 10, 4, cv, tau, 0.005, "abba", outlier=False, screen=True,
                                 offset=(math.log(0.97), math.log(0.97)))
            only = campaign_fail(rng, t, 10, 4, cv, tau, 0.005, "abba", outlier=False, screen=True,
                                 offset=(math.log(0.96), 0.0))
            print(f"| {cv:.0%} | {tau:.0%} | {pct(both['fail'])} | {pct(both['uplift'])} | {pct(only['uplift'])} |"
                  f" {pct(only['fail'])} |", flush=True)


def table_uplift_rule(rng: np.random.Generator, t: int) -> None:
    print(f"\n## 4. Minimum-uplift rule (threshold +5 %, alpha 1 % per wrong verdict), {t} trials a cell")
    print("pass / fail / inconclusive %, drift 0.5 %/slot; 'fixed 4' = 4 pairs ABBA, 'adaptive' = 3..6 pairs "
          "ABBA with alpha spending; 'AB 3' = the old AB-AB-AB with 3 pairs\n")
    print("| per-rep CV | true uplift | fixed 4 (ABBA) | adaptive 3..6 | AB 3 | ABBA 4 + outlier rep |")
    print("|---|---|---|---|---|---|")
    worst_wrong = 0.0
    for cv in (0.01, 0.03, 0.05, 0.08):
        for up in (0.0, 0.02, 0.04, 0.05, 0.06, 0.08, 0.10):
            cells = []
            for n, adapt, sched, outl in ((4, 0, "abba", False), (3, 6, "abba", False), (3, 0, "ab", False),
                                          (4, 0, "abba", True)):
                ps, fl, inc = uplift_rule(rng, t, up, cv, 0.005, sched, n, adapt, outl)
                cells.append(f"{pct(ps)} / {pct(fl)} / {pct(inc)}")
                if abs(up - UP_THR) >= 0.03 - 1e-9 and not outl:
                    worst_wrong = max(worst_wrong, fl if up >= UP_THR else ps)
            print(f"| {cv:.0%} | {up:+.0%} | " + " | ".join(cells) + " |")
    print(f"\nworst wrong-verdict rate at >= 3 pp from the threshold (no outlier): {pct(worst_wrong)} %")


def table_slot_screen(rng: np.random.Generator, t: int) -> None:
    print(f"\n## 5. The slot screen alone (stats.outlying_slots), 4 points, drift 0.5 %/slot (ABBA), "
          f"{t} campaigns a cell")
    print("| reps | within CV | unchanged: a slot re-run (either arm, % of campaigns) | one -20 % slot: found (%) |")
    print("|---|---|---|---|")
    for n in (3, 4, 6):
        pos = slot_positions(n, "abba")
        for cv in (0.01, 0.03, 0.05, 0.08):
            x = rng.normal(0.0, cv, (t, A, P, n)) - 0.005 * pos[None, :, None, :]
            null = (slots_np(x[:, 0]) | slots_np(x[:, 1])).any(-1).mean()
            x[:, 0, :, 1] += OUTLIER
            found = slots_np(x[:, 0])[:, 1].mean()
            print(f"| {n} | {cv:.0%} | {pct(null)} | {pct(found)} |", flush=True)


def table_power_defaults(rng: np.random.Generator, t: int, quick: bool = False) -> None:
    """Issue 29, item 4: the defaults against the goal, K = 10, for each campaign design."""
    drop = math.log(0.9)
    print(f"\n## 6. Power at the defaults (issue 29): K = 10 baseline runs, {t} campaigns a cell")
    print("12 primary tests (8 scenarios + 4 uplift histories) in one Holm family at 1 %, spread prior on. "
          "'one' = a -10 % drop of p2p_on at the last point only: that scenario fails (or its uplift history); "
          "'system' = both arms -10 % everywhere: the campaign fails; 'unchanged' = nothing changed but the current "
          "run has a bad stretch nobody flagged (resident: one p2p_on start -20 % at every point and one window "
          "-20 %; restart: one p2p_on rep -20 % at every point), screens on: the campaign fails.  Resident rows: "
          "window noise per arm (CV), start sd, run-to-run sd; 12 reps = 3 starts x 4 windows (the default).  "
          "Restart rows: a server start per rep, its start effect inside the per-rep CV.\n")
    print("| design | reps/run | within CV | start sd | run-to-run | one: scenario fails | (or its uplift) | "
          "system: fails | unchanged: fails |")
    print("|---|---|---|---|---|---|---|---|---|")
    cvs = (0.01, 0.025, 0.03) if not quick else (0.025,)
    taus = (0.0, 0.01, 0.02) if not quick else (0.01,)
    worst: dict[str, tuple[float, float]] = {}
    designs = [("resident 3x4 (default)", 3, 4), ("resident 2x4", 2, 4), ("resident 3x2", 3, 2)]
    for name, s_, w_ in designs if not quick else designs[:1]:
        for cv in cvs:
            for sd in (0.0, 0.01):
                for tau in taus:
                    one = nested_campaign(rng, t, 10, s_, w_, cv, sd, tau, one_scenario=drop)
                    sysw = nested_campaign(rng, t, 10, s_, w_, cv, sd, tau, offset=(drop, drop))
                    null = nested_campaign(rng, t, 10, s_, w_, cv, sd, tau, bad=True)
                    if tau <= 0.01:
                        lo, hi = worst.get(name, (1.0, 0.0))
                        worst[name] = (min(lo, one["hit"]), max(hi, null["fail"]))
                    print(f"| {name} | {s_ * w_} | {cv:.1%} | {sd:.0%} | {tau:.0%} | {pct(one['hit'])} | "
                          f"{pct(one['hit_any'])} | {pct(sysw['fail'])} | {pct(null['fail'])} |", flush=True)
    for n in (3, 4, 8) if not quick else (4,):
        name = f"restart {n} reps" + (" (old default)" if n == 4 else "")
        for cv in cvs:
            for tau in taus:
                one = campaign_fail(rng, t, 10, n, cv, tau, 0.005, "abba", outlier=False, screen=True,
                                    one_scenario=drop)
                sysw = campaign_fail(rng, t, 10, n, cv, tau, 0.005, "abba", outlier=False, screen=True,
                                     offset=(drop, drop))
                null = campaign_fail(rng, t, 10, n, cv, tau, 0.005, "abba", outlier=True, screen=True)
                if tau <= 0.01:
                    lo, hi = worst.get(name, (1.0, 0.0))
                    worst[name] = (min(lo, one["hit"]), max(hi, null["fail"]))
                print(f"| {name} | {n} | {cv:.1%} | - | {tau:.0%} | {pct(one['hit'])} | {pct(one['hit_any'])} | "
                      f"{pct(sysw['fail'])} | {pct(null['fail'])} |", flush=True)
    print("\nrun-to-run <= 1 %, every CV and start sd above: design -> (lowest one-scenario detection, highest "
          "unchanged failure rate)")
    for name, (lo, hi) in worst.items():
        print(f"- {name}: {pct(lo)} % found, {pct(hi)} % false alarms")
    if quick:
        return
    print("\nLevers at the hardest corners (run-to-run 1 %, start sd 1 %): one-scenario found / unchanged fails, %\n")
    print("| lever | CV 2.5 % | CV 3 % |")
    print("|---|---|---|")
    for name, s_, w_, fam in (("defaults: 3 starts x 4 windows, 12 tests in one family", 3, 4, "one"),
                              ("uplift histories not primary (8 tests share alpha)", 3, 4, "scenarios"),
                              ("4 starts x 4 windows", 4, 4, "one"), ("3 starts x 6 windows", 3, 6, "one")):
        cells = []
        for cv in (0.025, 0.03):
            one = nested_campaign(rng, t, 10, s_, w_, cv, 0.01, 0.01, one_scenario=drop, families=fam)
            null = nested_campaign(rng, t, 10, s_, w_, cv, 0.01, 0.01, bad=True, families=fam)
            cells.append(f"{pct(one['hit'])} / {pct(null['fail'])}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def table_power_note(rng: np.random.Generator, t: int) -> None:
    """How often the verdict's power note fires, from the package's own ``detection_power`` (no mirror needed)."""
    from pytest_p2p.stats.baseline import GOAL_POWER, detection_power, run_spread

    print(f"\n## 7. The verdict's power note (campaign_judge._power), resident 3 starts x 4 windows, K = 10, {t} "
          "baselines a cell")
    print("'estimated' = the mean over trials of the campaign's estimate (mean of its 8 scenario powers, "
          "stats.baseline.detection_power with the campaign's spread prior, 12 tests share alpha); 'note fires' = "
          "share of campaigns whose mean estimate is below 95 % (the rule) and, for comparison, whose weakest "
          "scenario's estimate is; the simulated power is table 6's 'one: scenario fails'\n")
    print("| within CV | start sd | run-to-run | estimated power | note fires (mean < 95 %) | (weakest < 95 %) |")
    print("|---|---|---|---|---|---|")
    for cv, sd, tau in ((0.02, 0.0, 0.005), (0.025, 0.0, 0.0), (0.025, 0.0, 0.01), (0.03, 0.0, 0.01),
                        (0.03, 0.01, 0.01), (0.025, 0.0, 0.02)):
        base = draw_nested(rng, t, 10, 3, 4, cv, sd, tau, 0.002).reshape(t, 10, A, P, 12)
        est, mean_low, min_low = 0.0, 0, 0
        for i in range(t):
            tests = [[RunStats.of(list(np.exp(base[i, r, a, p]))) for r in range(10)] for a in range(A)
                     for p in range(P)]
            prior = spread_prior([run_spread(x) for x in tests])
            pw = [detection_power(x, 12, tolerance=TOL, alpha=ALPHA, tests=12, prior=prior) or 0.0 for x in tests]
            m = sum(pw) / len(pw)
            est += m
            mean_low += m < GOAL_POWER
            min_low += min(pw) < GOAL_POWER
        print(f"| {cv:.1%} | {sd:.0%} | {tau:.1%} | {pct(est / t)} | {pct(mean_low / t)} | {pct(min_low / t)} |",
              flush=True)


def table_more_reps(rng: np.random.Generator, t: int) -> None:
    """A current run with more reps than its baseline runs (adaptive pairs): the df rule before and now."""
    global SATTERTHWAITE_ALWAYS
    print(f"\n## 8. Current run with more reps than its 4-rep baseline runs (adaptive pairs), K = 10, one test, "
          f"{t} trials a cell")
    print("'-10 %' = a true -10 % drop fails at alpha 1 %/12 (Holm's first step of a 12-test campaign); 'at -3 %' = "
          "a true drop exactly at the tolerance fails at alpha 1 % (the worst case of a false alarm, <= 1 % by "
          "design); before = the within-run correction also when negative (Welch-Satterthwaite df of a difference), "
          "now = a current run with more reps judged as if it had the baseline runs' (K - 1 df)\n")
    print("| within CV | run-to-run | current reps | -10 %: before | -10 %: now | at -3 %: before | at -3 %: now |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for cv in (0.01, 0.03, 0.08):
        for tau in (0.0, 0.01, 0.03):
            base = rng.normal(0.0, cv, (t, 10, 4)) + rng.normal(0.0, tau, (t, 10, 1))
            bm, bv, btv = base.mean(-1), base.var(-1, ddof=1), trend_var(base)
            for nc in (4, 6, 8, 12):
                noise = rng.normal(0.0, cv, (t, nc)) + rng.normal(0.0, tau, (t, 1))
                cells = []
                for shift, alpha in ((math.log(0.9), ALPHA / 12), (math.log(0.97), ALPHA)):
                    cur = noise + shift
                    for old in (True, False):
                        SATTERTHWAITE_ALWAYS = old
                        f, _, _ = decide_change_np(bm, bv, 4, cur.mean(-1), cur.var(-1, ddof=1), nc, TOL, alpha,
                                                   btv=btv, ctv=trend_var(cur))
                        cells.append(pct(float(f.mean())))
                        if not old and alpha == ALPHA:
                            worst = max(worst, float(f.mean()))
                SATTERTHWAITE_ALWAYS = False
                print(f"| {cv:.0%} | {tau:.0%} | {nc} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nworst false-alarm rate at the tolerance, now: {pct(worst)} %")


if __name__ == "__main__":
    main()
