"""PNG plots of a run directory, drawn from its ``summary.json`` dict and telemetry CSVs.

matplotlib is optional (``pytest-p2p[plots]``): it is imported here, lazily, with the
non-interactive ``Agg`` backend so that a headless CI box never needs a display. If it
is absent the report still writes every summary file and says plots were skipped.
Every plot of simulated data carries SIMULATED in its title and in its corner.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from pytest_p2p.report import terminal
from pytest_p2p.report.results import PLOTS, ResultsDir
from pytest_p2p.util import atomic_write_bytes, parse_size

_TELEMETRY_PANELS = (
    ("utilization.gpu", "GPU utilization (%)"),
    ("temperature.gpu", "Temperature (°C)"),
    ("power.draw", "Power (W)"),
)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _x(point: str) -> float:
    return float(int(point[1:])) if point.startswith("c") else float(parse_size(point[1:]))


def _title(fig: Any, ax_or_fig: Any, text: str, summary: dict[str, Any]) -> None:
    sim = summary.get("simulated")
    head = f"SIMULATED — {text}" if sim else text
    sub = f"{summary.get('rig', '?')} {(summary.get('pair') or {}).get('key', '?')} · {summary.get('run_id', '')}"
    fig.suptitle(f"{head}\n{sub}", fontsize=10)
    if sim:
        fig.text(0.99, 0.01, "SIMULATED", ha="right", va="bottom", fontsize=12, color="red", alpha=0.8,
                 fontweight="bold")


def _save(fig: Any, path: Path) -> Path:
    plt = _pyplot()
    buf = io.BytesIO()
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def _series(summary: dict[str, Any], where: str, key: str) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """arm -> (x, mean, std) for one metric, points in order; scenarios without it are left out."""
    out: dict[str, tuple[list[float], list[float], list[float]]] = {}
    for sc in sorted(summary.get("scenarios") or [], key=lambda s: terminal.point_sort_key(s["point"])):
        st = (sc.get(where) or {}).get(key)
        if not isinstance(st, dict) or st.get("mean") is None:
            continue
        xs, ms, ss = out.setdefault(sc["arm"], ([], [], []))
        xs.append(_x(sc["point"]))
        ms.append(float(st["mean"]))
        std = st.get("std")
        ss.append(float(std) if std is not None and math.isfinite(float(std)) else 0.0)
    return out


def _arm_plot(ax: Any, series: dict[str, tuple[list[float], list[float], list[float]]], ylabel: str,
              xlabel: str, log_x: bool) -> None:
    for arm, (xs, ms, ss) in series.items():
        ax.errorbar(xs, ms, yerr=ss, marker="o", capsize=4, label=arm)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)
    if log_x:
        ax.set_xscale("log", base=2)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(title="arm (error bars: ±1 std over reps)", fontsize=8, title_fontsize=8)


def _ticks(ax: Any, summary: dict[str, Any]) -> None:
    points = sorted({sc["point"] for sc in summary.get("scenarios") or []}, key=terminal.point_sort_key)
    ax.set_xticks([_x(p) for p in points])
    ax.set_xticklabels([terminal.point_label(p) for p in points])
    ax.minorticks_off()


def _uplift_plot(summary: dict[str, Any], path: Path, what: str) -> Path | None:
    entries = [u for u in summary.get("uplift") or [] if u.get("estimate") is not None]
    if not entries:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for u in entries:
        groups.setdefault((u["faster_arm"], u["slower_arm"]), []).append(u)
    points = sorted({u["point"] for u in entries}, key=terminal.point_sort_key)
    width = 0.8 / len(groups)
    for gi, ((faster, slower), items) in enumerate(groups.items()):
        by_point = {u["point"]: u for u in items}
        xs, ys, lo, hi = [], [], [], []
        for pi, p in enumerate(points):
            if p not in by_point:
                continue
            u = by_point[p]
            est = float(u["estimate"]) * 100
            ci = u.get("ci95")
            xs.append(pi + (gi - (len(groups) - 1) / 2) * width)
            ys.append(est)
            if ci and None not in ci:
                lo.append(max(est - float(ci[0]) * 100, 0.0))
                hi.append(max(float(ci[1]) * 100 - est, 0.0))
            else:
                lo.append(0.0)
                hi.append(0.0)
        ax.bar(xs, ys, width=width, yerr=[lo, hi], capsize=4, label=f"{faster} vs {slower}")
        # labels beside the bar's end, offset sideways so the CI whisker never covers them; short bars stay readable
        for x, y in zip(xs, ys, strict=True):
            ax.annotate(f"{y:+.1f} %", (x + width * 0.08, y), xytext=(4, 3 if y >= 0 else -3),
                        textcoords="offset points", ha="left", va="bottom" if y >= 0 else "top", fontsize=9,
                        fontweight="bold")
        thresholds = [by_point[p].get("threshold") for p in points if p in by_point]
        if thresholds and thresholds[0] is not None and len(set(thresholds)) == 1:
            ax.axhline(float(thresholds[0]) * 100, color="grey", linestyle="--", linewidth=1,
                       label=f"min_uplift {float(thresholds[0]) * 100:+.1f} %")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels([terminal.point_label(p) for p in points])
    ax.set_xlabel("concurrency (requests in flight)" if summary.get("kind") != "probe" else "message size")
    ax.set_ylabel(f"{what} (%)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(title="error bars: paired 95 % CI", fontsize=8, title_fontsize=8)
    _title(fig, ax, f"{what} per point", summary)
    return _save(fig, path)


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        v = float(str(text).strip().split()[0])
    except (ValueError, IndexError):
        return None
    return v if math.isfinite(v) else None


def _telemetry_plot(summary: dict[str, Any], csv_path: Path, label: str, path: Path) -> Path | None:
    rows_by_gpu: dict[str, list[dict[str, str]]] = {}
    with csv_path.open(newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or "wall_epoch" not in reader.fieldnames:
            return None
        for row in reader:
            rows_by_gpu.setdefault(row.get("index") or "?", []).append(row)
    times = [t for rows in rows_by_gpu.values() for r in rows if (t := _float(r.get("wall_epoch"))) is not None]
    if not times:
        return None
    t0 = min(times)
    plt = _pyplot()
    fig, axes = plt.subplots(len(_TELEMETRY_PANELS), 1, figsize=(8, 7), sharex=True)
    for ax, (col, ylabel) in zip(axes, _TELEMETRY_PANELS, strict=True):
        for gpu, rows in sorted(rows_by_gpu.items()):
            pts = [(t - t0, v) for r in rows
                   if (t := _float(r.get("wall_epoch"))) is not None and (v := _float(r.get(col))) is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"GPU{gpu}", linewidth=1.2)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    axes[-1].set_xlabel("time since first sample (s)")
    _title(fig, axes[0], f"telemetry timeline {label}", summary)
    return _save(fig, path)


def render_plots(summary: dict[str, Any], rd: ResultsDir) -> tuple[list[Path], list[str]]:
    """Write ``plots/*.png``; returns the paths and notes on what was skipped and why."""
    try:
        plt = _pyplot()
    except ImportError:
        return [], ["plots skipped: matplotlib is not installed (pip install 'pytest-p2p[plots]')"]
    out_dir = rd.path / PLOTS
    written: list[Path] = []
    notes: list[str] = []
    if not summary.get("scenarios"):
        return [], ["plots skipped: no scenario has any completed rep"]
    probe = summary.get("kind") == "probe"
    xlabel = "message size (bytes, log scale)" if probe else "concurrency (requests in flight)"

    if probe:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        _arm_plot(axes[0], _series(summary, "metrics", "time_us"), "time per op (µs)", xlabel, True)
        axes[0].set_yscale("log")
        _arm_plot(axes[1], _series(summary, "metrics", "busbw_gbs"), "bus bandwidth (GB/s)", xlabel, True)
        for ax in axes:
            _ticks(ax, summary)
            ax.tick_params(axis="x", labelrotation=45)
        _title(fig, axes[0], "probe time and bus bandwidth vs message size", summary)
        written.append(_save(fig, out_dir / "probe_time_busbw.png"))
        up = _uplift_plot(summary, out_dir / "uplift.png", "latency uplift (slower time / faster time − 1)")
    else:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        _arm_plot(axes[0], _series(summary, "metrics", "output_throughput"), "output throughput (tok/s)", xlabel,
                  True)
        _arm_plot(axes[1], _series(summary, "metrics", "total_token_throughput"), "total throughput (tok/s)",
                  xlabel, True)
        for ax in axes:
            _ticks(ax, summary)
        _title(fig, axes[0], "throughput vs concurrency", summary)
        written.append(_save(fig, out_dir / "throughput.png"))
        up = _uplift_plot(summary, out_dir / "uplift.png", "output-throughput uplift")

        fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
        _arm_plot(axes[0], _series(summary, "metrics", "mean_tpot_ms"), "mean TPOT (ms)", xlabel, True)
        _arm_plot(axes[1], _series(summary, "metrics", "mean_itl_ms"), "mean ITL (ms)", xlabel, True)
        for ax in axes:
            _ticks(ax, summary)
        _title(fig, axes[0], "per-token latency: TPOT and ITL", summary)
        written.append(_save(fig, out_dir / "latency_tpot_itl.png"))

        tpj = _series(summary, "energy", "tokens_per_joule")
        if tpj:
            fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
            _arm_plot(axes[0], tpj, "tokens per joule (tok/J)", xlabel, True)
            _arm_plot(axes[1], _series(summary, "energy", "avg_watts"), "average power of the pair (W)", xlabel,
                      True)
            for ax in axes:
                _ticks(ax, summary)
            _title(fig, axes[0], "energy efficiency", summary)
            written.append(_save(fig, out_dir / "tokens_per_joule.png"))
        else:
            notes.append("tokens_per_joule.png skipped: no rep carries energy.tokens_per_joule")
    if up is not None:
        written.append(up)
    else:
        notes.append("uplift.png skipped: no point has a paired rep of two arms")

    # One telemetry timeline per arm: its highest point, its first rep with a CSV.
    by_arm: dict[str, list[str]] = {}
    for sc in summary["scenarios"]:
        by_arm.setdefault(sc["arm"], []).append(sc["point"])
    for arm, points in by_arm.items():
        for point in sorted(points, key=terminal.point_sort_key, reverse=True):
            files = rd.telemetry_files(arm, point)
            if not files:
                continue
            rep, csv_path = next(iter(files.items()))
            label = f"{arm}-{point} run {rep}"
            p = _telemetry_plot(summary, csv_path, label, out_dir / f"telemetry_{arm}-{point}.png")
            if p is not None:
                written.append(p)
            else:
                notes.append(f"telemetry plot for {label} skipped: {csv_path.name} has no wall_epoch samples")
            break
        else:
            notes.append(f"no telemetry timeline for arm {arm}: no telemetry_run<k>.csv on disk")
    return written, notes
