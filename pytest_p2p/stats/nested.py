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

The start spread from history (:class:`StartPrior`, :func:`start_prior`): a nightly campaign
affords 2-4 starts (a start costs 2-4 min on real GPUs), so its own spread of start means has
1-3 df and its interval stays wide however many windows it measures (+-30 % at df = 1 measured
on 2x H100 with a window-pair sd of 3.5 %).  The spread of a start mean is a property of the rig
and the design, and earlier nights measured it: :func:`decide_nested` borrows it (``prior=``),
with a guard that refuses it when tonight is noisier than the nights (an F test), and
:func:`plan_with_prior` / :func:`expected_halfwidth` (``prior_df``) plan with its df.

Starts made at once (``campaign.starts_at_once``): a launch makes several starts together, and they share its
moment. :func:`launch_check` (the launch guard) tests whether the launch means spread more than their starts
allow; :func:`decide_nested` (``launches=``) then judges the launch means instead of the start means, and
several starts of one launch only are inconclusive (``benchmarks/verdict_nested.py``, tables 4-5).

The first arm (:func:`sequence_fit`, ``decide_nested(sequences=)``): the campaign runs ABBA over a start's
window pairs and alternates the arm that goes first from start to start (``campaign.schedule.order``), a
two-sequence crossover. An effect of the order itself -- p2p_on still warming up in its first window after
a start, or slower after the other server's window -- lands on the start means of one sequence and not the
other: c16 on 2x H200 (2026-11-27, 5 starts) ran 23.2 / 27.9 / 23.4 / 27.8 / 23.8 %. Alternation cancels it
in the mean; the spread of start means counts it as noise (+-3.2 % of the ratio where the starts within an
order agreed to 0.2 %). From :data:`MIN_SEQUENCE_DF` + 2 starts on (6), with 2 starts of each order at
least, the decision fits the order as a fixed effect, the crossover's textbook analysis: the estimate is the
plain mean of the two orders' means (the order-balanced uplift, odd start counts included) and the spread is
pooled within orders, on ``starts - 2`` df. Exact under the model whatever the effect, so the design (the
number of starts) decides when to fit, never whether the effect looks present: choosing by its F test gave
up to 1.8 % wrong verdicts where 1 % is promised, the fit itself at most 1.24 % in 4000 trials a cell
(``benchmarks/verdict_nested.py``, table 8). The fit's price is one df: with no order effect, power at +5 %
falls 90 -> 83 % at 6 starts (8 starts: 99.0 -> 98.3 %); with table 7's effect it rises 65 -> 84 % (at 5
starts the trade was even, 76 -> 59 % against 37 -> 59 %: hence 6).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .decide import (
    SCREEN_FLOOR,
    Decision,
    Outcome,
    SequentialPlan,
    _pct,
    decide_uplift,
    log_ratios,
    outliers,
    pairs_for,
)
from .moderate import spread_prior
from .tdist import StatsError, _betainc, t_cdf, t_quantile

MIN_WINDOWS = 2  # windows per start the planner allows: one pair per start cannot see window noise
MAX_WINDOWS = 64  # ... and at most: a start that long risks everything on one server start
DEFAULT_WINDOWS = 8  # the planner's choice while either component is unknown
START_SCREEN_FLOOR = SCREEN_FLOOR  # smallest spread of start means (log units) the start screen assumes

#: earlier nights (campaigns with >= 2 starts of one design) a start prior needs, and its df, at least
MIN_PRIOR_NIGHTS = 3
MIN_PRIOR_DF = 4
#: one-sided level of the guard's F test (tonight's start means spread more than the prior allows) where tonight's
#: spread has few df: with 2-3 starts a refused prior costs most of the power (t(0.995, 1) = 64), so the guard may
#: refuse only gross changes (``benchmarks/verdict_prior.py``, table 3)
GUARD_LEVEL = 0.05
#: ... and from :data:`GUARD_MANY_DF` df on, where refusing costs little (t(0.995, 6) = 3.7 against 2.8 with a
#: prior of 21 df) and the F test can see a grown spread: at the committed 7B rig's design (8 starts, the first arm
#: fitted: 6 df; a prior from 3-30 nights of it) 0.2 keeps the cells whose spread held or varied at 0.34-0.95 % per
#: kind (mean over cells; at 0.05 up to 0.90 %) and cuts a doubled start spread's wrong verdicts from 2.4-3.1 % to
#: 1.6-2.0 % per kind, for a median interval 1.5 % wider (``benchmarks/verdict_prior_committed.py``, 4000 trials a
#: cell)
GUARD_LEVEL_MANY = 0.2
GUARD_MANY_DF = 6
#: level of the launch guard's F test (launch means spread more than their starts allow): starts made at once
#: share their launch's moment, so a launch effect would make them agree too well (benchmarks/verdict_nested.py,
#: table 5, says what each level costs and protects)
LAUNCH_GUARD_LEVEL = 0.25
#: residual df the first-arm fit keeps at least (6 starts of 2 orders): below that the df it costs widens an
#: interval with no order effect as much as the fit narrows one with it (``benchmarks/verdict_nested.py``, table 8)
MIN_SEQUENCE_DF = 4
#: starts of each sequence the fit needs: a sequence of one start has no spread of its own to pool
MIN_SEQUENCE_STARTS = 2

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


def _var(xs: Sequence[float]) -> float:
    """Sample variance (``n - 1``) of at least two values: the spread of start means."""
    mx = _mean(xs)
    return math.fsum((x - mx) ** 2 for x in xs) / (len(xs) - 1)


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
        block_sd = math.sqrt(_var(means))
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


# ----------------------------------------------------------------------------- the start spread from history


@dataclass(frozen=True)
class StartPrior:
    """The spread of one start's mean log ratio, learned from earlier campaigns of the same design.

    Why: a nightly campaign affords 2-4 server starts, so tonight's own spread of start means has
    1-3 df and a t quantile of 5.8-64 at the campaign's alpha; the interval stays wide however
    many windows it measures.  That spread is a property of the rig and the design, and the
    earlier nights measured it.  ``var`` is valid only for starts of ``windows`` window pairs
    (a start mean's variance is ``start_var + window_var / W``).
    """

    var: float  # variance of one start's mean log ratio (log units**2) at `windows` window pairs per start
    df: float  # its degrees of freedom
    nights: int  # campaigns it came from
    windows: int  # window pairs per start of those campaigns (the design it is valid for)
    moderated: bool = False  # True: the nights disagreed, an empirical-Bayes prior (d0 df), not the pooled spread

    def __post_init__(self) -> None:
        """A prior built by hand (a store, a test) is checked as :func:`start_prior`'s own would be."""
        if not (math.isfinite(self.var) and self.var > 0 and math.isfinite(self.df) and self.df > 0):
            raise StatsError(f"a start prior needs a positive finite variance and df, got var={self.var!r}, "
                             f"df={self.df!r}")
        if self.nights < 1 or self.windows < 1:
            raise StatsError(f"a start prior needs nights >= 1 and windows >= 1, got {self.nights} and {self.windows}")

    def describe(self) -> str:
        """``start spread from 9 earlier nights (18 df)``: the borrowing, as the reason text names it."""
        how = ", moderated" if self.moderated else ""
        return f"start spread from {self.nights} earlier nights ({self.df:.3g} df{how})"


def _balanced_nights(past: Sequence[Blocks], higher_is_better: bool) -> dict[int, list[list[list[float]]]]:
    """``{windows per start: [a night's log ratios per start, ...]}`` of the nights with a spread to give."""
    out: dict[int, list[list[list[float]]]] = {}
    for k, night in enumerate(past):
        try:
            ratios = _block_ratios(night, higher_is_better)
        except StatsError as e:
            raise StatsError(f"earlier night {k + 1}: {e}") from e
        sizes = {len(r) for r in ratios}
        if len(ratios) < 2 or len(sizes) != 1:
            continue  # one start has no spread; starts of unequal windows are of no one design
        out.setdefault(sizes.pop(), []).append(ratios)
    return out


def _most_run(by_w: Mapping[int, Sequence[object]]) -> int:
    """The windows per start that most nights ran (the larger on a tie): the design a history is of."""
    return max(by_w, key=lambda w: (len(by_w[w]), w))


def _night_spreads(past: Sequence[Blocks], higher_is_better: bool) -> dict[int, list[tuple[float, float]]]:
    """``{windows per start: [(variance of the night's start means, starts - 1), ...]}`` of balanced nights."""
    return {w: [(_var(means := [_mean(r) for r in ratios]), float(len(means) - 1)) for ratios in nights]
            for w, nights in _balanced_nights(past, higher_is_better).items()}


@dataclass(frozen=True)
class Elsewhere:
    """The spreads earlier nights of *another* design of this rig measured on this pair at one point, the window's
    scaled to tonight's length (``sqrt(their length / tonight's)``, as the H100 and H200 nights' 6-10 s windows
    went): for the plan line only, where no night of tonight's design is in the store yet.

    Why: the twentieth session's night changed the window lengths per point, the store held four nights of the same
    rig at 6.5 s, and its plan line still assumed the H100 figures (window pair 2.0 % at 10 s) for a pair whose c64
    pairs had spread 3.3 % pooled. A window pair's spread does not depend on how many pairs a start has, and its
    length scales it; a start's effect depends on neither. No decision borrows it: a start prior needs nights of
    tonight's own design (``store_design.design_key``)."""

    nights: int
    start_sd: float
    window_sd: float  # scaled to tonight's window length at the point
    what: str  # ``4 nights of 2 pairs of 6.5 s windows, scaled to 8.5 s``


@dataclass(frozen=True)
class SpreadSeen:
    """What the store held of earlier nights of this design at one point, and the two spreads they measured.

    Why beside the prior: a :class:`StartPrior` needs 3 nights before it may narrow an interval, but one
    earlier night already tells the planner more about this rig than figures measured on another GPU
    model (c16 start sd 0.6 % on an H100 pair, 1.3 % on an H200 pair, 2026-11-26/27). It sizes the plan
    and says what the store held; no decision borrows it.
    """

    nights: int  # earlier nights of this design (0: none)
    df: int  # their starts less one each: what a prior would have
    windows: int | None = None  # window pairs per start of the nights the spreads come from
    start_sd: float | None = None  # a start's effect (log units): pooled method of moments, truncated at 0
    window_sd: float | None = None  # one window pair within a start (log units), pooled
    elsewhere: Elsewhere | None = None  # another design's nights here, for the plan where this design has none

    def describe(self) -> str:
        """``1 earlier night (2 df)`` / ``none``: the plan line's words."""
        if not self.nights:
            return "none"
        return f"{self.nights} earlier night{'' if self.nights == 1 else 's'} ({self.df} df)"


def spread_seen(past: Sequence[Blocks], *, higher_is_better: bool = True) -> SpreadSeen:
    """The nights in ``past`` and both spreads pooled over those of 2 starts or more and one design.

    The window variance is the nights' within-start mean squares pooled on their df; the start variance
    is the pooled variance of the start means less ``window_var / W``, truncated at 0 (the nested model's
    own components, over nights). Nights of unequal windows per start are counted but not pooled, and
    the spreads come from the nights of the design most of them ran.
    """
    by_w = _balanced_nights(past, higher_is_better)
    seen = SpreadSeen(len(past), sum(max(0, len(night) - 1) for night in past))
    if not by_w:
        return seen
    w = _most_run(by_w)
    nights = by_w[w]
    ssw = ssb = 0.0
    dfw = dfb = 0
    for ratios in nights:
        means = [_mean(r) for r in ratios]
        ssw += math.fsum((x - m) ** 2 for r, m in zip(ratios, means, strict=True) for x in r)
        dfw += len(ratios) * (w - 1)
        ssb += _var(means) * (len(means) - 1)
        dfb += len(means) - 1
    window_var = ssw / dfw if dfw else 0.0
    start_var = max(0.0, ssb / dfb - window_var / w)
    return dataclasses.replace(seen, windows=w, start_sd=math.sqrt(start_var), window_sd=math.sqrt(window_var))


def start_prior(past: Sequence[Blocks], *, higher_is_better: bool = True,
                windows: int | None = None) -> StartPrior | None:
    """The prior of one start's mean log ratio from earlier nights' blocks at this point (``None``: too little).

    ``past[k]`` is night ``k``'s blocks (its starts, each its window pairs ``(on, off)``).  Only
    nights whose every start has the same number of window pairs count, and only those of
    ``windows`` per start (default: the design most nights ran); a night of one start has no
    spread and does not count.  The prior is

    * the **pooled** variance of the nights' start means, ``sum (B_k - 1) s_k^2 / sum (B_k - 1)``
      with ``sum (B_k - 1)`` df, when the nights agree — exact under normality when every night
      shares one spread, so tonight's interval with the added df keeps its level;
    * the **moderated** prior of :func:`~pytest_p2p.stats.moderate.spread_prior` (``s0^2`` with
      ``d0`` df, fitted by moments of the nights' log variances) when they disagree (``d0`` below
      what pooling gives): a rig whose spread moves from night to night lends fewer df.

    Minimums (``benchmarks/verdict_prior.py``, docs/performance.md "Start spread from history"):
    :data:`MIN_PRIOR_NIGHTS` nights — the moderated fit needs 3 variances, and a spread seen on
    fewer nights cannot show whether it moves — and :data:`MIN_PRIOR_DF` df (t(0.995, 5) = 4.0
    against 9.9 at 2 df: less buys little).  In the simulation 3 nights of 3 starts (6 df) already
    hold the campaign's 1 % per kind when the nights share one spread (0.79-1.05 % mean over cells,
    like 10 and 30 nights); more nights do *not* make a moved spread safe — at 30 nights the
    rates with a night-to-night varying spread (1.2 %) or a grown one (2x: 7 %) are no better
    than at 3 — so the minimum is set by what the fit needs, not raised for safety it cannot buy.
    """
    by_w = _night_spreads(past, higher_is_better)
    if not by_w:
        return None
    w = windows if windows is not None else _most_run(by_w)
    got = by_w.get(w, [])
    df = math.fsum(d for _, d in got)
    if len(got) < MIN_PRIOR_NIGHTS or df < MIN_PRIOR_DF:
        return None
    pooled = math.fsum(s2 * d for s2, d in got) / df
    if not pooled > 0:
        return None  # start means identical to the last digit: no spread to lend
    fit = spread_prior(got)
    usable = [d for s2, d in got if s2 > 0]  # what spread_prior fits (a night of identical start means is not)
    cap = (len(usable) - 1) * math.fsum(usable) / len(usable) if usable else 0.0  # its cap: the nights agree
    if fit is not None and fit.df < cap:
        return StartPrior(fit.var, fit.df, len(got), w, moderated=True)
    return StartPrior(pooled, df, len(got), w)


def f_sf(f: float, df1: float, df2: float) -> float:
    """P(F >= f) for Fisher's F with ``(df1, df2)`` df (the guard's one-sided p-value)."""
    if df1 <= 0 or df2 <= 0:
        raise StatsError(f"an F distribution needs positive df, got {df1} and {df2}")
    if f <= 0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return _betainc(df2 / 2, df1 / 2, df2 / (df2 + df1 * f))


PriorStatus = Literal["none", "used", "refused", "ignored"]


@dataclass(frozen=True)
class PriorUse:
    """What :func:`decide_nested` did with a start prior, for the reason text and ``run.json``.

    ``used``: tonight's spread of start means combined with the prior's; ``refused``: the guard
    found tonight noisier than the prior allows (tonight's own df only); ``ignored``: a prior of
    another design (window pairs per start) or one start tonight; ``none``: no prior given.
    """

    status: PriorStatus
    reason: str  # one clause for the decision's reason ("" for none and used)
    nights: int
    df: float
    guard_p: float | None  # the guard's one-sided p-value (None where it did not look)
    var: float | None = None  # the combined variance of a start mean (used only)
    total_df: float | None = None  # its df: prior df + starts - 1 (used only)
    guard_level: float = GUARD_LEVEL  # the level the guard's p-value was held against (guard_level(tonight's df))

    def as_json(self) -> dict[str, object]:
        return {"status": self.status, "nights": self.nights, "df": self.df, "guard_p": self.guard_p,
                "guard_level": self.guard_level, "reason": self.reason}


def guard_level(df: float) -> float:
    """The guard's one-sided level for tonight's spread on ``df`` df: :data:`GUARD_LEVEL` below
    :data:`GUARD_MANY_DF` df, :data:`GUARD_LEVEL_MANY` from there on (what each costs and protects:
    ``benchmarks/verdict_prior.py`` table 3 for 1-2 df, ``benchmarks/verdict_prior_committed.py`` for 6)."""
    return GUARD_LEVEL_MANY if df >= GUARD_MANY_DF else GUARD_LEVEL


SequenceStatus = Literal["none", "fitted", "too few"]


@dataclass(frozen=True)
class SequenceFit:
    """The first-arm (sequence) effect of one point's start means, as :func:`decide_nested` uses it.

    ``fitted``: the sequences' means are averaged with equal weight and the spread is pooled within them
    (``df = starts - sequences``); ``too few``: the design alternates, but with fewer than
    :data:`MIN_SEQUENCE_STARTS` starts of a sequence or :data:`MIN_SEQUENCE_DF` df left the start means are
    judged as they are; ``none``: one sequence (or no labels). ``f``/``p`` test whether the sequences differ
    (one-way ANOVA F, wherever a start of some order has a second): reported, never used to choose.
    """

    status: SequenceStatus
    groups: tuple[tuple[str, int, float], ...] = ()  # (label, starts, mean log ratio) in order of first start
    mean: float = math.nan  # the sequences' means averaged with equal weight (fitted)
    var: float | None = None  # pooled within-sequence variance of a start mean (fitted)
    df: int = 0
    scale: float = 0.0  # the estimate's variance is var * scale: sum(1 / n_g) / k**2 (1 / B when balanced)
    f: float | None = None
    p: float | None = None

    def as_json(self) -> dict[str, object]:
        return {"status": self.status, "df": self.df, "f": self.f, "p": self.p,
                "groups": [{"first": g, "starts": n, "mean_log_ratio": m} for g, n, m in self.groups],
                "min_df": MIN_SEQUENCE_DF}

    def reason(self) -> str:
        if self.status == "none":
            return ""
        by = ", ".join(f"{g} {_pct(math.expm1(m))} ({n} start{'s' if n != 1 else ''})" for g, n, m in self.groups)
        if self.status == "too few":
            return (f"first-arm effect not fitted ({by}): that takes {MIN_SEQUENCE_DF + len(self.groups)} starts, "
                    f"{MIN_SEQUENCE_STARTS} of each order")
        return (f"first-arm effect fitted: {by}, F = {self.f:.3g} (p = {self.p:.2g}); the order-balanced mean, "
                f"spread within orders, df = {self.df}")


def sequence_fit(means: Sequence[float], sequences: Sequence[object] | None) -> SequenceFit:
    """The first-arm fit of start means labelled by the order their start ran in (any hashable; ``None``: one).

    One-way ANOVA with the sequence as a fixed factor: the estimate is the unweighted mean of the ``k``
    sequence means, whose variance is ``s_p**2 * sum(1 / n_g) / k**2`` with ``s_p**2`` pooled within sequences
    on ``B - k`` df -- exact under normality whatever the sequence effect. Fitted only where the design
    allows it (:data:`MIN_SEQUENCE_STARTS` a sequence, :data:`MIN_SEQUENCE_DF` df left)."""
    if sequences is None:
        return SequenceFit("none")
    if len(sequences) != len(means):
        raise StatsError(f"first-arm fit: {len(means)} start means but {len(sequences)} sequence labels")
    by: dict[object, list[float]] = {}
    for m, lab in zip(means, sequences, strict=True):
        by.setdefault(lab, []).append(m)
    groups = tuple((str(lab), len(g), _mean(g)) for lab, g in by.items())
    k, b = len(by), len(means)
    if k < 2:
        return SequenceFit("none", groups)
    if b - k < 1:  # one start of each order: no spread within them, no test
        return SequenceFit("too few", groups)
    ssw = math.fsum((x - _mean(g)) ** 2 for g in by.values() for x in g)
    var = ssw / (b - k)
    grand = _mean(means)
    msb = math.fsum(len(g) * (_mean(g) - grand) ** 2 for g in by.values()) / (k - 1)
    f = msb / var if var > 0 else (math.inf if msb > 0 else 0.0)
    p = f_sf(f, k - 1, b - k)
    if min(len(g) for g in by.values()) < MIN_SEQUENCE_STARTS or b - k < MIN_SEQUENCE_DF:
        return SequenceFit("too few", groups, f=f, p=p)  # the test reported, the means judged as they are
    return SequenceFit("fitted", groups, _mean([_mean(g) for g in by.values()]), var, b - k,
                       math.fsum(1 / len(g) for g in by.values()) / k ** 2, f, p)


def fits_sequences(starts: int, sequences: int = 2) -> bool:
    """Whether a campaign of ``starts`` starts, its first arm alternating over ``sequences`` orders start by
    start, is judged with the first-arm effect fitted (:func:`sequence_fit`'s rule, for the planner)."""
    return starts // sequences >= MIN_SEQUENCE_STARTS and starts - sequences >= MIN_SEQUENCE_DF


@dataclass(frozen=True)
class _Spread:
    """Tonight's estimate (mean log ratio) and the variance of one start mean it is judged with, on ``df``;
    the estimate's variance is ``var * scale`` (``1 / B`` for the plain mean of ``B`` start means)."""

    mean: float
    var: float
    df: float
    scale: float


def _spread(means: Sequence[float], fit: SequenceFit) -> _Spread | None:
    """The start means as judged: with the first-arm effect fitted where :func:`sequence_fit` fitted it, else
    their plain mean and spread (``B - 1`` df); ``None`` for fewer than 2 starts."""
    if fit.status == "fitted" and fit.var is not None:
        return _Spread(fit.mean, fit.var, fit.df, fit.scale)
    if len(means) < 2:
        return None
    return _Spread(_mean(means), _var(means), len(means) - 1, 1 / len(means))


def _prior_use(tonight: _Spread | None, sizes: Sequence[int], prior: StartPrior | None) -> PriorUse:
    if prior is None:
        return PriorUse("none", "", 0, 0.0, None)
    borrowed = prior.describe()
    if any(s != prior.windows for s in sizes):
        return PriorUse("ignored", (f"the {borrowed} is not borrowed: it is of {prior.windows} window pairs per "
                                    f"start, tonight's starts have {_windows_text(sizes)}"),
                        prior.nights, prior.df, None)
    if tonight is None:
        return PriorUse("ignored", (f"the {borrowed} is not borrowed with one start: a second start is needed to "
                                    "check that tonight's spread is still the nights'"), prior.nights, prior.df, None)
    s2 = tonight.var
    p = f_sf(s2 / prior.var, tonight.df, prior.df)
    level = guard_level(tonight.df)
    if p < level:
        why = (f"the {borrowed} is not borrowed: tonight's start means spread {math.sqrt(s2) * 100:.2g} % against "
               f"the nights' {math.sqrt(prior.var) * 100:.2g} % (one-sided F test p = {p:.2g} < {level:g}); "
               "a rig whose noise grew is judged on tonight's own spread")
        return PriorUse("refused", why, prior.nights, prior.df, p, guard_level=level)
    total = prior.df + tonight.df
    return PriorUse("used", "", prior.nights, prior.df, p, (prior.df * prior.var + tonight.df * s2) / total, total,
                    guard_level=level)


def _judged(base: Decision, sp: _Spread, threshold: float, alpha: float, starts: int) -> Decision:
    """The t interval on ``sp``: its estimate, ``se = sqrt(var * scale)`` on its df (a prior's df added, or the
    sequences' taken away, where :func:`decide_nested` does either)."""
    m, var, df = sp.mean, sp.var, sp.df
    se = math.sqrt(var * sp.scale)
    thr = math.log1p(threshold)
    tq = t_quantile(1 - alpha, df)
    lo, hi = m - tq * se, m + tq * se
    p_fail = t_cdf((m - thr) / se, df) if se > 0 else (0.0 if m < thr else 1.0)
    outcome = Outcome.PASS if lo >= thr else (Outcome.FAIL if hi < thr else Outcome.INCONCLUSIVE)
    need = (pairs_for(math.sqrt(var), abs(m - thr), alpha, extra_df=df - starts + 1)
            if outcome is Outcome.INCONCLUSIVE else None)
    return dataclasses.replace(base, outcome=outcome, estimate=math.expm1(m), lower=math.expm1(lo),
                               upper=math.expm1(hi), pairs_needed=need, p_value=p_fail)


LaunchStatus = Literal["none", "passed", "fired", "one launch"]


@dataclass(frozen=True)
class LaunchCheck:
    """What the launch guard of :func:`decide_nested` found (starts made at once, ``campaign.starts_at_once``).

    ``none``: every start had a launch of its own (nothing to check); ``passed``: the launch means spread no
    more than their starts allow (one-way ANOVA F test at :data:`LAUNCH_GUARD_LEVEL`), the starts are the unit;
    ``fired``: they spread more, the launches are the unit; ``one launch``: several starts, all of one launch,
    where a launch effect cannot be told from the uplift.
    """

    status: LaunchStatus
    launches: int
    starts: int
    f: float | None = None
    p: float | None = None

    def as_json(self) -> dict[str, object]:
        return {"status": self.status, "launches": self.launches, "starts": self.starts, "f": self.f, "p": self.p,
                "level": LAUNCH_GUARD_LEVEL}

    def reason(self) -> str:
        if self.status == "passed":
            return (f"launch guard: {self.starts} starts in {self.launches} launches agree with their launches "
                    f"(F = {self.f:.3g}, p = {self.p:.2g} >= {LAUNCH_GUARD_LEVEL:g})")
        if self.status == "fired":
            return (f"launch guard: the {self.launches} launches' means spread more than their starts allow "
                    f"(F = {self.f:.3g}, p = {self.p:.2g} < {LAUNCH_GUARD_LEVEL:g}): judged on the launch means, "
                    f"df = {self.launches - 1}")
        if self.status == "one launch":
            return (f"the {self.starts} starts were made at once, in one launch: a launch effect cannot be told "
                    "from the uplift, at least 2 launches are needed")
        return ""


def launch_check(means: Sequence[float], launches: Sequence[object] | None) -> LaunchCheck:
    """The launch guard on start means labelled by launch (any hashable label; ``None``: one launch each).

    One-way ANOVA of the start means with the launch as the factor, unbalanced launches allowed: F =
    MS between launches / MS within, on (L - 1, S - L) df. Why a test and not a third variance level: with 2-4
    launches a launch component has 1-3 df, and judging on it always would give back what starts made at once
    buy; the test sends the verdict to the launch means only when the data show a launch effect.
    """
    s = len(means)
    if launches is None or len(set(launches)) == s:
        return LaunchCheck("none", s, s)
    if len(launches) != s:
        raise StatsError(f"launch guard: {s} start means but {len(launches)} launch labels")
    groups = _by_launch(means, launches)
    n_l = len(groups)
    if n_l == 1:
        return LaunchCheck("one launch", 1, s)
    grand = _mean(means)
    msb = math.fsum(len(g) * (_mean(g) - grand) ** 2 for g in groups.values()) / (n_l - 1)
    msw = math.fsum((x - _mean(g)) ** 2 for g in groups.values() for x in g) / (s - n_l)
    f = msb / msw if msw > 0 else (math.inf if msb > 0 else 0.0)
    p = f_sf(f, n_l - 1, s - n_l)
    return LaunchCheck("fired" if p < LAUNCH_GUARD_LEVEL else "passed", n_l, s, f, p)


@dataclass(frozen=True)
class NestedModel:
    """What :func:`decide_nested` applies to a point's blocks, found once: the launch guard's finding, the
    first-arm fit (``none`` where the guard fired: the launch means are judged then) and the start prior's use
    (``ignored`` where the guard fired). Why one object: ``run.json`` records all three beside the decision and
    the aggregate's interval names them; asked one by one they regrouped the windows each time, and the prior's
    answer could disagree with the decision's where the guard fired."""

    launch: LaunchCheck
    fit: SequenceFit
    prior: PriorUse


def nested_model(blocks: Blocks, *, higher_is_better: bool = True, prior: StartPrior | None = None,
                 launches: Sequence[object] | None = None, sequences: Sequence[object] | None = None) -> NestedModel:
    """The model :func:`decide_nested` applies to ``blocks`` with these arguments (the same rules, one pass)."""
    ratios = _block_ratios(blocks, higher_is_better)
    return _model([_mean(r) for r in ratios], [len(r) for r in ratios], prior, launches, sequences)[0]


def prior_use(blocks: Blocks, prior: StartPrior | None, *, higher_is_better: bool = True,
              sequences: Sequence[object] | None = None, launches: Sequence[object] | None = None) -> PriorUse:
    """Whether :func:`decide_nested` borrows ``prior`` for these blocks, and why not (:func:`nested_model`)."""
    return nested_model(blocks, higher_is_better=higher_is_better, prior=prior, launches=launches,
                        sequences=sequences).prior


def _model(means: Sequence[float], sizes: Sequence[int], prior: StartPrior | None,
           launches: Sequence[object] | None,
           sequences: Sequence[object] | None) -> tuple[NestedModel, _Spread | None, PriorUse]:
    """``(the model applied, tonight's spread as judged, the prior's use as first considered)``: the last names
    in the decision's reason why a prior was refused even where the launch guard then set it aside."""
    check = launch_check(means, launches)
    fit = sequence_fit(means, sequences) if check.status != "fired" else SequenceFit("none")
    tonight = _spread(means, fit)
    considered = _prior_use(tonight, sizes, prior)
    use = considered
    if check.status == "fired" and prior is not None:
        use = PriorUse("ignored", (f"the {prior.describe()} is not borrowed: the launch guard fired and the launch "
                                   "means are judged"), considered.nights, considered.df, None)
    return NestedModel(check, fit, use), tonight, considered


def _by_launch(means: Sequence[float], launches: Sequence[object]) -> dict[object, list[float]]:
    """The start means of each launch, launches in order of their first start."""
    groups: dict[object, list[float]] = {}
    for m, lab in zip(means, launches, strict=True):
        groups.setdefault(lab, []).append(m)
    return groups


def decide_nested(blocks: Blocks, *, threshold: float, higher_is_better: bool = True, alpha: float,
                  quantity: str = "uplift", prior: StartPrior | None = None,
                  launches: Sequence[object] | None = None, sequences: Sequence[object] | None = None) -> Decision:
    """Does ``on`` beat ``off`` by at least ``threshold`` (a fraction), judged with starts as the unit?

    The same three outcomes, one-sided ``alpha`` per wrong verdict and ``p_value`` as
    :func:`~pytest_p2p.stats.decide.decide_uplift` — it *is* that decision, applied to the
    block means (one value per start); only the reason speaks of starts and windows.  ``n``
    is the number of starts.  One start is inconclusive: a window-level interval would
    ignore the start-to-start spread.

    With a ``prior`` (:class:`StartPrior`) of tonight's windows per start, tonight's variance
    of start means ``s2`` (``B - 1`` df) is combined with it as ``(d0 s0^2 + (B-1) s2) /
    (d0 + B - 1)`` on ``d0 + B - 1`` df — the posterior of a scaled inverse chi-square prior,
    exact when tonight shares the nights' spread.  Two exceptions, both named in the reason:

    * **the guard**: when ``s2 / s0^2`` is beyond the one-sided F test at :func:`guard_level`
      (``B - 1``, ``d0`` df; 5 %, or 20 % from 6 df on), the prior is refused and tonight is judged
      on its own df — a rig whose noise grew must not be judged with last month's spread;
    * **one start** is still inconclusive with a prior: the guard cannot look.  Deciding one
      start on the prior alone is as good as two when the spread held (0.7-0.9 % per kind), but
      with a start sd 2x / 4x the history's it is wrong in 6-10 % / 23-30 % of campaigns, against
      4-8 % / 7-15 % with 2-3 starts behind the guard (``benchmarks/verdict_prior.py``, table 1).

    What the guard cannot do: with 2-3 starts its F test has 1-2 df, so it refuses only gross
    changes (a 4x start sd in 46-72 % of campaigns, 2x in 19-32 %); a rig whose start spread
    doubled is wrongly judged in 4-8 % of campaigns per kind.  The prior assumes the rig and
    design of the nights it came from — the history that fills it must hold nights of the same
    rig fingerprint only.  The guard's level (5 %) is table 3's trade: 10 % refuses twice the
    honest nights (power at -10 % with 2 starts 95 -> 90 %) for 12.5 -> 11.5 % wrong at 4x.  With
    6 df and more (the committed rig's 8 starts, first arm fitted) refusing costs little, and the
    level is 20 %: a doubled start spread is wrongly judged in 1.6-2.0 % of campaigns per kind
    (2.4-3.1 % at 5 %), a spread that held or varied in 0.34-0.95 % (mean over cells;
    ``benchmarks/verdict_prior_committed.py``).

    A prior of another design (window pairs per start) is ignored, and the reason says so.

    ``launches``: a label per block naming the launch that made its start (``campaign.starts_at_once``: starts
    made at once share their launch's moment). Through :func:`launch_check`: when the launch means spread more
    than their starts allow, the point is judged on the launch means (df = launches - 1, no prior); several
    starts of one launch only are inconclusive, as one start is.

    ``sequences``: a label per block naming the order its start ran in (the arm that went first). Where
    :func:`sequence_fit` fits it (2 starts of each order and :data:`MIN_SEQUENCE_DF` df at least), the estimate
    is the order-balanced mean and tonight's spread is the one within orders (``B - 2`` df), a prior combined
    with that; not where the launch guard fired (launch means: starts made at once ran both orders).
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
    model, tonight, considered = _model(means, sizes, prior, launches, sequences)
    check, fit, use = model.launch, model.fit, model.prior
    note = "".join(f"; {x}" for x in (considered.reason, check.reason(), fit.reason()) if x)
    if len(ratios) == 1:
        return dataclasses.replace(base, reason=(
            f"{quantity} {_pct(base.estimate)} ({win}) from one server start: the start-to-start spread is "
            f"unknown, at least 2 starts are needed{note}"))
    if check.status == "one launch":
        return dataclasses.replace(base, outcome=Outcome.INCONCLUSIVE, pairs_needed=None, reason=(
            f"{quantity} {_pct(base.estimate)} ({len(ratios)} starts x {win}): {check.reason()}"))
    if check.status == "fired":
        assert launches is not None
        lm = [_mean(g) for g in _by_launch(means, launches).values()]
        base = decide_uplift([math.exp(m) for m in lm], [1.0] * len(lm), threshold=threshold, alpha=alpha,
                             quantity=quantity)
    elif use.status == "used" and tonight is not None:
        base = _judged(base, _Spread(tonight.mean, use.var or 0.0, use.total_df or 1.0, tonight.scale), threshold,
                       alpha, len(means))
    elif fit.status == "fitted" and tonight is not None:
        base = _judged(base, tonight, threshold, alpha, len(means))
    borrowed = f"; {prior.describe()}" if prior is not None and use.status == "used" else ""
    head = (f"{quantity} {_pct(base.estimate)} ({base.level * 100:.4g} % CI {_pct(base.lower)} .. "
            f"{_pct(base.upper)}, {len(ratios)} starts x {win}; start sd {_sd(comp.start_sd)}, "
            f"window sd {_sd(comp.window_sd)}{borrowed}) vs threshold {_pct(threshold)}")
    if base.outcome is Outcome.PASS:
        why = f"{head}: the lower bound clears it{note}"
    elif base.outcome is Outcome.FAIL:
        why = f"{head}: the upper bound is below it{note}"
    else:
        per = round(comp.mean_windows_per_block)
        unit = "launches" if check.status == "fired" else "starts"
        more = (f"about {base.pairs_needed} {unit} of {per} window pairs would decide it"
                if base.pairs_needed is not None
                else "the estimate sits on the threshold: no number of starts decides it")
        why = f"{head}: inconclusive, the interval straddles the threshold; {more}{note}"
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


def _mean_sd_factor(df: float) -> float:
    """``E[s] / sigma`` for an sd estimate on ``df`` df (c4 of ``df + 1`` values, fractional df allowed)."""
    return math.sqrt(2 / df) * math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2))


def expected_halfwidth(start_sd: float, window_sd: float, starts: int, windows: int, alpha: float, *,
                       prior_df: float = 0.0, alternating: bool = False) -> float:
    """The expected half-width (log units, ~fraction) of :func:`decide_nested`'s ``1 - 2 alpha`` interval.

    ``t(1 - alpha, B - 1 + prior_df) * E[s] / sqrt(B)`` where ``s`` is the sd of ``B`` block means,
    each of variance ``start_sd**2 + window_sd**2 / W``, estimated on ``B - 1 + prior_df`` df
    (``prior_df``: a :class:`StartPrior`'s df, borrowed when the guard lets it);
    ``E[s] = c4 * sigma`` (normal theory), so this is the mean half-width, not an optimistic plug-in.
    ``alternating``: the first arm alternates start by start (the campaign's order), so from
    :func:`fits_sequences` starts on the decision fits it: one df less, and ``sqrt((1/n1 + 1/n2) / 4)``
    for ``1 / sqrt(B)`` (the same when ``B`` is even). The spreads are those within an order.
    """
    s_sd, w_sd = _sd_arg(start_sd, "start sd"), _sd_arg(window_sd, "window sd")
    if starts < 2 or windows < 1:
        raise StatsError(f"an interval needs >= 2 starts of >= 1 window pair, got {starts} x {windows}")
    if not 0 < alpha < 0.5:
        raise StatsError(f"alpha must be in (0, 0.5), got {alpha}")
    if not prior_df >= 0 or math.isinf(prior_df):
        raise StatsError(f"prior df must be a finite number >= 0, got {prior_df}")
    sigma = math.sqrt(s_sd ** 2 + w_sd ** 2 / windows)
    if alternating and fits_sequences(starts):
        n1, n2 = (starts + 1) // 2, starts // 2
        df, scale = starts - 2 + prior_df, (1 / n1 + 1 / n2) / 4
    else:
        df, scale = starts - 1 + prior_df, 1 / starts
    return t_quantile(1 - alpha, df) * _mean_sd_factor(df) * sigma * math.sqrt(scale)


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
    prior: StartPrior | None = None  # the plan borrows this start spread (its design's windows, its df)
    windows_text: str | None = None  # window pairs per point where they differ (``2 (c16), 4 (c64)``)

    def describe(self) -> str:
        """``3 starts x 6 window pairs x 2 points ~ 14 min, expected 98 % CI half-width 1.6 % if ...``."""
        took = f"{self.seconds / 60:.0f} min" if self.seconds >= 90 else f"{self.seconds:.0f} s"
        if self.prior is not None:
            cond = (f"if a start mean varies by {math.sqrt(self.prior.var) * 100:.1f} % as on earlier nights "
                    f"({self.prior.describe()})")
        else:
            cond = (f"if start sd <= {self.start_sd * 100:.1f} % and window sd <= {self.window_sd * 100:.1f} %")
        size = (f"{self.starts} starts x window pairs {self.windows_text}" if self.windows_text
                else f"{self.starts} starts x {self.windows} window pairs x {self.points} point"
                     f"{'s' if self.points != 1 else ''}")
        text = (f"{size} ~ {took}, expected {(1 - 2 * self.alpha) * 100:.4g} % CI "
                f"half-width {self.halfwidth * 100:.1f} % of the ratio {cond}")
        if not self.meets_target:
            text += f" (the target {self.target * 100:.1f} % is out of reach within {self.starts} starts)"
        return text


def look_alpha(alpha: float, starts: int, spent_over: int | None) -> float:
    """The alpha a campaign of ``starts`` planned starts is judged at on its first look, where the adaptive stop may
    add starts up to ``spent_over`` (``max_starts``): its share ``starts / max(starts, spent_over)`` of ``alpha``
    (``SequentialPlan.alpha_at``). ``None``: no starts are added, the whole ``alpha``.

    Why: the plan line said "+-2 % would take 9 starts ..., expected 99 % CI half-width 1.9 %" beside "expected
    99.2 % CI half-width ~2.1 %" at the planned 8 (night 4 of the 7B rig's chain, 2x H200, 2026-11-28): a rig that
    took the advice and kept ``max_starts: 10`` would be judged at 99.1 %, not 99 %."""
    plan = SequentialPlan(alpha=alpha, min_pairs=starts, max_pairs=max(starts, spent_over or starts))
    return plan.alpha_at(starts)


def plan_for(start_sd: float, window_sd: float, target_halfwidth: float, alpha: float, start_cost_s: float,
             window_cost_s: float, max_starts: int, *, points: int = 1, min_starts: int = 2,
             alternating: bool = False, spent_over: int | None = None) -> NestedPlan:
    """The cheapest (starts, windows) whose expected half-width is at most ``target_halfwidth``.

    Searches ``min_starts..max_starts`` starts and ``MIN_WINDOWS..MAX_WINDOWS`` window pairs
    with :func:`expected_halfwidth` — so the t quantile of few starts (df = starts - 1) is
    paid for, which the classic :func:`windows_for` optimum ignores.  ``start_cost_s`` is one
    start of both arms' servers, ``window_cost_s`` one window pair at one point.  When no plan
    within ``max_starts`` reaches the target, the plan at ``max_starts`` with the
    :func:`windows_for` optimum is returned with ``meets_target=False``.  ``alternating``: as
    :func:`expected_halfwidth`'s (the first arm's effect fitted from :func:`fits_sequences` starts on).
    ``spent_over``: the campaign's ``max_starts``; each plan is judged at its first look's alpha
    (:func:`look_alpha`), and the plan keeps that alpha.
    """
    target = _positive(target_halfwidth, "target half-width")
    start_cost, window_cost = _positive(start_cost_s, "start cost"), _positive(window_cost_s, "window cost")
    if points < 1 or not 2 <= min_starts <= max_starts:
        raise StatsError(f"need points >= 1 and 2 <= min_starts <= max_starts, got {points}, {min_starts}, "
                         f"{max_starts}")
    best: tuple[float, float, int, int, float] | None = None  # (seconds, halfwidth, starts, windows, look alpha)
    for b in range(min_starts, max_starts + 1):
        a_b = look_alpha(alpha, b, spent_over)
        for w in range(MIN_WINDOWS, MAX_WINDOWS + 1):
            h = expected_halfwidth(start_sd, window_sd, b, w, a_b, alternating=alternating)
            if h <= target:
                cand = (b * (start_cost + points * w * window_cost), h, b, w, a_b)
                best = cand if best is None or cand < best else best
                break  # more windows at these starts only cost more
    meets = best is not None
    if best is None:
        comp = Components(start_sd, window_sd, max_starts, 0, 0.0, None, math.nan)
        w = windows_for(comp, start_cost, points * window_cost)
        a_b = look_alpha(alpha, max_starts, spent_over)
        best = (max_starts * (start_cost + points * w * window_cost),
                expected_halfwidth(start_sd, window_sd, max_starts, w, a_b, alternating=alternating), max_starts, w,
                a_b)
    seconds, h, b, w, a_b = best
    return NestedPlan(b, w, h, seconds, points, meets, start_sd, window_sd, a_b, target)


def plan_with_prior(prior: StartPrior, target_halfwidth: float, alpha: float, start_cost_s: float,
                    window_cost_s: float, max_starts: int, *, points: int = 1, min_starts: int = 2,
                    alternating: bool = False, spent_over: int | None = None) -> NestedPlan:
    """The fewest starts whose expected half-width reaches ``target_halfwidth`` when ``prior`` is borrowed.

    The windows per start are the prior's (its variance is valid for that design only), the
    spread of a start mean is the prior's, and the t quantile has ``prior.df + B - 1`` df — so
    more nights (more df) need fewer starts.  It assumes the guard lets the prior in; when
    the prior is refused the campaign falls back to :func:`plan_for`'s arithmetic. ``spent_over``: as
    :func:`plan_for`'s.
    """
    target = _positive(target_halfwidth, "target half-width")
    start_cost, window_cost = _positive(start_cost_s, "start cost"), _positive(window_cost_s, "window cost")
    if points < 1 or not 2 <= min_starts <= max_starts:
        raise StatsError(f"need points >= 1 and 2 <= min_starts <= max_starts, got {points}, {min_starts}, "
                         f"{max_starts}")
    w, sd = prior.windows, math.sqrt(_positive(prior.var, "prior variance"))
    b, h, a_b = _fewest_starts(sd, 0.0, w, target, alpha, min_starts, max_starts, spent_over, prior.df, alternating)
    return NestedPlan(b, w, h, b * (start_cost + points * w * window_cost), points, h <= target, sd, 0.0, a_b,
                      target, prior)


def plan_at_windows(start_sd: float, window_sd: float, windows: int, target_halfwidth: float, alpha: float,
                    start_cost_s: float, start_windows_cost_s: float, max_starts: int, *, points: int = 1,
                    min_starts: int = 2, alternating: bool = False, spent_over: int | None = None,
                    windows_text: str | None = None) -> NestedPlan:
    """The fewest starts whose expected half-width reaches ``target_halfwidth`` with ``windows`` window pairs per
    start kept, not searched as :func:`plan_for` does: a rig with window pairs per point (``windows_text``, the
    plan line's ``2 (c16), 3 (c64)``; ``windows`` the pairs of the point the spreads are of) chose them, and one
    count for every point would plan that choice away. ``start_windows_cost_s``: one start's windows, every
    point's; ``spent_over``: as :func:`plan_for`'s."""
    target = _positive(target_halfwidth, "target half-width")
    if points < 1 or not 2 <= min_starts <= max_starts:
        raise StatsError(f"need points >= 1 and 2 <= min_starts <= max_starts, got {points}, {min_starts}, "
                         f"{max_starts}")
    b, h, a_b = _fewest_starts(start_sd, window_sd, windows, target, alpha, min_starts, max_starts, spent_over, 0.0,
                               alternating)
    return NestedPlan(b, windows, h, b * (start_cost_s + start_windows_cost_s), points, h <= target, start_sd,
                      window_sd, a_b, target, windows_text=windows_text)


def _fewest_starts(start_sd: float, window_sd: float, windows: int, target: float, alpha: float, min_starts: int,
                   max_starts: int, spent_over: int | None, prior_df: float,
                   alternating: bool) -> tuple[int, float, float]:
    """``(starts, half-width, look alpha)``: the fewest starts from ``min_starts`` whose expected half-width at
    their first look's alpha reaches ``target``, else those of ``max_starts``."""
    for b in range(min_starts, max_starts + 1):
        a_b = look_alpha(alpha, b, spent_over)
        h = expected_halfwidth(start_sd, window_sd, b, windows, a_b, prior_df=prior_df, alternating=alternating)
        if h <= target:
            break
    return b, h, a_b


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
