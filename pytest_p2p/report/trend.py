"""A metric-trend plot from the baseline history, for Allure attachments and nightly reviews.

Allure's own trend widget counts passed/failed tests; what a rig owner wants to see next
to a failed uplift check is the metric itself over the last nightly runs (throughput per
arm at this point, this rig and pair). The history is the verdict stage's store (SQLite or
PostgreSQL), opened read-only; no store, no runs or no matplotlib simply means no trend.

Change points and trends found in each arm's series (``stats.changepoint.segments`` at
``verdict.history.DISPLAY_ALPHA``, as ``baseline history`` lists them) are marked on the plot:
a dashed line where a step starts, a dotted one where a trend starts, labelled with its size.
:func:`write_history_plots` puts the plot of the primary metric at every point in the run's
``plots/`` directory when the campaign finishes (plugin/report.py).
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


def marks(points: list[TrendPoint], metric: str) -> list[tuple[str, str, str]]:
    """``(arm, run_id of the first run after it, label)`` of every significant change of each arm's series."""
    import math

    from pytest_p2p.metrics import direction
    from pytest_p2p.stats import StatsError
    from pytest_p2p.stats.changepoint import STEP, segments
    from pytest_p2p.verdict.history import DISPLAY_ALPHA

    sign = -1.0 if direction(metric) == "lower" else 1.0
    out = []
    for arm in dict.fromkeys(p.arm for p in points):
        mine = sorted((p for p in points if p.arm == arm and p.mean > 0), key=lambda p: (p.started_at, p.run_id))
        try:
            found = segments([sign * math.log(p.mean) for p in mine], DISPLAY_ALPHA)
        except StatsError:
            continue
        for c in found:
            what = f"step {c.size * 100:+.1f} %" if c.kind == STEP else f"trend {(c.slope or 0) * 100:+.2f} %/run"
            out.append((arm, mine[c.at].run_id, f"{arm}: {what} ({c.significant_text})"))
    return out


def trend_png(points: list[TrendPoint], title: str, metric: str | None = None) -> bytes | None:
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
    for k, (_arm, run_id, label) in enumerate(marks(points, metric) if metric else []):
        style = "--" if "step" in label else ":"
        ax.axvline(index[run_id] - 0.5, color="red", linestyle=style, alpha=0.7)
        ax.annotate(label, (index[run_id] - 0.5, 0), xycoords=("data", "axes fraction"), xytext=(3, 4 + 11 * k),
                    textcoords="offset points", fontsize=7, color="red")
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


def write_history_plots(run_dir: Path, target: str | Path) -> list[Path]:
    """``plots/history_<metric>_<point>.png`` of the run's primary metric at each point, change points marked.

    The stored history (this run included once it is saved: a run judged before the session's save
    shows the history it was judged against).  Nothing is written without a store, two runs or matplotlib.
    """
    from pytest_p2p.results.read import run_head, scenario_dirs

    head = run_head(run_dir)
    rig, pair = head.get("rig", ""), head.get("pair", {}).get("key", "")
    metric = "time_us" if head.get("kind") == "probe" else "output_throughput"
    points = sorted({point for _, point, _ in scenario_dirs(run_dir)})
    written = []
    for point in points:
        png = trend_png(history(target, rig, pair, point, metric),
                        f"{metric} at {point}, {rig} {pair}: stored runs, change points marked", metric)
        if png is not None:
            path = run_dir / "plots" / f"history_{metric}_{point}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
            written.append(path)
    return written
