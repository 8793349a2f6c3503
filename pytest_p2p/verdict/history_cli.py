"""``python -m pytest_p2p baseline history``: every series of the store with its change points and health, and
each point's uplift (the on/off ratio) as a series of its own.

Why a separate view: the nightly check names the change that fails it; a rig owner
reviewing a quarter wants every series at once -- the run means night by night, each
significant step or trend (at :data:`~.history.DISPLAY_ALPHA`, with what changed in the
fingerprint around it), and whether the accepted baseline is itself off its history.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .. import metrics as registry
from ..jsontypes import as_dict
from .compare import direction
from .history import HISTORY_ALPHA, Night, SeriesReport, judge_series, load_nights, ratio_nights

if TYPE_CHECKING:
    from .store import Store
    from .store_base import RunRecord


def series_keys(store: Store, rig: str | None, metric: str | None) -> Iterator[tuple[RunRecord, str, str, str]]:
    """``(newest run, arm, point, metric)`` of every (rig, pair, kind) series; primaries unless ``metric``."""
    newest: dict[tuple[str, str, str | None], RunRecord] = {}
    for rec in store.runs(rig=rig):
        newest[(rec.rig, rec.pair_ident, rec.kind)] = rec  # oldest first: the last one wins
    for _key, rec in sorted(newest.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "")):
        for row in store.metrics(rec.run_id):
            wanted = (row.metric == metric) if metric else row.metric in registry.default_primaries(
                rec.kind or "model", row.point)
            if wanted and direction(row.metric) in ("higher", "lower"):
                yield rec, row.arm, row.point, row.metric


#: the arms whose ratio is the uplift where a run does not say (the judge reads run.json's ``uplift`` arms)
UPLIFT_ARMS = ("p2p_on", "p2p_off")


def reports(store: Store, rig: str | None, metric: str | None, name: str) -> list[tuple[RunRecord, SeriesReport]]:
    """Each arm's series, and after a point's arms the uplift's (``history.ratio_nights``) where both are stored."""
    out = []
    arms: dict[tuple[str, str, str], dict[str, list[Night]]] = {}
    for rec, arm, point, m in series_keys(store, rig, metric):
        higher = direction(m) == "higher"
        fp = dict(rec.fingerprint)
        # the newest run's own pair (its GPUs too): the series is the runs comparable with it
        fp.update(rig=rec.rig, kind=rec.kind, run_id="", pair={**as_dict(fp.get("pair")), "ident": rec.pair_ident})
        nights = load_nights(store, fp, arm, point, m, higher, name)
        out.append((rec, judge_series(arm, point, m, higher, nights)))
        got = arms.setdefault((rec.run_id, point, m), {})
        got[arm] = nights
        a, b = UPLIFT_ARMS
        if a in got and b in got:
            out.append((rec, judge_series(f"{a}/{b}", point, f"uplift({m})", True, ratio_nights(got[a], got[b]))))
    return out


def print_history(store: Store, *, rig: str | None, metric: str | None, name: str) -> int:
    """Print each series; 1 when any has an adverse change nobody accepted since (as the check would fail)."""
    out = sys.stdout
    worst = 0
    got = reports(store, rig, metric, name)
    if not got:
        out.write(f"no stored runs{f' of rig {rig!r}' if rig else ''} in {store.where}\n")
        return 0
    for rec, rep in got:
        unit = "x (on/off)" if rep.metric.startswith("uplift(") else registry.unit(rep.metric)
        out.write(f"\n{rec.rig} {rec.pair_key} ({rec.pair_ident}) {rec.kind}: {rep.metric} {rep.point} {rep.arm} "
                  f"({len(rep.nights)} runs, baseline {name!r})\n")
        marks = {c.night: c for c in rep.changes}
        for i, n in enumerate(rep.nights, 1):
            tag = " accepted" + ("" if n.by_person else " (auto)") if n.accepted else ""
            mark = f"   <- {marks[i].text()}" if i in marks else ""
            out.write(f"  {i:>3}  {n.date}  {n.run_id}  {n.value:.4g} {unit}{tag}{mark}\n")
        if not rep.changes:
            out.write("  no significant change point or trend\n")
        if rep.check is not None:
            state = "acknowledged (a person accepted a run since)" if rep.acknowledged else "FAILS the check"
            out.write(f"  check (alpha {HISTORY_ALPHA:g} per night): {rep.check.text()} — {state}\n")
            worst = max(worst, int(rep.failing))
        for problem in rep.health.problems:
            out.write(f"  baseline health: {problem}\n")
    return worst
