"""Noise-aware comparison of a scenario's metrics with a baseline.

The method (validated by ``benchmarks/verdict_power.py``; figures in docs/baselines.md):

* Work on log values, so a change is a ratio and tolerances are relative.
* A baseline is K accepted runs. From them, and the current run's n reps, estimate the
  within-run variance sigma^2 (pooled over all runs) and the run-to-run variance tau^2
  (spread of the baseline run means beyond what sigma^2/n explains).
* The change d = mean(current reps) - mean(baseline run means) has standard error
  SE^2 = Var(baseline mean) + tau^2 + s_cur^2/n, with Satterthwaite degrees of freedom;
  s_cur^2 is the pooled variance, or the current run's own when an F screen says it is
  clearly larger, so a noisier current run widens its own interval instead of raising
  false alarms; Var(baseline mean) is floored by what the reps alone allow.
* Decision with the tolerance as the practical threshold (equivalence-style):
  **regression** when the degradation is significant at one-sided ``alpha`` *and* at
  least the tolerance; **improvement** likewise in the good direction; **unchanged** when
  the one-sided 95 % upper bound of the degradation is below ``detect`` (the smallest
  drop we promise to catch, 2x the tolerance); otherwise **inconclusive**, with the
  number of reps that would give 95 % power against a ``detect``-sized drop.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import BaselineConfig, Tolerance
from .stats_t import t_quantile, z_quantile

REGRESSION, IMPROVEMENT, UNCHANGED = "regression", "improvement", "unchanged"
INCONCLUSIVE, NOT_COMPARABLE, NO_BASELINE, UNJUDGED = "inconclusive", "not comparable", "no baseline", "unjudged"
POWER = 0.95
MAX_SUGGESTED_REPS = 200

# Metric direction table: "higher" is better, "lower" is better, "info" is reported only.
_EXACT = {
    "output_throughput": "higher", "total_token_throughput": "higher", "request_throughput": "higher",
    "request_goodput": "higher", "max_output_tokens_per_s": "higher", "tokens_per_joule": "higher",
    "busbw_gbs": "higher", "algbw_gbs": "higher", "bandwidth_gbs": "higher",
    "joules_per_token": "lower", "time_us": "lower", "latency_us": "lower", "duration": "lower",
    # Power alone is neither good nor bad (a faster run may draw more); efficiency is judged
    # through tokens_per_joule / joules_per_token instead.
    "avg_watts": "info", "completed": "info", "total_input_tokens": "info", "total_output_tokens": "info",
    "max_concurrent_requests": "info", "num_prompts": "info", "failed": "info", "warmup_failed": "info",
}
# Spread statistics (std_ttft_ms, ...) describe noise, not speed: reported, not judged.
_INFO_PREFIXES = ("std_",)
_PATTERNS = ((re.compile(r"_(ms|us|s)$"), "lower"), (re.compile(r"(throughput|_gbs|_per_s|per_joule)$"), "higher"))
_UNITS = (("output_throughput", "tok/s"), ("total_token_throughput", "tok/s"), ("request_throughput", "req/s"),
          ("_per_s", "tok/s"), ("_gbs", "GB/s"), ("_ms", "ms"), ("_us", "us"), ("tokens_per_joule", "tok/J"),
          ("joules_per_token", "J/tok"), ("watts", "W"))


def direction(metric: str, overrides: Mapping[str, str] | None = None) -> str | None:
    """``"higher"``, ``"lower"``, ``"info"`` or ``None`` (unknown: reported, not judged)."""
    if overrides and metric in overrides:
        return overrides[metric]
    if metric in _EXACT:
        return _EXACT[metric]
    if metric.startswith(_INFO_PREFIXES):
        return "info"
    for rx, d in _PATTERNS:
        if rx.search(metric):
            return d
    return None


def unit(metric: str) -> str:
    for suffix, u in _UNITS:
        if metric.endswith(suffix):
            return u
    return ""


class PerformanceRegression(AssertionError):
    """A metric got worse beyond tolerance and noise — a product defect, not a broken test."""


@dataclass(frozen=True)
class Sample:
    """One run's reps of one metric: the values, or (mean, std, n) when values are absent."""

    values: tuple[float, ...]
    mean: float | None = None
    std: float | None = None
    n: int | None = None

    @classmethod
    def of(cls, values: Sequence[float], mean: float | None = None, std: float | None = None,
           n: int | None = None) -> Sample:
        return cls(tuple(float(x) for x in values), mean, std, n)

    def count(self) -> int:
        return len(self.values) if self.values else int(self.n or (1 if self.mean is not None else 0))

    def linear_mean(self) -> float | None:
        if self.values:
            return sum(self.values) / len(self.values)
        return self.mean


@dataclass
class Judgement:
    verdict: str
    direction: str | None
    base: float | None = None  # baseline mean (linear)
    current: float | None = None
    change: float | None = None  # relative, current/base - 1
    ci: tuple[float, float] | None = None  # relative change interval at 1 - 2*alpha
    ci_level: float | None = None
    k: int = 0  # baseline runs used
    n: int = 0  # current reps
    needed_reps: int | None = None
    reason: str = ""
    details: dict[str, float] = field(default_factory=dict)


def _log_stats(s: Sample) -> tuple[float, float | None, int] | None:
    """(mean, variance, n) of the log values, or None when not positive/empty."""
    if s.values:
        if any(x <= 0 for x in s.values):
            return None
        logs = [math.log(x) for x in s.values]
        n = len(logs)
        m = sum(logs) / n
        var = sum((x - m) ** 2 for x in logs) / (n - 1) if n > 1 else None
        return m, var, n
    if s.mean is None or s.mean <= 0:
        return None
    n = int(s.n or 1)
    var = (s.std / s.mean) ** 2 if s.std is not None and n > 1 else None
    return math.log(s.mean), var, n


def _chi2_quantile(p: float, k: int) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (ample for a variance screen)."""
    z = z_quantile(p)
    c = 2.0 / (9.0 * k)
    return k * max(1.0 - c + z * math.sqrt(c), 0.0) ** 3


def _tq(p: float, df: float) -> float:
    return t_quantile(p, max(1.0, round(df, 1)))


def judge(baseline: Sequence[Sample], current: Sample, metric_direction: str | None, tol: Tolerance,
          cfg: BaselineConfig | None = None) -> Judgement:
    """Compare one metric of one scenario (see the module doc for the method)."""
    cfg = cfg or BaselineConfig()
    if metric_direction not in ("higher", "lower"):
        return Judgement(UNJUDGED, metric_direction, reason="direction unknown: reported, not judged"
                         if metric_direction is None else "informational metric: reported, not judged")
    base_stats = [st for st in (_log_stats(b) for b in baseline) if st is not None]
    cur = _log_stats(current)
    base_lin = [b.linear_mean() for b in baseline if b.linear_mean() is not None]
    base_mean_lin = sum(base_lin) / len(base_lin) if base_lin else None  # type: ignore[arg-type]
    cur_lin = current.linear_mean()
    j = Judgement(UNCHANGED, metric_direction, base=base_mean_lin, current=cur_lin, k=len(base_stats),
                  n=current.count())
    if not base_stats:
        j.verdict, j.reason = NO_BASELINE, "no positive baseline values for this metric"
        return j
    if cur is None:
        j.verdict, j.reason = INCONCLUSIVE, "the current run has no positive values for this metric"
        return j
    if base_mean_lin and cur_lin is not None:
        j.change = cur_lin / base_mean_lin - 1.0
    sign = -1.0 if metric_direction == "higher" else 1.0  # bad = sign * d
    r_bad = min(tol.threshold(base_mean_lin or 0.0) / base_mean_lin, 0.99) if base_mean_lin else tol.rel
    thr_bad = -math.log(1 - r_bad) if sign < 0 else math.log(1 + r_bad)
    thr_good = math.log(1 + r_bad) if sign < 0 else -math.log(1 - r_bad)
    detect = 2.0 * thr_bad
    cm, cvar, n = cur
    k = len(base_stats)
    means = [m for m, _, _ in base_stats]
    base_m = sum(means) / k
    d = cm - base_m
    bad = sign * d

    if cfg.rule == "fixed" or n < 1:
        j.verdict = REGRESSION if bad >= thr_bad else IMPROVEMENT if -bad >= thr_good else UNCHANGED
        j.reason = f"rule 'fixed': change compared with the tolerance only ({r_bad:.1%})"
        return j

    # within-run variance, pooled over every run that has reps
    num = sum((nb - 1) * vb for _, vb, nb in base_stats if vb is not None and nb > 1)
    df_w = sum(nb - 1 for _, vb, nb in base_stats if vb is not None and nb > 1)
    if cvar is not None and n > 1:
        num += (n - 1) * cvar
        df_w += n - 1
    if df_w == 0:
        j.verdict = INCONCLUSIVE
        j.reason = "no spread known: neither the baseline nor the current run has 2+ reps"
        j.needed_reps = max(cfg.min_reps, 3)
        return j
    sw2 = num / df_w
    # The current run's own spread replaces the pooled one only when it is clearly larger
    # (an F test at 1 %): a noisier run (throttling, a neighbour's job) then widens its own
    # interval, while the usual luck of 3 reps does not cost power.
    s_cur2, df_cur = sw2, float(df_w)
    if cvar is not None and n > 1 and cvar > sw2 * _chi2_quantile(0.99, n - 1) / (n - 1):
        s_cur2, df_cur = cvar, float(n - 1)
    mean_inv_n = sum(1.0 / nb for _, _, nb in base_stats) / k
    if k >= 2:
        sm2 = sum((m - base_m) ** 2 for m in means) / (k - 1)
        tau2 = max(0.0, sm2 - sw2 * mean_inv_n)
        # floor: the baseline mean is never known better than its reps allow, even when a
        # few baseline runs happen to agree closely (K = 3 gives sm2 only 2 degrees of freedom)
        var_base = max(sm2, sw2 * mean_inv_n) / k
        df_base = float(k - 1)
    else:
        sm2, tau2 = sw2 * mean_inv_n, 0.0
        var_base = sm2
        df_base = float(df_w)
    df_tau = float(max(k - 1, 1))
    if k < 3:
        # With fewer than 3 baseline runs the run-to-run spread cannot be estimated; assume it
        # is as large as the per-rep spread rather than zero, so that one lucky baseline run
        # does not turn ordinary run-to-run variation into a "regression".
        tau2, df_tau = max(tau2, sw2), float(df_w)

    def se_df(reps: int) -> tuple[float, float]:
        parts = [(var_base, df_base), (tau2, df_tau), (s_cur2 / reps, df_cur)]
        v = sum(p for p, _ in parts)
        den = sum(p * p / dd for p, dd in parts if p > 0)
        return math.sqrt(v), (v * v / den if den > 0 else float(df_w))

    se, df = se_df(n)
    tq = _tq(1 - cfg.alpha, df)
    lo, hi = d - tq * se, d + tq * se
    j.ci = (math.exp(lo) - 1.0, math.exp(hi) - 1.0)
    j.ci_level = 1 - 2 * cfg.alpha
    j.details = {"se_log": se, "df": df, "sigma_within": math.sqrt(sw2), "tau": math.sqrt(tau2),
                 "threshold": r_bad, "t": tq}
    if n < cfg.min_reps:
        j.verdict, j.reason = INCONCLUSIVE, f"only {n} rep(s), the configured minimum is {cfg.min_reps}"
        j.needed_reps = cfg.min_reps
        return j
    upper_bad = bad + _tq(POWER, df) * se
    if bad - tq * se > 0 and bad >= thr_bad:
        j.verdict = REGRESSION
        j.reason = f"worse by more than the tolerance ({r_bad:.1%}) and beyond noise"
    elif -bad - tq * se > 0 and -bad >= thr_good:
        j.verdict = IMPROVEMENT
        j.reason = f"better by more than the tolerance ({r_bad:.1%}) and beyond noise; consider accepting this run"
    elif upper_bad < detect:
        j.verdict = UNCHANGED
        j.reason = f"a drop of {1 - math.exp(-detect):.0%} or more is ruled out at 95 %" if sign < 0 else \
            f"a rise of {math.exp(detect) - 1:.0%} or more is ruled out at 95 %"
    else:
        j.verdict = INCONCLUSIVE
        j.needed_reps = reps_for_power(se_df, thr_bad, detect, cfg.alpha)
        more = (f"about {j.needed_reps} reps would give 95 % power against a {r_bad * 2:.0%} change"
                if j.needed_reps else f"more reps of this run alone cannot decide: the baseline's {k} run(s) "
                "and the run-to-run spread dominate (accept more baseline runs or reduce noise)")
        j.reason = f"too noisy to decide; {more}"
    return j


def reps_for_power(se_df: Any, thr_bad: float, detect: float, alpha: float) -> int | None:
    """Smallest rep count with >= 95 % chance to flag a ``detect``-sized degradation."""
    z = z_quantile(POWER)
    n = 2
    while n <= MAX_SUGGESTED_REPS:
        se, df = se_df(n)
        if detect - max(thr_bad, _tq(1 - alpha, df) * se) >= z * se:
            return n
        n = n + 1 if n < 20 else int(n * 1.25)
    return None


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"


def fmt_value(x: float | None, metric: str) -> str:
    return f"{_num(x)} {unit(metric)}".rstrip()


def describe(metric: str, arm: str, point: str, j: Judgement) -> str:
    """``output_throughput c8 p2p_on 190.9 -> 171.2 tok/s (-10.3 %, 99 % CI -12.1..-8.4 %)``."""
    head = f"{metric} {point} {arm}"
    if j.base is None or j.current is None:
        return f"{head}: {j.verdict} ({j.reason})"
    nums = f"{_num(j.base)} -> {fmt_value(j.current, metric)}"
    extra = []
    if j.change is not None:
        extra.append(f"{j.change * 100:+.1f} %")
    if j.ci is not None and j.ci_level is not None:
        extra.append(f"{j.ci_level * 100:.0f} % CI {j.ci[0] * 100:+.1f}..{j.ci[1] * 100:+.1f} %")
    extra.append(f"{j.k} baseline run(s), {j.n} rep(s)")
    return f"{head} {nums} ({', '.join(extra)})"


@dataclass
class ScenarioComparison:
    """All metrics of one scenario (arm x point) of a run against a named baseline."""

    arm: str
    point: str
    baseline_name: str
    metrics: dict[str, Judgement] = field(default_factory=dict)
    baseline_runs: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # baseline runs not comparable, with why
    verdict: str = UNCHANGED
    message: str = ""

    @property
    def regressions(self) -> dict[str, Judgement]:
        return {m: j for m, j in self.metrics.items() if j.verdict == REGRESSION}

    def lines(self, verdicts: Sequence[str] | None = None) -> list[str]:
        """One line per metric (only those with a verdict in ``verdicts`` when given)."""
        return [f"{j.verdict:>14}: {describe(m, self.arm, self.point, j)}" for m, j in sorted(self.metrics.items())
                if verdicts is None or j.verdict in verdicts]

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for j in self.metrics.values():
            counts[j.verdict] = counts.get(j.verdict, 0) + 1
        parts = ", ".join(f"{c} {v}" for v, c in sorted(counts.items()))
        return f"{self.arm}-{self.point}: {self.verdict} vs baseline {self.baseline_name!r} " \
               f"({len(self.baseline_runs)} run(s)): {parts}"


def _overall(verdicts: Sequence[str]) -> str:
    for v in (REGRESSION, INCONCLUSIVE, IMPROVEMENT, UNCHANGED, NO_BASELINE, UNJUDGED):
        if v in verdicts:
            return v
    return NO_BASELINE


def compare_scenario(store: Any, run_dir: Any, arm: str, point: str, cfg: BaselineConfig,
                     name: str | None = None) -> ScenarioComparison:
    """Compare ``<run_dir>/scenarios/<arm>-<point>`` with the runs accepted under ``name``."""
    from pathlib import Path

    from .attribution import explain
    from .fingerprint import build_fingerprint, comparability, read_json
    from .store import aggregate_rows

    run_dir = Path(run_dir)
    name = name or cfg.name
    fp = build_fingerprint(run_dir)
    out = ScenarioComparison(arm, point, name)
    agg_path = run_dir / "scenarios" / f"{arm}-{point}" / "aggregate.json"
    rows = {r.metric: r for r in aggregate_rows(read_json(agg_path, "scenario aggregate"), f"{arm}-{point}",
                                                agg_path)}
    candidates = store.baseline_runs(name, fp["rig"], fp["pair"]["ident"], fp.get("kind"), cfg.depth,
                                     exclude=fp["run_id"])
    want = comparability(fp, arm)
    usable = []
    for rec in candidates:
        have = comparability(rec.fingerprint, arm)
        diff = [k for k in want if want[k] != have.get(k)]
        if diff:
            out.excluded.append(f"{rec.run_id}: " + ", ".join(f"{k} {have.get(k)!r} -> {want[k]!r}" for k in diff))
        else:
            usable.append(rec)
    if not candidates:
        out.verdict = NO_BASELINE
        out.message = (f"no run of rig {fp['rig']!r}, pair {fp['pair']['ident']} accepted under baseline "
                       f"{name!r} yet (save one with --p2p-save-baseline={name})")
        return out
    if not usable:
        out.verdict = NOT_COMPARABLE
        out.message = f"not comparable with baseline {name!r}: " + "; ".join(out.excluded)
        return out
    out.baseline_runs = [r.run_id for r in usable]
    base_rows: dict[str, list[Sample]] = {}
    for rec in usable:
        for r in store.metrics(rec.run_id, arm, point):
            base_rows.setdefault(r.metric, []).append(Sample.of(r.values, r.mean, r.std, r.n))
    for metric, row in rows.items():
        cur = Sample.of(row.values, row.mean, row.std, row.n)
        if metric not in base_rows:
            out.metrics[metric] = Judgement(NO_BASELINE, direction(metric, cfg.directions),
                                            current=cur.linear_mean(), n=cur.count(),
                                            reason="metric absent from the baseline runs")
            continue
        out.metrics[metric] = judge(base_rows[metric], cur, direction(metric, cfg.directions),
                                    cfg.tolerance(metric), cfg)
    out.verdict = _overall([j.verdict for j in out.metrics.values()])
    newest = usable[0]
    since = (newest.started_at or newest.saved_at or "")[:10] or None
    heads = [describe(m, arm, point, j) for m, j in sorted(out.regressions.items())]
    if heads:
        out.message = explain(" | ".join(heads), newest.fingerprint, fp, arm=arm, scenario=f"{arm}-{point}",
                              since=since)
    else:
        out.message = f"{arm}-{point}: {out.verdict} against baseline {name!r} ({len(usable)} run(s))"
    return out


def compare_links(base_fp: Mapping[str, Any], cur_fp: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Link facts judged like metrics: ``(fact, verdict, text)``; exact, since link state is not noisy."""
    out = []
    for bus, lc in sorted((cur_fp.get("links") or {}).items()):
        lb = (base_fp.get("links") or {}).get(bus)
        if not lb:
            continue
        for fact in ("loaded_gen", "loaded_width", "max_gen", "max_width", "nvlinks_active"):
            b, c = lb.get(fact), lc.get(fact)
            if b is None or c is None:
                continue
            v = REGRESSION if c < b else IMPROVEMENT if c > b else UNCHANGED
            label = f"GPU {lc.get('index')} ({bus}) {fact.replace('_', ' ')}"
            out.append((f"{bus}.{fact}", v, f"{label} {b} -> {c}"))
    return out
