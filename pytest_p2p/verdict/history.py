"""The stored history of one metric: change points, creeping trends and the baseline's own health.

Why: the nightly comparison judges tonight against the newest accepted runs, and that
window follows whatever it is fed.  A slow creep moves the window with it, and a regressed
run accepted into it becomes the yardstick (issue 29).  The longer history does not move:

* **Change points and trends** (:mod:`pytest_p2p.stats.changepoint`): every stored run of
  this rig, pair, kind, arm, point and metric (accepted or not, tonight's run last) is
  scanned for a step or a bend.  The regression check fails on an adverse one at
  :data:`HISTORY_ALPHA` unless a *person* accepted a run at or after it (accepting the new
  level by name is how a known change is acknowledged; the nightly recipe's own
  acceptances, noted :data:`AUTO_NOTE`, acknowledge nothing).  Each change names its night
  and what changed in the fingerprint between the runs around it.
* **Baseline health**: the accepted runs are checked against the rest of the history: a
  run far below the others (an accepted regression), and the accepted window as a block
  below the runs before it (a baseline that is itself a step down).  A comparison against
  an unhealthy baseline says so; an "improvement" against it is suspect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..stats import StatsError, t_cdf
from ..stats.changepoint import MAX_RUNS, STEP, Change, scan, segments
from .compare import Sample
from .fingerprint import READ_DEPTH, comparability, incomparable

if TYPE_CHECKING:
    from .store import Store

#: per look and per series: an unchanged 30-night history is flagged on any night in <= 1 % (docs/baselines.md)
HISTORY_ALPHA = 0.0005
#: display threshold of ``baseline history`` (a change reported there does not fail anything)
DISPLAY_ALPHA = 0.01
#: the baseline health checks' false-alarm rate per series
HEALTH_ALPHA = 0.001
#: acceptances written by the safe nightly recipe start with this note
AUTO_NOTE = "auto:"
#: fewest other runs a baseline run is judged against
HEALTH_MIN_OTHERS = 5


@dataclass(frozen=True)
class Night:
    """One run in a metric's history."""

    run_id: str
    started_at: str
    value: float  # the run's mean (linear)
    good: float  # its log mean, turned so that up is better
    accepted: bool  # under the baseline name looked at
    by_person: bool  # accepted without the nightly recipe's AUTO_NOTE
    fingerprint: Mapping[str, object]
    current: bool = False  # tonight's run, not stored yet

    @property
    def date(self) -> str:
        return self.started_at[:10] or "?"


@dataclass(frozen=True)
class ChangeAt:
    """A change found in a history, placed on its nights, with the fingerprint changes around it."""

    change: Change
    night: int  # 1-based position of the first run after it
    first: Night
    before: Night | None
    causes: tuple[str, ...]
    span: int  # runs from it to the newest (a trend's length)

    def text(self) -> str:
        c = self.change
        where = f"night {self.night} ({self.first.date}, run {self.first.run_id})"
        if c.kind == STEP:
            head = f"step {c.size * 100:+.1f} % at {where}"
        else:
            lo, hi = c.slope_ci or (math.nan, math.nan)
            head = (f"trend {(c.slope or 0.0) * 100:+.2f} %/night (95 % CI {lo * 100:+.2f}..{hi * 100:+.2f}) over "
                    f"{self.span} nights since {where}, {c.size * 100:+.1f} % in all")
        why = "; ".join(self.causes) if self.causes else "no fingerprint change between the runs around it"
        return f"{head}, {c.significant_text} (scan of {c.runs} runs); {why}"


@dataclass
class Health:
    """What is wrong with the accepted baseline, measured against its longer history."""

    problems: list[str] = field(default_factory=list)
    step: float | None = None  # the accepted window's mean against the runs before it (relative)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class SeriesReport:
    """One metric's history and what was found in it."""

    arm: str
    point: str
    metric: str
    higher: bool
    nights: list[Night]
    changes: list[ChangeAt] = field(default_factory=list)  # every significant change (display)
    check: ChangeAt | None = None  # the most adverse change of the whole history, at HISTORY_ALPHA
    acknowledged: bool = False  # a person accepted a run at or after it
    health: Health = field(default_factory=Health)

    @property
    def failing(self) -> bool:
        return self.check is not None and not self.acknowledged

    def failure_text(self) -> str:
        if self.check is None:
            return ""
        return (f"{self.metric} {self.point} {self.arm}: history of {len(self.nights)} runs: "
                + self.check.text() + " — not accepted by anyone since (after review: python -m pytest_p2p baseline "
                f"accept {self.nights[-1].run_id} acknowledges the new level)")


def _good(sample: Sample, higher: bool) -> float | None:
    st = sample.run_stats()
    if st is None:
        return None
    return st.log_mean if higher else -st.log_mean


def load_nights(store: Store, fp: Mapping[str, object], arm: str, point: str, metric: str, higher: bool,
                name: str, current: Sample | None = None, limit: int = MAX_RUNS) -> list[Night]:
    """The stored history of this metric (oldest first), with ``current`` (tonight's run, ``fp``) last.

    Only runs comparable with ``fp`` (:func:`.fingerprint.comparability`: model, server args, request shape,
    arm definition, GPU models, simulated) are a night of its series. Why: the baseline comparison already
    leaves the others out, and a series that mixes them steps at every switch — a runner handed H100s and
    H200s on alternate nights in the same slots would show an adverse change point on every H100 night.
    A change that keeps runs comparable (a driver, a cable, NCCL) stays in the series: that is what it is for.
    """
    rig, kind = str(fp.get("rig")), fp.get("kind")
    pair = fp.get("pair")
    ident = str(pair.get("ident")) if isinstance(pair, Mapping) else ""
    run_id = str(fp.get("run_id"))
    want = comparability(fp, arm)
    # read deeper than the series keeps, so that runs left out do not shorten it
    rows = [(rec, row) for rec, row in store.history(rig, ident, kind if isinstance(kind, str) else None, arm, point,
                                                     metric, READ_DEPTH * limit + 1)
            if rec.run_id != run_id and not incomparable(want, comparability(rec.fingerprint, arm))]
    rows = rows[-(limit - (1 if current is not None else 0)):] if limit > 1 else rows
    notes = store.acceptances(name, [rec.run_id for rec, _ in rows])
    nights = []
    for rec, row in rows:
        g = _good(Sample.of(row.values, row.mean, row.std, row.n), higher)
        if g is None:
            continue
        acc = rec.run_id in notes
        person = acc and not (notes[rec.run_id] or "").startswith(AUTO_NOTE)
        nights.append(Night(rec.run_id, rec.started_at or rec.saved_at, math.exp(g if higher else -g), g, acc,
                            person, rec.fingerprint))
    if current is not None:
        g = _good(current, higher)
        if g is not None:
            nights.append(Night(run_id, str(fp.get("started_at") or ""), math.exp(g if higher else -g), g, False,
                                False, fp, current=True))
    return nights


def ratio_nights(on: Sequence[Night], off: Sequence[Night]) -> list[Night]:
    """The uplift's history: the runs both arms' series hold, paired by run id, in ``on``'s order, each night's
    value the ratio of the two (its log the difference of their ``good``: up is a larger uplift).

    Why a series of its own: a runner that hands out a fresh machine every night moves both arms together.
    The committed 7B rig's c64 throughput spread 2.2-2.5 % from night to night on 2x H200, its on/off ratio 0.7 %.
    At that absolute spread the scan finds a -0.3 %/night creep by night 12 in 13-19 % of histories, at the
    ratio's in 99.9 % (median night 6-7; benchmarks/history_sim.py --noise 0.022,0.014 --noise 0.006,0.008). An
    interconnect that slowly degrades moves the ratio, not the machine.
    """
    by_id = {n.run_id: n for n in off}
    out = []
    for n in on:
        m = by_id.get(n.run_id)
        if m is None:
            continue
        g = n.good - m.good
        out.append(Night(n.run_id, n.started_at, math.exp(g), g, n.accepted, n.by_person, n.fingerprint, n.current))
    return out


def place(nights: Sequence[Night], c: Change) -> ChangeAt:
    """A change on its nights, with the fingerprint changes between the run before it and its first run."""
    from .attribution import fingerprint_changes

    first = nights[c.at]
    before = nights[c.at - 1] if c.at > 0 else None
    causes = tuple(ch.text for ch in fingerprint_changes(before.fingerprint, first.fingerprint)) if before else ()
    return ChangeAt(c, c.at + 1, first, before, causes, len(nights) - c.at)


def judge_series(arm: str, point: str, metric: str, higher: bool, nights: list[Night], depth: int = 20,
                 alpha: float = HISTORY_ALPHA, display_alpha: float = DISPLAY_ALPHA) -> SeriesReport:
    """Change points, the check's adverse scan and the baseline's health of one metric's history."""
    rep = SeriesReport(arm, point, metric, higher, nights)
    ys = [n.good for n in nights]
    try:
        rep.changes = [place(nights, c) for c in segments(ys, display_alpha)]
        worst = scan(ys, adverse=True)
    except StatsError:
        worst = None
    if worst is not None and worst.p_value < alpha:
        rep.check = place(nights, worst)
        rep.acknowledged = any(n.by_person for n in nights[worst.at:])
    rep.health = health(nights, depth)
    return rep


def health(nights: Sequence[Night], depth: int = 20, alpha: float = HEALTH_ALPHA) -> Health:
    """The accepted window (the newest ``depth`` accepted runs, as the comparison uses) against the rest of
    the history (module doc); tonight's run is not evidence here."""
    h = Health()
    stored = [n for n in nights if not n.current]
    acc = [i for i, n in enumerate(stored) if n.accepted][-depth:]
    if not acc:
        return h
    # 1. an accepted run far below the others (Bonferroni over the accepted runs)
    for i in acc:
        others = [n.good for j, n in enumerate(stored) if j != i]
        m = len(others)
        if m < HEALTH_MIN_OTHERS:
            continue
        mean = math.fsum(others) / m
        s = math.sqrt(math.fsum((x - mean) ** 2 for x in others) / (m - 1))
        if s <= 0:
            continue
        t = (stored[i].good - mean) / (s * math.sqrt(1 + 1 / m))
        if t_cdf(t, m - 1) * len(acc) < alpha:
            h.problems.append(f"accepted run {stored[i].run_id} ({stored[i].date}) is "
                              f"{math.expm1(stored[i].good - mean) * 100:+.1f} % off the other {m} runs of its "
                              f"history (t {t:.1f})")
    # 2. the accepted window as a block below the runs before it (Welch)
    first = acc[0]
    before = [n.good for n in stored[:first]]
    window = [stored[i].good for i in acc]
    if len(before) >= 3 and len(window) >= 2:
        mb, mw = math.fsum(before) / len(before), math.fsum(window) / len(window)
        vb = math.fsum((x - mb) ** 2 for x in before) / (len(before) - 1) / len(before)
        vw = math.fsum((x - mw) ** 2 for x in window) / (len(window) - 1) / len(window)
        se = math.sqrt(vb + vw)
        if se > 0:
            df = (vb + vw) ** 2 / ((vb * vb) / (len(before) - 1) + (vw * vw) / (len(window) - 1)) if vb or vw else 1.0
            t = (mw - mb) / se
            h.step = math.expm1(mw - mb)
            if t_cdf(t, max(1.0, df)) < alpha:
                h.problems.append(f"the accepted baseline ({len(window)} runs) is itself a step of "
                                  f"{h.step * 100:+.1f} % below the {len(before)} earlier runs of its history "
                                  f"(t {t:.1f})")
    return h


__all__ = ["AUTO_NOTE", "DISPLAY_ALPHA", "HEALTH_ALPHA", "HISTORY_ALPHA", "ChangeAt", "Health", "Night",
           "SeriesReport", "health", "judge_series", "load_nights", "place", "ratio_nights"]
