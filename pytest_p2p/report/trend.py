"""A metric-trend plot from the baseline history, for Allure attachments and nightly reviews.

Allure's own trend widget counts passed/failed tests; what a rig owner wants to see next
to a failed uplift check is the metric itself over the last nightly runs (throughput per
arm at this point, this rig and pair). The history is the verdict stage's store (SQLite or
PostgreSQL), opened read-only; no store, no runs or no matplotlib simply means no trend.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from pytest_p2p.errors import P2PError

MAX_RUNS = 30


@dataclass(frozen=True)
class TrendPoint:
    run_id: str
    started_at: str
    arm: str
    mean: float
    simulated: bool


def history(db: str | Path, rig: str, pair_key: str, point: str, metric: str) -> list[TrendPoint]:
    """The last ``MAX_RUNS`` stored runs of this rig and pair: ``metric`` at ``point`` per arm, oldest first."""
    from pytest_p2p.verdict.store import Store, exists

    out: list[TrendPoint] = []
    try:  # exists() asks a fleet database: an unreachable one is "no trend" too, never an error in a report
        if not exists(db):
            return []
        with Store(db, create=False) as store:
            runs = [r for r in store.runs(rig=rig) if r.pair_key == pair_key][-MAX_RUNS:]
            for r in runs:
                for row in store.metrics(r.run_id, point=point):
                    if row.metric == metric and row.mean is not None:
                        out.append(TrendPoint(r.run_id, r.started_at or r.saved_at, row.arm, float(row.mean),
                                              r.simulated))
    except (P2PError, OSError):
        return []
    return out


def trend_png(points: list[TrendPoint], title: str) -> bytes | None:
    """PNG bytes of the metric per arm over runs; None if fewer than two runs or no matplotlib."""
    if len({p.run_id for p in points}) < 2:
        return None
    try:
        from pytest_p2p.report.plots import _pyplot

        _pyplot()
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    runs = sorted({(p.started_at, p.run_id) for p in points})
    index = {run_id: i for i, (_, run_id) in enumerate(runs)}
    fig, ax = plt.subplots(figsize=(8, 4))
    for arm in dict.fromkeys(p.arm for p in points):
        mine = sorted((index[p.run_id], p.mean) for p in points if p.arm == arm)
        ax.plot([x for x, _ in mine], [y for _, y in mine], marker="o", label=arm)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([s[:10] for s, _ in runs], rotation=45, ha="right", fontsize=7)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    sim = any(p.simulated for p in points)
    ax.set_title(("SIMULATED — " if sim else "") + title, fontsize=9)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
