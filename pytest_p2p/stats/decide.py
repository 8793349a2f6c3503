"""Three-outcome decisions on confidence bounds: the minimum-uplift rule and its stopping plan.

Why bounds and not point estimates: a point estimate on 3 noisy pairs passes a true 0 %
uplift and fails a true +9 % one in a fifth of campaigns.  A decision here is one of

* ``PASS`` — the lower confidence bound clears the threshold;
* ``FAIL`` — the upper confidence bound is below the threshold;
* ``INCONCLUSIVE`` — the interval straddles the threshold; ``pairs_needed`` says how many
  pairs would probably decide it (95 % chance at the present estimate and spread).

Each bound is one-sided at ``alpha``, so each kind of wrong verdict (a pass when the
truth is below the threshold, a fail when it clears it) has probability at most
``alpha``; the interval ``[lower, upper]`` therefore has coverage ``1 - 2 * alpha``,
reported as ``level``.

Pairs: ``on[i]`` and ``off[i]`` ran next to each other (the campaign interleaves arms),
so the per-pair log ratio cancels anything both arms share (a slower day, drift that
the schedule balances).  Estimates are geometric means of the ratios minus one.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .tdist import StatsError, t_cdf, t_quantile, z_quantile
from .welch import welch_df

POWER = 0.95  # pairs_needed aims at this chance of a decision
MAX_PAIRS_NEEDED = 100_000
SCREEN_Z = 5.0  # robust z beyond which a pair is re-run
SCREEN_FLOOR = 0.02  # smallest spread (log units, ~2 %) the screen assumes: 3 pairs know little


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Decision:
    quantity: str
    outcome: Outcome
    estimate: float  # fraction: 0.09 = +9 %
    lower: float
    upper: float
    level: float  # coverage of [lower, upper]
    threshold: float
    n: int
    pairs_needed: int | None
    reason: str
    p_value: float | None = None  # one-sided p of the failing direction, for multiplicity control

    @property
    def decided(self) -> bool:
        return self.outcome is not Outcome.INCONCLUSIVE


def _numbers(xs: Sequence[float], what: str) -> list[float]:
    out: list[float] = []
    for x in xs:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise StatsError(f"{what}: expected positive finite numbers, got {x!r}")
        out.append(float(x))
    return out


def log_ratios(on: Sequence[float], off: Sequence[float], *, higher_is_better: bool = True) -> list[float]:
    """``log(on_i / off_i)`` (turned round for lower-is-better): positive means ``on`` is better."""
    if len(on) != len(off):
        raise StatsError(f"paired values need equal counts, got {len(on)} and {len(off)}")
    a, b = _numbers(on, "on"), _numbers(off, "off")
    sign = 1.0 if higher_is_better else -1.0
    return [sign * (math.log(x) - math.log(y)) for x, y in zip(a, b, strict=True)]


def pairs_for(spread: float, distance: float, alpha: float, power: float = POWER, *,
              extra_df: float = 0.0) -> int | None:
    """Smallest n with ``(t(1-alpha, n-1+extra_df) + z(power)) * spread / sqrt(n) <= distance``: the pairs
    that would put a bound past the threshold with probability ``power`` if the estimate stays put.
    ``None`` when the estimate sits on the threshold (no number of pairs decides it).  ``extra_df``:
    degrees of freedom the spread carries from elsewhere (a start spread learned from earlier nights)."""
    if distance <= 0:
        return None
    if spread <= 0:
        return 2
    z = z_quantile(power)
    n = max(2, math.ceil(2 - extra_df))  # at least 1 df (a fitted first-arm effect takes one: extra_df -1)
    while n <= MAX_PAIRS_NEEDED:
        if (t_quantile(1 - alpha, n - 1 + extra_df) + z) * spread / math.sqrt(n) <= distance:
            return n
        n = n + 1 if n < 50 else int(n * 1.1) + 1
    return None


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def decide_uplift(on: Sequence[float], off: Sequence[float], *, threshold: float,
                  higher_is_better: bool = True, alpha: float, quantity: str = "uplift") -> Decision:
    """Does ``on`` beat ``off`` by at least ``threshold`` (a fraction)?  See the module doc."""
    if not 0 < alpha < 0.5:
        raise StatsError(f"alpha must be in (0, 0.5), got {alpha}")
    if threshold <= -1:
        raise StatsError(f"an uplift threshold must be above -100 %, got {threshold}")
    r = log_ratios(on, off, higher_is_better=higher_is_better)
    n = len(r)
    thr = math.log1p(threshold)
    if n == 0:
        return Decision(quantity, Outcome.INCONCLUSIVE, math.nan, -1.0, math.inf, 1 - 2 * alpha, threshold, 0,
                        None, "no pairs measured")
    m = math.fsum(r) / n
    est = math.expm1(m)
    if n < 2:
        return Decision(quantity, Outcome.INCONCLUSIVE, est, -1.0, math.inf, 1 - 2 * alpha, threshold, n, None,
                        f"{quantity} {_pct(est)} from 1 pair: the spread is unknown, at least 2 pairs are needed")
    s = math.sqrt(math.fsum((x - m) ** 2 for x in r) / (n - 1))
    se = s / math.sqrt(n)
    tq = t_quantile(1 - alpha, n - 1)
    lo, hi = m - tq * se, m + tq * se
    p_fail = t_cdf((m - thr) / se, n - 1) if se > 0 else (0.0 if m < thr else 1.0)
    head = (f"{quantity} {_pct(est)} ({(1 - 2 * alpha) * 100:.4g} % CI {_pct(math.expm1(lo))} .. "
            f"{_pct(math.expm1(hi))}, {n} pairs) vs threshold {_pct(threshold)}")
    if lo >= thr:
        outcome, need, why = Outcome.PASS, None, f"{head}: the lower bound clears it"
    elif hi < thr:
        outcome, need, why = Outcome.FAIL, None, f"{head}: the upper bound is below it"
    else:
        outcome = Outcome.INCONCLUSIVE
        need = pairs_for(s, abs(m - thr), alpha)
        more = (f"about {need} pairs would decide it" if need is not None
                else "the estimate sits on the threshold: no number of pairs decides it")
        why = f"{head}: inconclusive, the interval straddles the threshold; {more}"
    return Decision(quantity, outcome, est, math.expm1(lo), math.expm1(hi), 1 - 2 * alpha, threshold, n, need,
                    why, p_fail)


def decide_uplift_unpaired(on: Sequence[float], off: Sequence[float], *, threshold: float,
                           higher_is_better: bool = True, alpha: float, quantity: str = "uplift") -> Decision:
    """:func:`decide_uplift` for two arms whose values were not measured side by side (Welch).

    Why a second rule: the probe measures each arm in its own processes (the arm's
    environment is fixed when NCCL starts), so trial ``i`` of one arm has no partner in
    the other; pairing them by index would invent a correlation.  The estimate is the
    ratio of the arms' geometric means minus one; its interval is Welch's t on the log
    values (Welch-Satterthwaite degrees of freedom), one-sided at ``alpha`` per bound as
    in :func:`decide_uplift`.  ``n`` is the smaller arm's count; ``pairs_needed`` is the
    values per arm that would probably decide it.  The interval covers the spread *within*
    each arm's runs only: what moves a whole run (another process, another day) is not in
    it, which is why a campaign pairs interleaved runs instead.
    """
    if not 0 < alpha < 0.5:
        raise StatsError(f"alpha must be in (0, 0.5), got {alpha}")
    if threshold <= -1:
        raise StatsError(f"an uplift threshold must be above -100 %, got {threshold}")
    sign = 1.0 if higher_is_better else -1.0
    a = [math.log(x) for x in _numbers(on, "on")]
    b = [math.log(x) for x in _numbers(off, "off")]
    n = min(len(a), len(b))
    thr = math.log1p(threshold)
    level = 1 - 2 * alpha
    if n == 0:
        return Decision(quantity, Outcome.INCONCLUSIVE, math.nan, -1.0, math.inf, level, threshold, 0, None,
                        "no values measured in one of the arms")
    ma, mb = math.fsum(a) / len(a), math.fsum(b) / len(b)
    m = sign * (ma - mb)
    est = math.expm1(m)
    if n < 2:
        return Decision(quantity, Outcome.INCONCLUSIVE, est, -1.0, math.inf, level, threshold, n, None,
                        f"{quantity} {_pct(est)} from 1 value in an arm: the spread is unknown, at least 2 per arm "
                        f"are needed")
    va = math.fsum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = math.fsum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    se = math.sqrt(va + vb)
    pooled_df = float(len(a) + len(b) - 2)
    df = welch_df(va, len(a), vb, len(b)) if se > 0 else pooled_df
    tq = t_quantile(1 - alpha, df)
    lo, hi = m - tq * se, m + tq * se
    p_fail = t_cdf((m - thr) / se, df) if se > 0 else (0.0 if m < thr else 1.0)
    head = (f"{quantity} {_pct(est)} ({level * 100:.4g} % CI {_pct(math.expm1(lo))} .. "
            f"{_pct(math.expm1(hi))}, {len(a)} and {len(b)} values) vs threshold {_pct(threshold)}")
    need: int | None = None
    if lo >= thr:
        outcome, why = Outcome.PASS, f"{head}: the lower bound clears it"
    elif hi < thr:
        outcome, why = Outcome.FAIL, f"{head}: the upper bound is below it"
    else:
        outcome = Outcome.INCONCLUSIVE
        need = pairs_for(se * math.sqrt(n), abs(m - thr), alpha)
        more = (f"about {need} values per arm would decide it" if need is not None
                else "the estimate sits on the threshold: no number of values decides it")
        why = f"{head}: inconclusive, the interval straddles the threshold; {more}"
    return Decision(quantity, outcome, est, math.expm1(lo), math.expm1(hi), level, threshold, n, need, why, p_fail)


def _median(xs: Sequence[float]) -> float:
    ys = sorted(xs)
    k = len(ys) // 2
    return ys[k] if len(ys) % 2 else 0.5 * (ys[k - 1] + ys[k])


def outliers(values: Sequence[float], *, z: float = SCREEN_Z, floor: float = SCREEN_FLOOR) -> list[int]:
    """Indices of values far from the others (log scale, leave-one-out median and MAD).

    Each value is compared with the median of the *other* values, scaled by their MAD
    (x 1.4826, a normal sigma) but never by less than ``floor``: with 3 reps a MAD can
    be tiny by luck, and a re-run costs time, not a wrong verdict.  When more than a
    third would be flagged nothing is: that is noise, not a bad rep.  ``[]`` below 3 values.
    """
    xs = [math.log(x) for x in _numbers(values, "screen")]
    if len(xs) < 3:
        return []
    flagged = []
    for i, x in enumerate(xs):
        rest = xs[:i] + xs[i + 1:]
        med = _median(rest)
        scale = max(1.4826 * _median([abs(y - med) for y in rest]), floor)
        if abs(x - med) > z * scale:
            flagged.append(i)
    return flagged if len(flagged) <= len(xs) // 3 else []


def screen_pairs(on: Sequence[float], off: Sequence[float], *, higher_is_better: bool = True) -> list[int]:
    """Indices of pairs to re-run: an outlying log ratio or an outlying value of either arm.

    Uses :func:`outliers` on the paired log ratios and on each arm's values; ``[]`` with
    fewer than 3 pairs (nothing to compare against).  ``higher_is_better`` does not change
    which pairs are odd; it is accepted so callers pass the metric's direction uniformly.
    """
    if len(on) != len(off):
        raise StatsError(f"paired values need equal counts, got {len(on)} and {len(off)}")
    if len(on) < 3:
        return []
    ratios = [math.exp(r) for r in log_ratios(on, off, higher_is_better=higher_is_better)]
    bad = set(outliers(ratios)) | set(outliers(on)) | set(outliers(off))
    return sorted(bad)


@dataclass(frozen=True)
class SequentialPlan:
    """Adaptive pairs: look after ``min_pairs`` and after every further pair up to ``max_pairs``.

    Alpha spending (why it keeps the error rate): the look at ``k`` pairs uses
    ``alpha_at(k) = alpha * (f(k) - f(previous look))`` with the linear spending function
    ``f(k) = k / max_pairs`` (the first look, at ``min_pairs``, gets ``alpha * min_pairs /
    max_pairs``).  The per-look levels sum to ``alpha``, and a wrong verdict over the
    whole sequence needs a wrong verdict at some look, so by the union bound
    ``P(wrong at any look) <= sum_k alpha_at(k) = alpha`` — whatever the correlation
    between looks, and for each kind of wrong verdict separately.  It is conservative
    (group-sequential boundaries that model the correlation are tighter), but needs no
    tables and holds for t statistics with estimated spread.  A plan with
    ``min_pairs == max_pairs`` is the fixed design: one look at the full ``alpha``.
    """

    alpha: float
    min_pairs: int
    max_pairs: int

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise StatsError(f"alpha must be in (0, 0.5), got {self.alpha}")
        if not 1 <= self.min_pairs <= self.max_pairs:
            raise StatsError(f"need 1 <= min_pairs <= max_pairs, got {self.min_pairs} and {self.max_pairs}")

    def alpha_at(self, pairs: int) -> float:
        """The per-look alpha at ``pairs`` pairs (0 outside ``[min_pairs, max_pairs]``: no look there)."""
        if pairs < self.min_pairs or pairs > self.max_pairs:
            return 0.0
        prev = 0 if pairs == self.min_pairs else pairs - 1
        return self.alpha * (pairs - prev) / self.max_pairs

    def should_continue(self, decisions: Sequence[Decision], pairs: int) -> bool:
        """Add a pair while below ``min_pairs``, or while any decision is inconclusive and
        ``max_pairs`` is not reached."""
        if pairs < self.min_pairs:
            return True
        if pairs >= self.max_pairs:
            return False
        return any(d.outcome is Outcome.INCONCLUSIVE for d in decisions)
