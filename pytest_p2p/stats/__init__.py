"""The decision library: stage-free statistics every judged quantity goes through.

Stable API (documented in docs/baselines.md, so that others can audit the statistics):

* :func:`summarise` — reps of one metric -> mean, spread, interval (:class:`RepSummary`); :func:`summarize`
  — the same as ``aggregate.json`` stores it; :func:`paired_uplift` — arm A over arm B, paired by rep;
* :func:`decide_uplift` — does arm A beat arm B by a threshold? pass / fail / inconclusive
  on confidence bounds, with the pairs needed;
* :func:`screen_pairs` / :func:`outliers` — reps to re-run instead of averaging them in;
* :func:`outlying_slots` — server starts (slots) off at every point together, to re-run;
* :class:`SequentialPlan` — adaptive pairs with alpha spending across looks (also over server starts);
* :func:`decide_nested` / :func:`components` / :func:`plan_for` — windows nested within server starts:
  the decision with the start as the unit, the two variance components, the planner; :func:`screen_windows` /
  :func:`screen_starts` — a window or a whole start to re-run; :func:`start_prior` / :class:`StartPrior` — the
  spread of a start mean learned from earlier nights, borrowed by ``decide_nested(prior=)`` behind a guard;
  :func:`sequence_fit` — the first-arm (crossover order) effect ``decide_nested(sequences=)`` fits;
* :func:`decide_change` / :class:`RunStats` — one run against its history (the run is the unit);
* :func:`family_wise` / :func:`holm_adjust` — Holm's control over a campaign's primaries;
* :func:`spread_prior` / :class:`SpreadPrior` — the campaign's tests lend each other their
  run-to-run spread (empirical Bayes) from ``MODERATE_MIN_RUNS`` baseline runs on.

Pure Python; numbers in, typed :class:`Decision` out; nothing here reads files or pytest.
"""

from __future__ import annotations

from .baseline import MIN_RUNS, RunStats, decide_change, family_wise
from .decide import Decision, Outcome, SequentialPlan, decide_uplift, log_ratios, outliers, pairs_for, screen_pairs
from .moderate import MODERATE_MIN_REPS, MODERATE_MIN_RUNS, SpreadPrior, spread_prior
from .multiplicity import holm_adjust, holm_reject
from .nested import (
    Components,
    Elsewhere,
    LaunchCheck,
    NestedModel,
    NestedPlan,
    PriorUse,
    SequenceFit,
    SpreadSeen,
    StartPrior,
    components,
    decide_nested,
    expected_halfwidth,
    fits_sequences,
    launch_check,
    nested_model,
    plan_for,
    plan_with_prior,
    prior_use,
    screen_starts,
    screen_windows,
    sequence_fit,
    spread_seen,
    start_prior,
    windows_for,
)
from .slots import outlying_slots, slot_shift
from .summary import RepSummary, paired_uplift, summarise, summarize
from .tdist import StatsError, t_cdf, t_quantile, z_quantile

__all__ = [
    "Components", "Decision", "LaunchCheck", "MIN_RUNS", "MODERATE_MIN_REPS", "MODERATE_MIN_RUNS", "NestedModel",
    "NestedPlan",
    "Outcome", "PriorUse", "RepSummary", "RunStats", "SequenceFit", "SequentialPlan", "SpreadPrior", "StatsError",
    "components", "decide_change", "decide_nested", "decide_uplift", "expected_halfwidth", "family_wise",
    "fits_sequences", "holm_adjust", "holm_reject", "launch_check", "log_ratios", "nested_model", "outliers",
    "outlying_slots", "paired_uplift", "pairs_for", "plan_for", "plan_with_prior", "prior_use", "screen_pairs",
    "screen_starts", "screen_windows", "sequence_fit", "slot_shift", "spread_prior", "spread_seen",
    "Elsewhere", "SpreadSeen", "StartPrior", "start_prior", "summarise", "summarize", "t_cdf", "t_quantile",
    "windows_for", "z_quantile",
]
