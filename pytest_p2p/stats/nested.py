"""The nested variance model: measurement windows within server starts (issue 24, item 2).

Why a model of its own: when each arm's server stays resident for many short windows, the
paired log ratios of one point are not independent.  Windows of one *start* (both arms'
servers started fresh in that block) share that start's effect — a server that came up on
a slower clock, another memory layout, a different autotuned kernel — and only the window
noise is new from one window to the next.  ``blocks[b] = [(on, off) for each window pair
of start b]``; the log ratio of window pair ``w`` of start ``b`` is modelled as

    r_bw = mu + s_b + e_bw,    s_b ~ N(0, start_sd**2),   e_bw ~ N(0, window_sd**2).

Judging all ``r_bw`` as if independent (a window-level t interval) ignores ``start_sd``:
with 3 starts of 8 windows it counts 24 replicates where there are 3, and cries wolf.

* :func:`components` estimates both sds by one-way random-effects ANOVA (unbalanced
  blocks allowed), for the reason text and for the planner.
* :func:`decide_nested` judges the mean of the block means with a t interval on the
  spread of the block means (``df = starts - 1``).  The start is the unit of replication:
  each block mean carries one start effect plus the average of its windows' noise, so
  their spread estimates ``start_sd**2 + window_sd**2 / W`` directly, whatever the split
  — exact under normality for balanced designs, and without leaning on the ANOVA
  estimates (which are poor with 3 starts).  ``pairs_needed`` counts *starts* with the
  present windows per start.
* :func:`windows_for`, :func:`expected_halfwidth`, :func:`plan_for` size a campaign
  before it runs (the classic two-stage optimum, then the cheapest plan that reaches a
  target half-width with the t quantile of its own ``df``).
* :func:`screen_windows` / :func:`screen_starts` flag a window pair odd within its start,
  or a whole start odd against the other starts; the campaign re-runs them, never
  averages them in.

Sequential looks: the campaign adds starts while a point is undecided.  That is
:class:`~pytest_p2p.stats.decide.SequentialPlan` with starts as its unit
(``SequentialPlan(alpha, min_starts, max_starts)``; ``alpha_at(starts)`` is the alpha of
the look after that many starts).  Its union-bound argument never uses what a "pair" is,
only that each look's verdict is wrong with probability at most its alpha — true of
:func:`decide_nested` per look — so it holds for starts unchanged (measured in
``benchmarks/verdict_nested.py``).  Windows are *not* a unit to add while undecided: more
windows in the present starts cannot shrink the start-to-start part of the spread.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .decide import SCREEN_FLOOR, Decision, Outcome, _pct, decide_uplift, log_ratios, outliers
from .tdist import StatsError, t_quantile

MIN_WINDOWS = 2  # windows per start the planner allows: one pair per start cannot see window noise
MAX_WINDOWS = 64  # ... and at most: a start that long risks everything on one server start
DEFAULT_WINDOWS = 8  # the planner's choice while either component is unknown
START_SCREEN_FLOOR = SCREEN_FLOOR  # smallest spread of start means (log units) the start screen assumes

Blocks = Sequence[Sequence[tuple[float, float]]]


@dataclass(frozen=True)
class Components:
    """Variance components of the paired log ratios (log units, ~fractions).

    ``start_sd``: sd of a start's effect (truncated at 0; ``None`` with fewer than 2 starts or
    without a start of 2 windows, where it cannot be told from window noise).
    ``window_sd``: within-start sd of one window pair (``None`` when no start has 2 windows).
    ``block_sd``: sd of the block means, what :func:`decide_nested` judges on (``None`` below 2).
    """

    start_sd: float | None
    window_sd: float | None
    blocks: int
    windows: int
    mean_windows_per_block: float
    block_sd: float | None
    mean: float  # mean of the block means (log units): the estimate before expm1


def _block_ratios(blocks: Blocks, higher_is_better: bool) -> list[list[float]]:
    """The paired log ratios of every start; a start without windows or with a bad value names itself."""
    out: list[list[float]] = []
    for b, block in enumerate(blocks):
        pairs = list(block)
        if not pairs:
            raise StatsError(f"start {b + 1}: no window pairs (a start with nothing measured is left out)")
        try:
            out.append(log_ratios([p[0] for p in pairs], [p[1] for p in pairs], higher_is_better=higher_is_better))
        except StatsError as e:
            raise StatsError(f"start {b + 1}: {e}") from e
    return out


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def _components(ratios: list[list[float]]) -> Components:
    k = len(ratios)
    sizes = [len(r) for r in ratios]
    n = sum(sizes)
    means = [_mean(r) for r in ratios]
    grand_w = math.fsum(m * s for m, s in zip(means, sizes, strict=True)) / n if n else math.nan
    df_w = n - k
    msw = (math.fsum((x - m) ** 2 for r, m in zip(ratios, means, strict=True) for x in r) / df_w
           if df_w > 0 else None)
    block_sd = start_sd = None
    if k >= 2:
        mb = _mean(means)
        block_sd = math.sqrt(math.fsum((m - mb) ** 2 for m in means) / (k - 1))
        if msw is not None:
            msb = math.fsum(s * (m - grand_w) ** 2 for m, s in zip(means, sizes, strict=True)) / (k - 1)
            n0 = (n - math.fsum(s * s for s in sizes) / n) / (k - 1)  # sizes' effective mean (= W if balanced)
            start_sd = math.sqrt(max(0.0, (msb - msw) / n0))
    return Components(start_sd, None if msw is None else math.sqrt(msw), k, n, n / k if k else 0.0, block_sd,
                      _mean(means) if k else math.nan)


def components(blocks: Blocks, *, higher_is_better: bool = True) -> Components:
    """One-way random-effects ANOVA (method of moments) of the paired log ratios.

    ``window_sd**2`` is the pooled within-start mean square; ``start_sd**2 = (MSB - MSW) / n0``
    with ``n0 = (N - sum n_b**2 / N) / (B - 1)``, the usual unbalanced-design divisor
    (``n0 = W`` when every start has ``W`` windows), truncated at 0.
    """
    return _components(_block_ratios(blocks, higher_is_better))


def _sd(x: float | None) -> str:
    return "unknown" if x is None else f"{x * 100:.1f} %"


def _windows_text(sizes: Sequence[int]) -> str:
    lo, hi = min(sizes), max(sizes)
    return f"{lo} window pair{'s' if hi > 1 else ''}" if lo == hi else f"{lo}-{hi} window pairs"


def decide_nested(blocks: Blocks, *, threshold: float, higher_is_better: bool = True, alpha: float,
                  quantity: str = "uplift") -> Decision:
    """Does ``on`` beat ``off`` by at least ``threshold`` (a fraction), judged with starts as the unit?

    The same three outcomes, one-sided ``alpha`` per wrong verdict and ``p_value`` as
    :func:`~pytest_p2p.stats.decide.decide_uplift` — it *is* that decision, applied to the
    block means (one value per start); only the reason speaks of starts and windows.  ``n``
    is the number of starts.  One start is inconclusive: a window-level interval would
    ignore the start-to-start spread.
    """
    ratios = _block_ratios(blocks, higher_is_better)
    comp = _components(ratios)
    means = [_mean(r) for r in ratios]
    if any(abs(m) > 700 for m in means):  # exp() below would overflow; no real campaign gets near e**700
        raise StatsError(f"{quantity}: a start's mean log ratio is beyond +-700, the values cannot be a ratio "
                         "of one metric")
    base = decide_uplift([math.exp(m) for m in means], [1.0] * len(means), threshold=threshold, alpha=alpha,
                         quantity=quantity)
    if not ratios:
        return dataclasses.replace(base, reason=f"{quantity}: no server starts measured")
    sizes = [len(r) for r in ratios]
    win = _windows_text(sizes)
    if len(ratios) == 1:
        return dataclasses.replace(base, reason=(
            f"{quantity} {_pct(base.estimate)} ({win}) from one server start: the start-to-start spread is "
            "unknown, at least 2 starts are needed"))
    head = (f"{quantity} {_pct(base.estimate)} ({base.level * 100:.4g} % CI {_pct(base.lower)} .. "
            f"{_pct(base.upper)}, {len(ratios)} starts x {win}; start sd {_sd(comp.start_sd)}, "
            f"window sd {_sd(comp.window_sd)}) vs threshold {_pct(threshold)}")
    if base.outcome is Outcome.PASS:
        why = f"{head}: the lower bound clears it"
    elif base.outcome is Outcome.FAIL:
        why = f"{head}: the upper bound is below it"
    else:
        per = round(comp.mean_windows_per_block)
        more = (f"about {base.pairs_needed} starts of {per} window pairs would decide it"
                if base.pairs_needed is not None
                else "the estimate sits on the threshold: no number of starts decides it")
        why = f"{head}: inconclusive, the interval straddles the threshold; {more}"
    return dataclasses.replace(base, reason=why)


# ----------------------------------------------------------------------------- planning


def _positive(value: float, what: str) -> float:
    if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise StatsError(f"{what} must be a positive number, got {value!r}")
    return float(value)


def _sd_arg(value: float, what: str) -> float:
    if isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise StatsError(f"{what} must be a finite sd >= 0, got {value!r}")
    return float(value)


def windows_for(comp: Components, start_cost_s: float, window_cost_s: float) -> int:
    """Window pairs per start that buy the most precision per second (the classic two-stage optimum).

    The variance of the estimate from ``B`` starts of ``W`` windows is
    ``(start_var + window_var / W) / B`` at a cost of ``B * (start_cost + W * window_cost)``;
    their product is least at ``W = sqrt((start_cost / window_cost) * window_var / start_var)``,
    clamped to ``[MIN_WINDOWS, MAX_WINDOWS]``.  ``window_cost_s`` is one window pair (both arms)
    of every point the campaign measures.  A start sd of 0 gives the upper clamp (starts buy
    nothing but degrees of freedom; :func:`plan_for` still asks for enough of them); an unknown
    component gives ``DEFAULT_WINDOWS``.
    """
    start_cost, window_cost = _positive(start_cost_s, "start cost"), _positive(window_cost_s, "window cost")
    if comp.start_sd is None or comp.window_sd is None:
        return DEFAULT_WINDOWS
    if comp.start_sd == 0:
        return MAX_WINDOWS
    w = math.sqrt(start_cost / window_cost) * comp.window_sd / comp.start_sd
    return max(MIN_WINDOWS, min(MAX_WINDOWS, round(w)))


def expected_halfwidth(start_sd: float, window_sd: float, starts: int, windows: int, alpha: float) -> float:
    """The expected half-width (log units, ~fraction) of :func:`decide_nested`'s ``1 - 2 alpha`` interval.

    ``t(1 - alpha, B - 1) * E[s] / sqrt(B)`` where ``s`` is the sd of ``B`` block means, each of
    variance ``start_sd**2 + window_sd**2 / W``; ``E[s] = c4(B) * sigma`` (normal theory), so this
    is the mean half-width, not an optimistic plug-in.
    """
    s_sd, w_sd = _sd_arg(start_sd, "start sd"), _sd_arg(window_sd, "window sd")
    if starts < 2 or windows < 1:
        raise StatsError(f"an interval needs >= 2 starts of >= 1 window pair, got {starts} x {windows}")
    if not 0 < alpha < 0.5:
        raise StatsError(f"alpha must be in (0, 0.5), got {alpha}")
    sigma = math.sqrt(s_sd ** 2 + w_sd ** 2 / windows)
    c4 = math.sqrt(2 / (starts - 1)) * math.exp(math.lgamma(starts / 2) - math.lgamma((starts - 1) / 2))
    return t_quantile(1 - alpha, starts - 1) * c4 * sigma / math.sqrt(starts)


@dataclass(frozen=True)
class NestedPlan:
    """What the planner prints before a campaign: its size, time and expected precision."""

    starts: int
    windows: int  # window pairs per start and point
    halfwidth: float  # expected half-width of the interval (log units, ~fraction)
    seconds: float  # expected campaign seconds: starts * (start_cost + points * windows * window_cost)
    points: int
    meets_target: bool  # False: even max_starts does not reach the target; this is the best plan within it
    start_sd: float  # the assumptions the plan rests on
    window_sd: float
    alpha: float
    target: float

    def describe(self) -> str:
        """``3 starts x 6 window pairs x 2 points ~ 14 min, expected 98 % CI half-width 1.6 % if ...``."""
        took = f"{self.seconds / 60:.0f} min" if self.seconds >= 90 else f"{self.seconds:.0f} s"
        text = (f"{self.starts} starts x {self.windows} window pairs x {self.points} point"
                f"{'s' if self.points != 1 else ''} ~ {took}, expected {(1 - 2 * self.alpha) * 100:.4g} % CI "
                f"half-width {self.halfwidth * 100:.1f} % if start sd <= {self.start_sd * 100:.1f} % and window sd "
                f"<= {self.window_sd * 100:.1f} %")
        if not self.meets_target:
            text += f" (the target {self.target * 100:.1f} % is out of reach within {self.starts} starts)"
        return text


def plan_for(start_sd: float, window_sd: float, target_halfwidth: float, alpha: float, start_cost_s: float,
             window_cost_s: float, max_starts: int, *, points: int = 1, min_starts: int = 2) -> NestedPlan:
    """The cheapest (starts, windows) whose expected half-width is at most ``target_halfwidth``.

    Searches ``min_starts..max_starts`` starts and ``MIN_WINDOWS..MAX_WINDOWS`` window pairs
    with :func:`expected_halfwidth` — so the t quantile of few starts (df = starts - 1) is
    paid for, which the classic :func:`windows_for` optimum ignores.  ``start_cost_s`` is one
    start of both arms' servers, ``window_cost_s`` one window pair at one point.  When no plan
    within ``max_starts`` reaches the target, the plan at ``max_starts`` with the
    :func:`windows_for` optimum is returned with ``meets_target=False``.
    """
    target = _positive(target_halfwidth, "target half-width")
    start_cost, window_cost = _positive(start_cost_s, "start cost"), _positive(window_cost_s, "window cost")
    if points < 1 or not 2 <= min_starts <= max_starts:
        raise StatsError(f"need points >= 1 and 2 <= min_starts <= max_starts, got {points}, {min_starts}, "
                         f"{max_starts}")
    best: tuple[float, float, int, int] | None = None  # (seconds, halfwidth, starts, windows)
    for b in range(min_starts, max_starts + 1):
        for w in range(MIN_WINDOWS, MAX_WINDOWS + 1):
            h = expected_halfwidth(start_sd, window_sd, b, w, alpha)
            if h <= target:
                cand = (b * (start_cost + points * w * window_cost), h, b, w)
                best = cand if best is None or cand < best else best
                break  # more windows at these starts only cost more
    meets = best is not None
    if best is None:
        comp = Components(start_sd, window_sd, max_starts, 0, 0.0, None, math.nan)
        w = windows_for(comp, start_cost, points * window_cost)
        best = (max_starts * (start_cost + points * w * window_cost),
                expected_halfwidth(start_sd, window_sd, max_starts, w, alpha), max_starts, w)
    seconds, h, b, w = best
    return NestedPlan(b, w, h, seconds, points, meets, start_sd, window_sd, alpha, target)


# ----------------------------------------------------------------------------- screens


def screen_windows(blocks: Blocks, *, higher_is_better: bool = True) -> list[tuple[int, int]]:
    """``(start, window)`` indices of window pairs whose log ratio is odd *within their start*.

    :func:`~pytest_p2p.stats.decide.outliers` on each start's log ratios (leave-one-out
    median and MAD, the same floor and ``z``); a start needs >= 3 windows.  Compared within
    the start, a window is judged against its own server start's level, so a start that sits
    off as a whole is not mistaken for odd windows (that is :func:`screen_starts`' job).
    ``higher_is_better`` does not change which are odd; callers pass it uniformly.
    """
    out: list[tuple[int, int]] = []
    for b, r in enumerate(_block_ratios(blocks, higher_is_better)):
        out.extend((b, w) for w in outliers([math.exp(x) for x in r]))
    return out


def screen_starts(blocks: Blocks, *, higher_is_better: bool = True) -> list[int]:
    """Indices of starts whose mean log ratio is odd against the other starts (>= 3 starts).

    A server that came up wrong (a throttled clock, a bad placement) moves every window of
    its start together, which the window screen cannot see.  :func:`outliers` on the block
    means: leave-one-out median and MAD, never a scale below ``START_SCREEN_FLOOR`` (with 3
    starts the MAD of the other two is luck), never more than a third flagged.
    """
    means = [_mean(r) for r in _block_ratios(blocks, higher_is_better)]
    return outliers([math.exp(m) for m in means], floor=START_SCREEN_FLOOR)
