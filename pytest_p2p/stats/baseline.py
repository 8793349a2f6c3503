"""A run against its history: the run is the unit, the decision is on confidence bounds.

Why the run is the unit: on a GPU server the spread between runs (a different boot,
clock state, neighbour load) is usually larger than the spread between the reps of one
run.  Treating K baseline runs x n reps as K*n independent values makes ordinary
run-to-run variation look like a regression.  Here each run contributes its mean (of
log values), and the current run's mean is judged as *one new run*:

* ``s_m^2`` — sample variance of the K baseline run means (K-1 degrees of freedom): it
  estimates ``tau^2 + sigma^2 / n_b`` (run-to-run plus within-run noise of a run mean);
* the prediction variance of ``current - mean(baseline)`` is
  ``V = s_m^2 * (1 + 1/K) + sigma^2 * (1/n_c - 1/n_b)``, where the second term (pooled
  within-run ``sigma^2``) corrects for a current run with more or fewer reps than the
  baseline runs (adaptive reps).  When ``n_c == n_b`` this is the textbook prediction
  interval with exactly K-1 degrees of freedom; with fewer current reps, Welch-Satterthwaite
  degrees of freedom of that linear combination, each variance counted once; with more, the
  second term is left out (conservative, K-1 df: Satterthwaite collapses for a difference).

Decision, with ``gain`` the change in the good direction (``+`` better) and the
tolerance ``tol`` (a drop smaller than it is not worth failing for):

* ``FAIL`` (regression) when the one-sided ``1 - alpha`` upper bound of the gain is
  below ``-tol``: the *bound* clears the tolerance, so a true drop smaller than the
  tolerance fails with probability at most ``alpha``; ``p_value`` is that test's, for
  Holm's correction over the campaign (:func:`family_wise`).
* ``PASS`` when the one-sided 95 % lower bound of the gain is above ``-2 * tol`` (a drop
  of twice the tolerance is ruled out), else ``INCONCLUSIVE`` with the reps that would
  give 95 % power against such a drop.
* With :data:`~pytest_p2p.stats.moderate.MODERATE_MIN_RUNS` or more baseline runs (and
  ``MODERATE_MIN_REPS`` reps in the current run), a
  ``prior`` fitted to the campaign's other tests (:mod:`.moderate`) moderates ``s_m^2``
  and adds its degrees of freedom.
* Fewer than ``min_runs`` (3) baseline runs: the run-to-run spread cannot be estimated.
  The verdict is ``INCONCLUSIVE`` ("baseline too short: N runs") unless the change is far
  beyond the tolerance: ``FAIL`` when the upper bound of the gain is below ``-3 * tol``,
  computed with an *assumed* run-to-run spread equal to ``max(tol, within-run spread)``
  (never zero, never the within-run spread alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

from .decide import POWER, Decision, Outcome
from .moderate import MODERATE_MIN_REPS, MODERATE_MIN_RUNS, SpreadPrior
from .multiplicity import holm_adjust
from .tdist import StatsError, t_cdf, t_quantile, z_quantile

MIN_RUNS = 3
#: the goal the defaults are chosen for (issue 29, docs/baselines.md "Power at the defaults"): a drop of
#: GOAL_DROP confined to one scenario fails the campaign with probability GOAL_POWER at K = 10 baseline runs
GOAL_DROP = 0.10
GOAL_POWER = 0.95
FAR_FACTOR = 3.0
DETECT_FACTOR = 2.0
MAX_REPS = 200


@dataclass(frozen=True)
class RunStats:
    """One run of one metric on the log scale: mean, variance (``None`` below 2 reps), reps.

    ``trend_var`` is the variance about a straight line through the reps in their order
    (n - 2 df; ``None`` below 4 reps -- with 3 it has one degree of freedom and a chance
    straight line would zero it -- or from a stored summary).  Thermal drift over a
    campaign adds to ``log_var`` but not to the uncertainty of the mean of an ABBA
    schedule (the drift cancels, and baseline and current share the schedule), so the
    floor of the prediction variance uses it where every run has it.
    """

    log_mean: float
    log_var: float | None
    n: int
    trend_var: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> RunStats:
        xs = [float(x) for x in values]
        if not xs or any(not math.isfinite(x) or x <= 0 for x in xs):
            raise StatsError(f"a run needs positive finite values, got {values!r}")
        logs = [math.log(x) for x in xs]
        m = math.fsum(logs) / len(logs)
        n = len(logs)
        var = math.fsum((x - m) ** 2 for x in logs) / (n - 1) if n > 1 else None
        trend = None
        if n >= 4:
            c = [i - (n - 1) / 2 for i in range(n)]
            slope = math.fsum(ci * x for ci, x in zip(c, logs, strict=True)) / math.fsum(ci * ci for ci in c)
            trend = math.fsum((x - m - slope * ci) ** 2 for ci, x in zip(c, logs, strict=True)) / (n - 2)
        return cls(m, var, n, trend)

    @classmethod
    def of_summary(cls, mean: float, std: float | None, n: int) -> RunStats:
        """From a stored (mean, std, n): log mean ~ log(mean), log variance ~ CV^2 (delta method)."""
        if not math.isfinite(mean) or mean <= 0 or n < 1:
            raise StatsError(f"a run summary needs a positive mean and n >= 1, got {mean!r}, n={n}")
        var = (std / mean) ** 2 if std is not None and n > 1 else None
        return cls(math.log(mean), var, int(n))


def _gain_threshold(tol: float, higher_is_better: bool) -> float:
    """Log gain at which the metric is worse by ``tol``: ``log(1-tol)`` or ``-log(1+tol)``."""
    return math.log1p(-min(tol, 0.99)) if higher_is_better else -math.log1p(tol)


def _pooled_within(runs: Sequence[RunStats]) -> tuple[float, int]:
    num = math.fsum((r.n - 1) * r.log_var for r in runs if r.log_var is not None and r.n > 1)
    df = sum(r.n - 1 for r in runs if r.log_var is not None and r.n > 1)
    return (num / df if df else 0.0), df


def run_spread(runs: Sequence[RunStats]) -> tuple[float, float]:
    """``(s_m^2, df)``: the variance of the runs' log means and its K - 1 degrees of freedom (K >= 2)."""
    k = len(runs)
    mean = math.fsum(r.log_mean for r in runs) / k
    return math.fsum((r.log_mean - mean) ** 2 for r in runs) / (k - 1), float(k - 1)


def _moderates(prior: SpreadPrior | None, k: int, cur_n: int) -> SpreadPrior | None:
    """``prior`` where it applies: MODERATE_MIN_RUNS baseline runs and MODERATE_MIN_REPS current reps."""
    return prior if k >= MODERATE_MIN_RUNS and cur_n >= MODERATE_MIN_REPS else None


def _pooled_trend(runs: Sequence[RunStats]) -> float | None:
    """Pooled variance about each run's rep-order line, when every run has one (else ``None``)."""
    if not runs or any(r.trend_var is None for r in runs):
        return None
    return math.fsum((r.n - 2) * (r.trend_var or 0.0) for r in runs) / sum(r.n - 2 for r in runs)


def _noisy_current(current: RunStats, sw2: float, df_w: int) -> float:
    """Extra variance of a current run clearly noisier than the history (0 otherwise).

    An F screen at 1 % (chi-square approximation, ample here): when the current run's own
    rep variance exceeds the pooled one by more than chance allows (a rep hit by a
    neighbour's job, a throttled rep nobody flagged), its mean is less certain than the
    history says, so the excess widens its own interval instead of raising a false alarm.
    """
    if current.log_var is None or current.n < 2 or df_w == 0 or sw2 <= 0:
        return 0.0
    k = current.n - 1
    z = z_quantile(0.99)
    c = 2.0 / (9.0 * k)
    crit = max(1.0 - c + z * math.sqrt(c), 0.0) ** 3
    return (current.log_var - sw2) / current.n if current.log_var > sw2 * crit else 0.0


def _variance(base: Sequence[RunStats], cur_n: int, sw2: float, df_w: int, tol_log: float,
              extra: float = 0.0, prior: SpreadPrior | None = None,
              floor_w2: float | None = None) -> tuple[float, float, float, float]:
    """``(V, df, s_m, tau)``: prediction variance of current minus baseline mean, and its df.

    ``extra`` (:func:`_noisy_current`) is added with ``cur_n - 1`` degrees of freedom;
    ``prior`` moderates the spread of the run means from ``MODERATE_MIN_RUNS`` runs on.
    """
    k = len(base)
    inv_nb = math.fsum(1.0 / b.n for b in base) / k
    if k >= MIN_RUNS:
        sm2, dfm = run_spread(base)
        if (lent := _moderates(prior, k, cur_n)) is not None:
            sm2, dfm = lent.moderate(sm2, dfm)
        a1 = sm2 * (1.0 + 1.0 / k)
        # A current run with more reps than its baseline runs (adaptive pairs) is judged as if it had theirs:
        # the negative correction would be right on average, but Welch-Satterthwaite for a *difference* of
        # mean squares collapses (df 2.5 at 8 reps against 4-rep runs) and cut the power to find a -10 % drop
        # from 48 % to 12 %; without it, s_m^2 (1 + 1/K) over-covers the variance and its K - 1 df are exact
        # (docs/baselines.md, table 8).
        a2 = max(0.0, sw2 * (1.0 / cur_n - inv_nb)) if df_w else 0.0
        floor = sm2 / k + (sw2 if floor_w2 is None else floor_w2) / cur_n
        tau = math.sqrt(max(0.0, sm2 - sw2 * inv_nb))
        # Floor: the current mean is never known better than its own reps allow (their spread about
        # the rep-order line where every run has one: drift is no uncertainty of an ABBA mean).  The degrees
        # of freedom stay those of the estimated combination: run means that agree closely by
        # chance (K - 1 = 2 df) must not buy the many df of the within-run variance.
        comb, den = a1 + a2 + extra, a1 * a1 / dfm + (a2 * a2 / df_w if df_w else 0.0)
        if extra > 0:
            den += extra * extra / max(1, cur_n - 1)
        v = max(comb, floor + extra)
        df = comb * comb / den if den > 0 and comb > 0 else dfm
        return v, max(1.0, df), math.sqrt(sm2), tau
    # too short: assume the run-to-run spread, do not estimate it
    tau = max(abs(tol_log), math.sqrt(sw2))
    v = tau * tau * (1.0 + 1.0 / k) + sw2 * (1.0 / cur_n + inv_nb / k) + extra
    return v, float(df_w) if df_w else math.inf, math.sqrt(sw2), tau


def decide_change(baseline: Sequence[RunStats], current: RunStats, *, tolerance: float,
                  higher_is_better: bool = True, alpha: float, quantity: str = "change",
                  min_runs: int = MIN_RUNS, prior: SpreadPrior | None = None) -> Decision:
    """Judge ``current`` against the ``baseline`` runs (see the module doc).

    ``estimate``/``lower``/``upper``/``threshold`` are *gains* (fractions, ``+`` = better:
    ``cur/base - 1`` for higher-is-better metrics, ``base/cur - 1`` for lower-is-better).
    ``detail``-like figures (se, df, spreads) are in the reason text.
    """
    if not 0 < alpha < 0.5:
        raise StatsError(f"alpha must be in (0, 0.5), got {alpha}")
    if not 0 <= tolerance < 1:
        raise StatsError(f"tolerance must be in [0, 1), got {tolerance}")
    k = len(baseline)
    level = 1 - 2 * alpha
    thr = _gain_threshold(tolerance, higher_is_better)
    if k == 0:
        return Decision(quantity, Outcome.INCONCLUSIVE, math.nan, -1.0, math.inf, level, math.expm1(thr), 0,
                        None, "no baseline runs")
    sign = 1.0 if higher_is_better else -1.0
    g = sign * (current.log_mean - math.fsum(b.log_mean for b in baseline) / k)
    sw2, df_w = _pooled_within([*baseline, current])
    short = k < min_runs
    if short and df_w == 0 and tolerance == 0:
        return Decision(quantity, Outcome.INCONCLUSIVE, math.expm1(g), -1.0, math.inf, level,
                        math.expm1(thr), current.n, None,
                        f"baseline too short: {k} run(s), and no spread known (no run has 2+ reps)")
    sb2, df_b = _pooled_within(baseline)
    extra = _noisy_current(current, sb2, df_b)
    v, df, s_m, tau = _variance(baseline, current.n, sw2, df_w, thr, extra, prior, _pooled_trend([*baseline, current]))
    se = math.sqrt(v)
    fail_thr = FAR_FACTOR * thr if short else thr
    tq = t_quantile(1 - alpha, df)
    lo, hi = g - tq * se, g + tq * se
    p = t_cdf((g - fail_thr) / se, df) if se > 0 else (0.0 if g < fail_thr else 1.0)
    est = math.expm1(g)
    noisy = f", this run noisier than its history (+{math.sqrt(extra) * 100:.2g} %)" if extra else ""
    if (lent := _moderates(prior, k, current.n)) is not None:
        noisy += f", spread moderated over {lent.tests} tests (+{lent.df:.0f} df)"
    spread = (f"run-to-run spread {tau * 100:.2g} %{' (assumed)' if short else ''}, within-run "
              f"{math.sqrt(sw2) * 100:.2g} %, {k} baseline run(s), {current.n} rep(s), df {df:.1f}{noisy}")
    head = (f"{quantity} {est * 100:+.1f} % ({level * 100:.4g} % CI {math.expm1(lo) * 100:+.1f} .. "
            f"{math.expm1(hi) * 100:+.1f} %; {spread})")
    if hi < fail_thr:
        what = f"{FAR_FACTOR:g}x the tolerance" if short else "the tolerance"
        return Decision(quantity, Outcome.FAIL, est, math.expm1(lo), math.expm1(hi), level, math.expm1(fail_thr),
                        current.n, None, f"{head}: worse by more than {what} ({-math.expm1(fail_thr) * 100:.1f} %)"
                        " beyond noise", p)
    if short:
        return Decision(quantity, Outcome.INCONCLUSIVE, est, math.expm1(lo), math.expm1(hi), level,
                        math.expm1(thr), current.n, None,
                        f"baseline too short: {k} run(s), {min_runs} needed to estimate the run-to-run spread "
                        f"(save more baseline runs); {head}", p)
    det = DETECT_FACTOR * thr
    if g - t_quantile(POWER, df) * se > det:
        return Decision(quantity, Outcome.PASS, est, math.expm1(lo), math.expm1(hi), level, math.expm1(thr),
                        current.n, None, f"{head}: a drop of {-math.expm1(det) * 100:.0f} % or more is ruled "
                        "out at 95 %", p)
    need = reps_needed(baseline, current.n, sw2, df_w, thr, det, alpha, prior)
    more = (f"about {need} reps would give 95 % power against a {-math.expm1(det) * 100:.0f} % drop"
            if need is not None else _spread_dominates(s_m, det))
    return Decision(quantity, Outcome.INCONCLUSIVE, est, math.expm1(lo), math.expm1(hi), level, math.expm1(thr),
                    current.n, need, f"{head}: too noisy to decide; {more}", p)


#: the share of unchanged runs a tolerance should let pass on their own, many baseline runs given
HONEST_PASS = 0.9


def _spread_dominates(s_m: float, det: float) -> str:
    """Why neither more reps nor, past a point, more baseline runs decide it, and what would.

    Why: with many baseline runs the prediction variance tends to the run means' own spread
    ``s_m^2``, so an unchanged run passes (its 95 % lower bound above ``det``, twice the
    tolerance) with probability ``Phi(|det| / s_m - z_95)`` however long the history. On a
    cloud runner that hands out a fresh machine a night, the 7B rig's c64 throughput spread
    2.3 % from night to night against a 3 % tolerance: about one unchanged night in four
    waited for a person at any K (benchmarks/acceptance_cloud.py). "Save more baseline runs"
    is then the wrong advice; the tolerance or the runner is the lever.
    """
    share = NormalDist().cdf(-det / s_m - z_quantile(POWER)) if s_m > 0 else 1.0
    if share >= HONEST_PASS:
        return ("more reps of this run cannot decide it: the baseline's run-to-run spread dominates (save more "
                "baseline runs or reduce noise)")
    wide = -math.expm1(-(z_quantile(POWER) + z_quantile(HONEST_PASS)) * s_m / DETECT_FACTOR)
    return (f"more reps of this run cannot decide it, and more baseline runs only up to a point: the runs' means "
            f"spread {s_m * 100:.2g} % from run to run, so even a long baseline lets an unchanged run pass on its "
            f"own about {share * 100:.0f} % of the time; a tolerance of {wide * 100:.1f} % or more "
            f"(baseline.tolerance) would pass {HONEST_PASS * 100:.0f} %, or a runner that keeps its machine "
            "(less spread)")


def reps_needed(baseline: Sequence[RunStats], cur_n: int, sw2: float, df_w: int, thr: float, det: float,
                alpha: float, prior: SpreadPrior | None = None) -> int | None:
    """Smallest rep count of the current run with 95 % power to fail a ``det``-sized drop."""
    z = z_quantile(POWER)
    for n in range(max(2, cur_n), MAX_REPS + 1):
        v, df, _, _ = _variance(baseline, n, sw2, df_w + (n - cur_n), thr, prior=prior)
        se = math.sqrt(v)
        if thr - det >= (t_quantile(1 - alpha, df) + z) * se:
            return n
    return None


def detection_power(baseline: Sequence[RunStats], current_n: int, *, tolerance: float, alpha: float, tests: int,
                    drop: float = GOAL_DROP, higher_is_better: bool = True, min_runs: int = MIN_RUNS,
                    prior: SpreadPrior | None = None) -> float | None:
    """The probability that a true ``drop`` of this one test fails a campaign of ``tests`` primary tests.

    Why: a pass says only as much as the test could have seen.  With 3 reps, a short baseline
    or a noisy rig, a -10 % drop confined to one scenario slips through most campaigns
    (docs/baselines.md); the verdict says so instead of reading as a clean bill.  The drop
    must clear Holm's first step (``alpha / tests``: it is the smallest p-value of the family
    when nothing else changed).  The variance is the one :func:`decide_change` would use for a
    current run of ``current_n`` reps as noisy as the baseline's (its estimated spreads, the
    ``prior`` where it applies), so the figure is itself an estimate: with K = 10 its spread
    is about +-10 points near 90 %.  ``None`` without a spread to go on (no run with 2+ reps).
    """
    k = len(baseline)
    if k == 0 or current_n < 1 or tests < 1 or not 0 < drop < 1:
        return None
    sw2, df_w = _pooled_within(baseline)
    short = k < min_runs
    if short and df_w == 0:
        return None
    thr = _gain_threshold(tolerance, higher_is_better)
    v, df, _, _ = _variance(baseline, current_n, sw2, df_w, thr, prior=prior, floor_w2=_pooled_trend(baseline))
    if not v > 0:
        return 1.0
    fail_thr = FAR_FACTOR * thr if short else thr
    shift = (fail_thr - _gain_threshold(drop, higher_is_better)) / math.sqrt(v)
    return t_cdf(shift - t_quantile(1 - alpha / tests, df), df)


def family_wise(decisions: Sequence[Decision], alpha: float) -> list[Decision]:
    """Holm's step-down over a campaign's primary decisions at family-wise ``alpha``.

    A ``FAIL`` stands only where its Holm-adjusted p-value is at most ``alpha``; one that
    does not survive becomes ``INCONCLUSIVE`` (its bound cleared the tolerance at the
    single-test level, not at the campaign's).  Passes and inconclusives are unchanged;
    every reason gains the adjusted p-value so that a reader sees the multiplicity.
    """
    adj = holm_adjust([d.p_value for d in decisions])
    out = []
    for d, a in zip(decisions, adj, strict=True):
        if a is None:
            out.append(d)
            continue
        note = f" [Holm-adjusted p {a:.3g} over {sum(x is not None for x in adj)} primary tests, " \
               f"campaign alpha {alpha:g}]"
        if d.outcome is Outcome.FAIL and a > alpha:
            out.append(replace(d, outcome=Outcome.INCONCLUSIVE, reason=d.reason.replace(
                "beyond noise", "at the single-test level but not at the campaign's family-wise level") + note))
        else:
            out.append(replace(d, reason=d.reason + note))
    return out
