"""Noise-aware comparison of a campaign's scenarios with a baseline: the run is the unit.

The method (validated by ``benchmarks/verdict_power.py``; figures in docs/baselines.md)
is :func:`pytest_p2p.stats.decide_change`: each baseline run contributes its mean (log
scale), the current run is judged as one new run against their spread (a prediction
interval with correct degrees of freedom), and the decision is on confidence bounds:

* **regression** when the upper bound of the change (in the good direction) is below
  ``-tolerance`` — the *bound* clears the tolerance, not the point estimate;
* **unchanged** when a drop of twice the tolerance is ruled out at 95 %;
* **improvement** when the lower bound is above ``+tolerance`` (information: consider
  accepting the run);
* **inconclusive** otherwise, with the reps that would decide; and with fewer than 3
  baseline runs ("baseline too short: N runs") unless the drop is beyond 3x the
  tolerance with an assumed run-to-run spread.

Only **primary** metrics can fail (``baseline.primary`` in the rig file, else the metric
registry's defaults); Holm's procedure over every primary of every scenario of the
campaign (and the uplift history, :mod:`.campaign_judge`) keeps the campaign's
family-wise false-alarm rate at ``baseline.alpha`` (1 %).  Other metrics are judged the
same way and reported with their own Holm-adjusted significance, as information.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .. import metrics as registry
from ..jsontypes import as_dict, as_float
from ..stats import MODERATE_MIN_RUNS, Decision, Outcome, RunStats, SpreadPrior, StatsError, decide_change
from ..stats.baseline import GOAL_DROP, GOAL_POWER, run_spread
from .config import BaselineConfig, Tolerance

REGRESSION, IMPROVEMENT, UNCHANGED = "regression", "improvement", "unchanged"
INCONCLUSIVE, NOT_COMPARABLE, NO_BASELINE, UNJUDGED = "inconclusive", "not comparable", "no baseline", "unjudged"


def direction(metric: str, overrides: Mapping[str, str] | None = None) -> str | None:
    """``"higher"``, ``"lower"``, ``"info"`` or ``None`` (unknown: reported, not judged); the registry's."""
    return registry.direction(metric, overrides)


def unit(metric: str) -> str:
    return registry.unit(metric)


class HistoryReport(Protocol):
    """What a scenario's comparison reads of a metric's stored history (``history.SeriesReport``).

    Why a Protocol: the history is built from this module's :class:`Sample`, so naming its report
    class here made compare and history an import cycle (issue 25).
    """

    @property
    def failing(self) -> bool: ...

    def failure_text(self) -> str: ...


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

    def run_stats(self) -> RunStats | None:
        """Log-scale summary, or None when the values are not all positive."""
        try:
            if self.values:
                return RunStats.of(self.values)
            if self.mean is not None:
                return RunStats.of_summary(self.mean, self.std, int(self.n or 1))
        except StatsError:
            return None
        return None


@dataclass(frozen=True)
class ChangeInputs:
    """What a baseline decision was taken from: kept so that the campaign can re-decide it with a spread prior."""

    baseline: tuple[RunStats, ...]
    current: RunStats
    tolerance: float
    higher: bool
    alpha: float
    quantity: str
    min_runs: int

    def decide(self, prior: SpreadPrior | None = None) -> Decision:
        return decide_change(self.baseline, self.current, tolerance=self.tolerance, higher_is_better=self.higher,
                             alpha=self.alpha, quantity=self.quantity, min_runs=self.min_runs, prior=prior)

    def spread(self) -> tuple[float, float] | None:
        """``(variance of the baseline run means, its df)`` on the log scale, once a prior may moderate it."""
        return run_spread(self.baseline) if len(self.baseline) >= MODERATE_MIN_RUNS else None


@dataclass
class Judgement:
    verdict: str
    direction: str | None
    base: float | None = None  # baseline mean (linear)
    current: float | None = None
    change: float | None = None  # relative, current/base - 1
    ci: tuple[float, float] | None = None  # relative change interval at ci_level
    ci_level: float | None = None
    k: int = 0  # baseline runs used
    n: int = 0  # current reps
    needed_reps: int | None = None
    reason: str = ""
    details: dict[str, float] = field(default_factory=dict)
    primary: bool = False
    decision: Decision | None = None
    adjusted_p: float | None = None  # Holm-adjusted over the campaign (primaries and others separately)
    inputs: ChangeInputs | None = field(default=None, repr=False, compare=False)


def _raw(gain: float, higher: bool) -> float:
    """A gain (``+`` better) as the relative change ``cur/base - 1``."""
    return gain if higher else 1.0 / (1.0 + gain) - 1.0 if gain > -1 else math.inf


def relative_tolerance(tol: Tolerance, base_mean: float | None) -> float:
    """The tolerance as a fraction of the baseline mean (``abs`` turned relative), capped at 99 %."""
    if not base_mean:
        return min(tol.rel, 0.99)
    return min(tol.threshold(base_mean) / abs(base_mean), 0.99)


def verdict_of(d: Decision, higher: bool, tolerance: float) -> str:
    """Map a decision to the verdict words; an improvement is a pass whose lower bound clears +tolerance."""
    if d.outcome is Outcome.FAIL:
        return REGRESSION
    if d.outcome is Outcome.INCONCLUSIVE:
        return INCONCLUSIVE
    gain_tol = tolerance if higher else 1.0 / (1.0 - tolerance) - 1.0
    return IMPROVEMENT if d.lower > gain_tol else UNCHANGED


def apply_decision(j: Judgement, d: Decision, tolerance: float) -> Judgement:
    higher = j.direction == "higher"
    j.decision = d
    j.verdict = verdict_of(d, higher, tolerance)
    if d.n and math.isfinite(d.lower) and math.isfinite(d.upper):
        lo, hi = _raw(d.lower, higher), _raw(d.upper, higher)
        j.ci = (min(lo, hi), max(lo, hi))
        j.ci_level = d.level
    j.needed_reps = d.pairs_needed
    j.reason = d.reason
    if j.verdict == IMPROVEMENT:
        j.reason += "; better by more than the tolerance: consider accepting this run"
    return j


def judge(baseline: Sequence[Sample], current: Sample, metric_direction: str | None, tol: Tolerance,
          cfg: BaselineConfig | None = None, *, quantity: str = "change") -> Judgement:
    """Compare one metric of one scenario, on its own (no multiplicity control: see the module doc)."""
    cfg = cfg or BaselineConfig()
    if metric_direction not in ("higher", "lower"):
        return Judgement(UNJUDGED, metric_direction, reason="direction unknown: reported, not judged"
                         if metric_direction is None else "informational metric: reported, not judged")
    base_stats = [st for st in (b.run_stats() for b in baseline) if st is not None]
    cur = current.run_stats()
    base_lin = [m for m in (b.linear_mean() for b in baseline) if m is not None]
    base_mean_lin = sum(base_lin) / len(base_lin) if base_lin else None
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
    r_bad = relative_tolerance(tol, base_mean_lin)
    higher = metric_direction == "higher"
    if cfg.rule == "fixed":
        gain = (j.change or 0.0) if higher else (1.0 / (1.0 + (j.change or 0.0)) - 1.0)
        j.verdict = REGRESSION if gain <= -r_bad else IMPROVEMENT if gain >= r_bad else UNCHANGED
        j.reason = f"rule 'fixed': change compared with the tolerance only ({r_bad:.1%})"
        return j
    if j.n < cfg.min_reps:
        j.verdict, j.reason = INCONCLUSIVE, f"only {j.n} rep(s), the configured minimum is {cfg.min_reps}"
        j.needed_reps = cfg.min_reps
        return j
    j.inputs = ChangeInputs(tuple(base_stats), cur, r_bad, higher, cfg.alpha, quantity, cfg.min_runs)
    return apply_decision(j, j.inputs.decide(), r_bad)


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
    primaries: tuple[str, ...] = ()
    history: dict[str, HistoryReport] = field(default_factory=dict)  # primary metric -> its stored history
    health: list[str] = field(default_factory=list)  # what is wrong with the accepted baseline (history.health)
    #: probability that a -10 % drop of this scenario's primary would fail the campaign (stats.detection_power)
    power: float | None = None
    #: the campaign as a whole misses the power goal (its mean over scenarios): the summary then shows ``power``
    power_weak: bool = False
    #: settings of the campaign that cannot reach the power goal, in a few words each ("3 reps", "5 baseline runs")
    power_tags: tuple[str, ...] = ()

    @property
    def history_failures(self) -> list[str]:
        """Adverse change points or trends of a primary's history that nobody accepted since."""
        return [rep.failure_text() for _, rep in sorted(self.history.items()) if rep.failing]

    @property
    def regressions(self) -> dict[str, Judgement]:
        """Primary metrics that regressed (only these fail the check)."""
        return {m: j for m, j in self.metrics.items() if j.verdict == REGRESSION and j.primary}

    @property
    def worse_info(self) -> dict[str, Judgement]:
        """Non-primary metrics judged worse: reported as information, never a failure."""
        return {m: j for m, j in self.metrics.items() if j.verdict == REGRESSION and not j.primary}

    def lines(self, verdicts: Sequence[str] | None = None) -> list[str]:
        """One line per metric (only those with a verdict in ``verdicts`` when given)."""
        out = []
        for m, j in sorted(self.metrics.items(), key=lambda kv: (not kv[1].primary, kv[0])):
            if verdicts is not None and j.verdict not in verdicts:
                continue
            role = "primary" if j.primary else "info"
            adj = f", Holm-adjusted p {j.adjusted_p:.2g}" if j.adjusted_p is not None else ""
            out.append(f"{j.verdict:>14}: [{role}{adj}] {describe(m, self.arm, self.point, j)}")
        return out

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for j in self.metrics.values():
            counts[j.verdict] = counts.get(j.verdict, 0) + 1
        parts = ", ".join(f"{c} {v}" for v, c in sorted(counts.items()))
        why = list(self.power_tags)
        if self.power is not None and self.power_weak:
            why.insert(0, f"about {self.power:.0%} against a -{GOAL_DROP:.0%} drop here")
        weak = f" [power: {', '.join(why)}; goal {GOAL_POWER:.0%}: a pass is weak evidence]" if why else ""
        return f"{self.arm}-{self.point}: {self.verdict} vs baseline {self.baseline_name!r} " \
               f"({len(self.baseline_runs)} run(s); primary {', '.join(self.primaries) or 'none'}): {parts}{weak}"

    def inconclusive_reasons(self) -> list[str]:
        return sorted({f"{m}: {j.reason}" for m, j in self.metrics.items()
                       if j.primary and j.verdict == INCONCLUSIVE})


def overall(primary_verdicts: Sequence[str]) -> str:
    """A scenario's verdict from its primaries: any regression, else any inconclusive, else improvement."""
    for v in (REGRESSION, INCONCLUSIVE, IMPROVEMENT, UNCHANGED, NO_BASELINE, UNJUDGED):
        if v in primary_verdicts:
            return v
    return INCONCLUSIVE


def compare_links(base_fp: Mapping[str, object], cur_fp: Mapping[str, object]) -> list[tuple[str, str, str]]:
    """Link facts judged like metrics: ``(fact, verdict, text)``; exact, since link state is not noisy.

    A fact that is not a number on both sides (unset, or not recorded) is not judged.
    """
    out = []
    base_links = as_dict(base_fp.get("links"))
    for bus, cur_link in sorted(as_dict(cur_fp.get("links")).items()):
        lb, lc = as_dict(base_links.get(bus)), as_dict(cur_link)
        if not lb:
            continue
        for fact in ("loaded_gen", "loaded_width", "max_gen", "max_width", "nvlinks_active"):
            b, c = lb.get(fact), lc.get(fact)
            nb, nc = as_float(b), as_float(c)
            if nb is None or nc is None:
                continue
            v = REGRESSION if nc < nb else IMPROVEMENT if nc > nb else UNCHANGED
            label = f"GPU {lc.get('index')} ({bus}) {fact.replace('_', ' ')}"
            out.append((f"{bus}.{fact}", v, f"{label} {b} -> {c}"))
    return out
