"""``python -m pytest_p2p baseline diff RUN_A RUN_B``: two stored runs side by side, as pytest-benchmark's ``compare``.

Why a table and a histogram: a rig owner comparing last night's run with tonight's wants every
metric of both runs in one row (A, B, the change, the verdict with its interval) and, for the
metric that decides, the rep values of both runs drawn next to each other, so that a shift is
told apart from one odd rep at a glance. Each row is judged with B against A as a one-run
baseline (``verdict.compare.judge``); the fingerprint changes that could explain a difference
follow the table. The plot is written only when asked (``--histogram FILE``; matplotlib lazily).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from .compare import Judgement
    from .store import Store
    from .store_base import MetricRow, RunRecord

HEADERS = ("Metric", "Point", "Arm", "A", "B", "Change", "Interval", "Verdict")
PLOTTED = ("output_throughput", "time_us")  # the metric that decides a campaign, model or probe


def diff_rows(store: Store, a: RunRecord, b: RunRecord) -> tuple[list[list[str]], int]:
    """The table's rows (metric, point, arm order of B) and 1 when any row is a regression, else 0."""
    from .compare import REGRESSION, Sample, direction, judge
    from .config import BaselineConfig

    cfg = BaselineConfig()
    base = {(m.arm, m.point, m.metric): m for m in store.metrics(a.run_id)}
    rows: list[list[str]] = []
    worst = 0
    for m in store.metrics(b.run_id):
        ref = base.pop((m.arm, m.point, m.metric), None)
        if ref is None:
            rows.append([m.metric, m.point, m.arm, "-", _num(m.mean), "-", "-", "only in B"])
            continue
        j = judge([Sample.of(ref.values, ref.mean, ref.std, ref.n)], Sample.of(m.values, m.mean, m.std, m.n),
                  direction(m.metric), cfg.tolerance(m.metric), cfg)
        worst = 1 if j.verdict == REGRESSION else worst
        rows.append([m.metric, m.point, m.arm, _num(ref.mean), _num(m.mean), _change(j), _interval(j),
                     j.verdict.upper()])
    for (arm, point, metric), ref in base.items():
        rows.append([metric, point, arm, _num(ref.mean), "-", "-", "-", "only in A"])
    return rows, worst


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def _change(j: Judgement) -> str:
    return "-" if j.change is None else f"{j.change * 100:+.1f} %"


def _interval(j: Judgement) -> str:
    if j.ci is None or j.ci_level is None:
        return "-"
    return f"{j.ci_level * 100:.0f} % CI {j.ci[0] * 100:+.1f} .. {j.ci[1] * 100:+.1f} %"


def table(rows: list[list[str]]) -> list[str]:
    """Aligned text: names left, numbers right (the verdict stage draws its own; the report stage is later)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADERS)]

    def line(cells: list[str] | tuple[str, ...]) -> str:
        return " | ".join(c.ljust(w) if i < 3 or i == 7 else c.rjust(w)
                          for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(HEADERS), "-+-".join("-" * w for w in widths), *(line(r) for r in rows)]


def histogram(store: Store, a: RunRecord, b: RunRecord, path: Path) -> Path | None:
    """PNG of the deciding metric's rep values, A and B side by side per scenario; None without values."""
    mine = {(m.arm, m.point): m for m in store.metrics(a.run_id) if m.metric in PLOTTED}
    pairs: list[tuple[str, MetricRow, MetricRow]] = [
        (f"{m.arm} {m.point}", mine[(m.arm, m.point)], m)
        for m in store.metrics(b.run_id) if m.metric in PLOTTED and (m.arm, m.point) in mine]
    pairs = [p for p in pairs if p[1].values or p[2].values]
    if not pairs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(pairs)), 4.5))
    for i, (_label, ra, rb) in enumerate(pairs):
        for offset, row, colour in ((-0.18, ra, "tab:blue"), (0.18, rb, "tab:orange")):
            vals = list(row.values) or ([row.mean] if row.mean is not None else [])
            ax.boxplot([vals], positions=[i + offset], widths=0.3, patch_artist=True,
                       boxprops={"facecolor": colour, "alpha": 0.5}, medianprops={"color": "black"})
            ax.scatter([i + offset] * len(vals), vals, s=10, color=colour, zorder=3)
    ax.set_xticks(range(len(pairs)))
    ax.set_xticklabels([p[0] for p in pairs], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(pairs[0][2].metric)
    ax.plot([], [], color="tab:blue", label=f"A {a.run_id}")
    ax.plot([], [], color="tab:orange", label=f"B {b.run_id}")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=1, frameon=False)
    sim = " (SIMULATED)" if a.simulated or b.simulated else ""
    ax.set_title(f"{pairs[0][2].metric} per rep: A vs B{sim}", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path


def diff(store: Store, a: RunRecord, b: RunRecord, out: TextIO, *, histogram_to: str | None = None) -> int:
    """Print the side-by-side table and the fingerprint changes; 1 when B regressed against A, else 0."""
    from .attribution import fingerprint_changes

    rows, worst = diff_rows(store, a, b)
    out.write(f"A: {a.run_id}  ({a.rig} {a.pair_key}, {a.started_at})\n")
    out.write(f"B: {b.run_id}  ({b.rig} {b.pair_key}, {b.started_at})\n")
    out.write("\n".join(table(rows)) + "\n")
    changes = fingerprint_changes(a.fingerprint, b.fingerprint)
    out.write("fingerprint changes:\n" if changes else "fingerprint: no changes\n")
    for ch in changes:
        out.write(f"  {ch.text}\n")
    if histogram_to:
        drawn = histogram(store, a, b, Path(histogram_to))
        out.write(f"histogram: {drawn}\n" if drawn else "histogram: no per-rep values of "
                  f"{' or '.join(PLOTTED)} in both runs\n")
    return worst
