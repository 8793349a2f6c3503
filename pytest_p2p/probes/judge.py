"""Pure judgements of probe results against the rig's thresholds, on confidence bounds over repeated trials.

Why bounds: one timed batch per arm judged a real NVLink pair as 15 % *slower* with P2P
(``8KiB: p2p_on 18.5 us vs p2p_off 15.7 us``, a cold first batch) while every repeated
measurement gave +30 %. Each threshold is now judged like the campaign's uplift: **pass**
when the confidence bound on the right side clears it, **fail** when the bound on the other
side is past it, **inconclusive** when the interval straddles it (the checks skip then, and
fail under ``--p2p-strict``). Each check is one family at the rig's ``probe.alpha`` (0.01): it fails when any of
its sizes fails, so each of its ``k`` sizes is bounded one-sided at ``alpha / k`` (Bonferroni,
:func:`per_size`; one size: 98 % intervals, the four decode sizes: 99.5 %). Judged at ``alpha``
each, four sizes at a true value on the threshold failed the check 3.4 % of the time (0.8 % split;
``benchmarks/verdict_family.py``, 4000 checks a cell). The bounds cover the trials' spread within
one run of each arm, not an effect of the run itself (docs/checks.md).

* ``busbw_min_gbs`` / ``latency_max_us``: the trials of one run against a fixed number — a
  one-sample t bound on the log values (``decide_uplift`` against the constant threshold);
* the uplift: the two arms run in separate processes one after the other, so their trials
  are not paired — Welch's interval (:func:`pytest_p2p.stats.decide.decide_uplift_unpaired`);
* the copy probe: peer and host-staged rounds alternate, so round ``i`` of each is a pair —
  the paired :func:`decide_uplift`.

A recording made before trials (the shipped demo, older results) has one value per size.
It is still judged, by the old point rule, and every line says so (``point comparison of one
recorded value, no trials``): there is no spread to bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..stats.decide import Decision, Outcome, decide_uplift, decide_uplift_unpaired
from ..util import format_size
from .allreduce import AllReduceResult, Row
from .config import Thresholds
from .p2pcopy import P2PCopyResult

POINT_RULE = "point comparison of one recorded value, no trials: not judged on a bound"


@dataclass(frozen=True)
class Judgement:
    """One judged quantity: its outcome and the line a person reads."""

    outcome: Outcome
    line: str


def overall(judgements: Sequence[Judgement]) -> Outcome:
    """Fail if any fails, else inconclusive if any is, else pass (nothing judged: pass)."""
    outcomes = {j.outcome for j in judgements}
    if Outcome.FAIL in outcomes:
        return Outcome.FAIL
    return Outcome.INCONCLUSIVE if Outcome.INCONCLUSIVE in outcomes else Outcome.PASS


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _against(d: Decision, ok: str, bad: str, need_unit: str) -> str:
    """The relation to the threshold the outcome says: ``ok`` (pass), ``bad`` (fail), or straddles."""
    if d.outcome is Outcome.PASS:
        return ok
    if d.outcome is Outcome.FAIL:
        return bad
    more = f"; about {d.pairs_needed} {need_unit} would decide it" if d.pairs_needed else ""
    return f"straddles{more}:"


def _level(row: Row, values: list[float], limit: float, *, higher_is_better: bool, alpha: float,
           what: str, unit: str) -> Judgement:
    """A run's trials against a fixed floor (``higher_is_better``) or ceiling, on a one-sided t bound."""
    size = format_size(row.bytes)
    ok_word, bad_word = (">=", "<") if higher_is_better else ("<=", ">")
    limit_word = "min" if higher_is_better else "max"
    if limit <= 0:  # a zero floor passes anything; a zero ceiling fails anything
        outcome = Outcome.PASS if higher_is_better else Outcome.FAIL
        word = ok_word if higher_is_better else bad_word
        return Judgement(outcome, f"{size}: {what} {word} {limit_word} {limit:g} {unit}")
    d = decide_uplift(values, [limit] * len(values), threshold=0.0, higher_is_better=higher_is_better,
                      alpha=alpha, quantity=what)
    gm = limit * (1 + d.estimate) if higher_is_better else limit / (1 + d.estimate)
    if higher_is_better:
        lo, hi = limit * (1 + d.lower), limit * (1 + d.upper)
    else:  # the decision's ratio is limit / value: turn its bounds round
        lo, hi = limit / (1 + d.upper), limit / (1 + d.lower)
    rel = _against(d, ok_word, bad_word, "trials")
    return Judgement(d.outcome, f"{size}: {what} {gm:.4g} {unit} ({d.level * 100:.4g} % CI {lo:.4g} .. {hi:.4g} "
                                f"{unit}, {len(values)} trials) {rel} {limit_word} {limit:g} {unit}")


def _point(row: Row, value: float, limit: float, *, higher_is_better: bool, what: str, unit: str) -> Judgement:
    ok = value >= limit if higher_is_better else value <= limit
    word = (">=" if ok else "<") if higher_is_better else ("<=" if ok else ">")
    limit_word = "min" if higher_is_better else "max"
    return Judgement(Outcome.PASS if ok else Outcome.FAIL,
                     f"{format_size(row.bytes)}: {what} {value:.4g} {unit} {word} {limit_word} {limit:g} {unit} "
                     f"({POINT_RULE})")


def per_size(alpha: float, sizes: int) -> float:
    """Each size's one-sided alpha in a check that judges ``sizes`` sizes at the check's ``alpha``.

    Why: a check fails when any of its sizes fails; judged at ``alpha`` each, a check of ``k`` sizes would raise
    a false failure up to ``k`` times as often as the rig asked for."""
    return alpha / max(1, sizes)


def _not_measured(size: int) -> Judgement:
    return Judgement(Outcome.FAIL, f"{format_size(size)}: not measured (add it to probe.sizes)")


def judge_busbw(result: AllReduceResult, thresholds: Thresholds, alpha: float) -> list[Judgement]:
    """Per named size: is the bus bandwidth at least the rig's floor? One family at ``alpha`` (:func:`per_size`)."""
    out = []
    alpha = per_size(alpha, len(thresholds.busbw_min_gbs))
    for size, floor in sorted(thresholds.busbw_min_gbs.items()):
        row = result.row(size)
        if row is None:
            out.append(_not_measured(size))
        elif row.trials_us:
            out.append(_level(row, row.busbw_trials(), floor, higher_is_better=True, alpha=alpha, what="busbw",
                              unit="GB/s"))
        else:
            out.append(_point(row, row.busbw_gbs, floor, higher_is_better=True, what="busbw", unit="GB/s"))
    return out


def judge_latency(result: AllReduceResult, thresholds: Thresholds, alpha: float) -> list[Judgement]:
    """Per named size: is the time per all-reduce at most the rig's ceiling? One family at ``alpha``."""
    out = []
    alpha = per_size(alpha, len(thresholds.latency_max_us))
    for size, ceiling in sorted(thresholds.latency_max_us.items()):
        row = result.row(size)
        if row is None:
            out.append(_not_measured(size))
        elif row.trials_us:
            out.append(_level(row, list(row.trials_us), ceiling, higher_is_better=False, alpha=alpha, what="time",
                              unit="us"))
        else:
            out.append(_point(row, row.time_us, ceiling, higher_is_better=False, what="time", unit="us"))
    return out


def _geomean(xs: Sequence[float]) -> float:
    import math

    return math.exp(math.fsum(math.log(x) for x in xs) / len(xs))


def judge_uplift(faster: AllReduceResult, slower: AllReduceResult, sizes: Sequence[int], minimum: float,
                 alpha: float) -> list[Judgement]:
    """Per size: does ``faster`` beat ``slower`` (uplift = slower time / faster time - 1) by ``minimum``? One
    family at ``alpha`` (:func:`per_size`)."""
    out = []
    alpha = per_size(alpha, len(sizes))
    for size in sizes:
        f, s = faster.row(size), slower.row(size)
        if f is None or s is None:
            out.append(Judgement(Outcome.FAIL, f"{format_size(size)}: not measured in both arms"))
            continue
        if f.trials_us and s.trials_us:
            d = decide_uplift_unpaired(f.trials_us, s.trials_us, threshold=minimum, higher_is_better=False,
                                       alpha=alpha)
            n = (f"{len(f.trials_us)} trials" if len(f.trials_us) == len(s.trials_us)
                 else f"{len(f.trials_us)} and {len(s.trials_us)} trials")
            rel = _against(d, ">=", "<", "trials per arm")
            out.append(Judgement(d.outcome, (
                f"{format_size(size)}: {faster.arm} {_geomean(f.trials_us):.1f} us vs {slower.arm} "
                f"{_geomean(s.trials_us):.1f} us -> uplift {_pct(d.estimate)} ({d.level * 100:.4g} % CI "
                f"{_pct(d.lower)} .. {_pct(d.upper)}, {n}) {rel} min {minimum * 100:g} %")))
            continue
        up = s.time_us / f.time_us - 1 if f.time_us > 0 else float("inf")
        ok = up >= minimum
        out.append(Judgement(Outcome.PASS if ok else Outcome.FAIL, (
            f"{format_size(size)}: {faster.arm} {f.time_us:.1f} us vs {slower.arm} {s.time_us:.1f} us -> uplift "
            f"{_pct(up)} {'>=' if ok else '<'} min {minimum * 100:g} % ({POINT_RULE})")))
    return out


def judge_copy(copy: P2PCopyResult, alpha: float) -> Judgement:
    """Is a direct peer copy faster than the same copy staged through host memory (the slower direction)?"""
    peer, staged = copy.unidir_trials("peer"), copy.unidir_trials("host_staged")
    what = f"{copy.bytes} B, slower direction"
    if len(peer) >= 2 and len(peer) == len(staged):
        d = decide_uplift(peer, staged, threshold=0.0, higher_is_better=True, alpha=alpha, quantity="peer gain")
        rel = _against(d, ">", "<=", "rounds")
        return Judgement(d.outcome, (
            f"peer copy {_geomean(peer):.1f} GB/s vs host-staged {_geomean(staged):.1f} GB/s ({what}) -> "
            f"{_pct(d.estimate)} ({d.level * 100:.4g} % CI {_pct(d.lower)} .. {_pct(d.upper)}, {len(peer)} rounds) "
            f"{rel} 0 %"))
    p, s = copy.unidir_gbs("peer"), copy.unidir_gbs("host_staged")
    ok = p > s
    return Judgement(Outcome.PASS if ok else Outcome.FAIL, (
        f"peer copy {p:.1f} GB/s vs host-staged {s:.1f} GB/s ({what}) -> {_pct(p / s - 1 if s > 0 else 0.0)} "
        f"{'>' if ok else '<='} 0 % ({POINT_RULE})"))
