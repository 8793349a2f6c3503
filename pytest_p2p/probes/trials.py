"""Repeated timed trials of one probe measurement: a warm-up set aside with its cause, then the kept trials.

Why: one timed batch per size judged a real NVLink pair as slower with P2P than without
(``8KiB: p2p_on 18.5 us vs p2p_off 15.7 us``) while every repeated campaign on the same pair
gave +30 %. The first batch of a process or a size pays for what is not the link: GPU
clocks ramping up from idle, NCCL's lazy connection set-up, a first graph upload. So a
size is measured as independent trials, and the trials before the measurement *settles*
(two consecutive trials within ``settle`` of each other, at least ``min_warmup`` of them,
at most ``max_warmup``) are set aside, never averaged in. Each set-aside trial keeps its
cause; a first trial far from the warm median is named *cold*, so a reader sees what was
excluded and why (``cold: first trial 18.5 us vs warm median 11.8 us``).

A trial whose launches could not all be queued before the device reached them (the host,
not the link, set the pace) is *host-bound*: it is set aside and repeated, at most
``max_retries`` times per size; after that it is kept and counted, so a slow host is
visible rather than hidden.

Pure Python and deterministic given the trial values: the GPU workers import it, and both
ranks of a pair make the same decisions because they feed it the same (rank-averaged)
values. The numbers it records are plain floats in the unit the caller names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

SETTLE = 0.03  # consecutive warm-up trials within 3 % of each other: settled
MIN_WARMUP = 2  # the first trial is always set aside, and one more to compare it with
MAX_WARMUP = 8  # a measurement that never settles is kept after this many, marked unsettled
MAX_RETRIES = 4  # host-bound trials repeated per size before they are kept as they are


@dataclass(frozen=True)
class Trial:
    """One timed trial: ``value`` (the ranks' mean, per operation) and whether it was clean."""

    value: float
    clean: bool = True  # False: the device caught up with the host while the trial was being queued


@dataclass(frozen=True)
class SetAside:
    """A trial left out of the kept ones, with why."""

    value: float
    cause: str

    def to_dict(self, key: str) -> dict[str, float | str]:
        return {key: self.value, "cause": self.cause}


@dataclass(frozen=True)
class TrialRecord:
    """What one size's measurement kept and set aside."""

    kept: tuple[float, ...]
    warmup: tuple[float, ...]  # the warm-up trials, in order (also in ``set_aside``)
    set_aside: tuple[SetAside, ...] = field(default=())
    settled: bool = True
    host_bound_kept: int = 0  # host-bound trials kept because the retries ran out

    @property
    def median(self) -> float:
        return median(self.kept)


def median(xs: Sequence[float]) -> float:
    """The median (the mean of the middle two for an even count); ``nan`` for none."""
    ys = sorted(xs)
    if not ys:
        return float("nan")
    k = len(ys) // 2
    return ys[k] if len(ys) % 2 else 0.5 * (ys[k - 1] + ys[k])


def agree(a: float, b: float, settle: float) -> bool:
    """``a`` and ``b`` within ``settle`` (a fraction) of the smaller one."""
    lo = min(a, b)
    return lo > 0 and abs(a - b) <= settle * lo


def run_trials(trial: Callable[[], Trial], trials: int, *, unit: str = "us", settle: float = SETTLE,
               min_warmup: int = MIN_WARMUP, max_warmup: int = MAX_WARMUP,
               max_retries: int = MAX_RETRIES) -> TrialRecord:
    """Warm up until settled (set aside), then keep ``trials`` trials; see the module doc."""
    if trials < 1 or min_warmup < 1 or max_warmup < min_warmup:
        raise ValueError(f"need trials >= 1 and 1 <= min_warmup <= max_warmup, got {trials}, {min_warmup}, "
                         f"{max_warmup}")
    warm: list[float] = []
    aside: list[SetAside] = []
    retries = 0
    settled = False
    while len(warm) < max_warmup:
        t = trial()
        warm.append(t.value)
        if len(warm) >= min_warmup and agree(warm[-2], warm[-1], settle):
            settled = True
            break
    kept: list[float] = []
    host_bound_kept = 0
    while len(kept) < trials:
        t = trial()
        if not t.clean:
            if retries < max_retries:
                retries += 1
                aside.append(SetAside(t.value, f"host-bound: the launches were not all queued before the device "
                                               f"reached them ({t.value:.4g} {unit}); repeated"))
                continue
            host_bound_kept += 1
        kept.append(t.value)
    warm_median = median(kept)
    first = warm[0]
    if agree(first, warm_median, settle):
        first_cause = (f"warm-up: first trial {first:.4g} {unit}, within {settle:.0%} of the warm median "
                       f"{warm_median:.4g} {unit}")
    else:
        first_cause = f"cold: first trial {first:.4g} {unit} vs warm median {warm_median:.4g} {unit}"
    causes = [SetAside(first, first_cause)]
    for i, value in enumerate(warm[1:], start=2):
        last = i == len(warm)
        why = ("warm-up: settle check (agreed with the trial before)" if last and settled
               else "warm-up: not yet settled")
        causes.append(SetAside(value, f"{why} ({value:.4g} {unit})"))
    return TrialRecord(tuple(kept), tuple(warm), tuple(causes + aside), settled, host_bound_kept)


def ops_for(per_op: float, budget: float, lo: int, hi: int) -> int:
    """How many operations fill a trial of ``budget`` (same unit as ``per_op``), within ``[lo, hi]``."""
    if per_op <= 0:
        return hi
    return max(lo, min(hi, int(budget / per_op) + 1))
