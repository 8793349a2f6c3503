"""PNG plots of a run directory, drawn from its ``summary.json`` dict and telemetry CSVs.

matplotlib is a dependency but imported here, lazily, with the non-interactive ``Agg``
backend, so that ``pytest --help`` never pays for it and a headless CI box never needs a
display. If it cannot be imported the report still writes every summary file and says
plots were skipped. Hardware plots (telemetry, PCIe link, P2P matrix) are in plots_hw.
Every plot of simulated data carries SIMULATED in its title and in its corner.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_p2p.jsontypes import as_dict
from pytest_p2p.report import terminal
from pytest_p2p.report.plots_hw import TelemetryLookup
from pytest_p2p.report.summary_types import Summary, UpliftEntry, stat_at
from pytest_p2p.util import atomic_write_bytes, parse_size

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _pyplot() -> None:
    """Select the non-interactive ``Agg`` backend before pyplot is used; ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg", force=True)


def _x(point: str) -> float:
    return float(int(point[1:])) if point.startswith("c") else float(parse_size(point[1:]))


def _title(fig: Figure, ax_or_fig: Axes | None, text: str, summary: Summary) -> None:
    sim = summary.get("simulated")
    head = f"SIMULATED — {text}" if sim else text
    sub = f"{summary.get('rig', '?')} {as_dict(summary.get('pair')).get('key', '?')} · {summary.get('run_id', '')}"
    fig.suptitle(f"{head}\n{sub}", fontsize=10)
    if sim:
        fig.text(0.99, 0.01, "SIMULATED", ha="right", va="bottom", fontsize=12, color="red", alpha=0.8,
                 fontweight="bold")


def _save(fig: Figure, path: Path) -> Path:
    _pyplot()
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buf.getvalue())


def _series(summary: Summary, where: str, key: str) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """arm -> (x, mean, std) for one metric, points in order; scenarios without it are left out."""
    out: dict[str, tuple[list[float], list[float], list[float]]] = {}
    arm_order = {a: i for i, a in enumerate(summary.get("arms") or {})}
    for sc in sorted(summary.get("scenarios") or [], key=lambda s: (arm_order.get(s["arm"], len(arm_order)),
                                                                    terminal.point_sort_key(s["point"]))):
        st = stat_at(sc, where, key)
        mean = st.get("mean") if st is not None else None
        if st is None or mean is None:
            continue
        xs, ms, ss = out.setdefault(sc["arm"], ([], [], []))
        xs.append(_x(sc["point"]))
        ms.append(float(mean))
        std = st.get("std")
        ss.append(float(std) if std is not None and math.isfinite(float(std)) else 0.0)
    return out


def _arm_plot(ax: Axes, series: dict[str, tuple[list[float], list[float], list[float]]], ylabel: str,
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


def _ticks(ax: Axes, summary: Summary) -> None:
    points = sorted({sc["point"] for sc in summary.get("scenarios") or []}, key=terminal.point_sort_key)
    ax.set_xticks([_x(p) for p in points])
    ax.set_xticklabels([terminal.point_label(p) for p in points])
    ax.minorticks_off()


def _uplift_plot(summary: Summary, path: Path, what: str) -> Path | None:
    entries = [u for u in summary.get("uplift") or [] if u.get("estimate") is not None]
    if not entries:
        return None
    _pyplot()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[tuple[str, str], list[UpliftEntry]] = {}
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
            estimate = u.get("estimate")
            if estimate is None:  # pragma: no cover - entries hold only points with an estimate
                continue
            est = float(estimate) * 100
            ci = u.get("interval")
            xs.append(pi + (gi - (len(groups) - 1) / 2) * width)
            ys.append(est)
            if ci and len(ci) == 2:
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
    paired = any(u.get("interval") for u in entries)
    whose = "the decision's " if any(u.get("threshold") is not None for u in entries) else ""
    ax.legend(title=f"error bars: {whose}{terminal.level_text(entries)}" if paired
              else str(summary.get("uplift_convention") or "no interval"), fontsize=8, title_fontsize=8,
              loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)  # below the axes: never on a bar
    _title(fig, ax, f"{what} per point", summary)
    return _save(fig, path)


def render_plots(summary: Summary, out_dir: Path, telemetry: TelemetryLookup, *,
                 copy_result: Mapping[str, object] | None = None,
                 matrix_text: str | None = None) -> tuple[list[Path], list[str]]:
    """Write ``out_dir/*.png``; returns the paths and notes on what was skipped and why.

    ``telemetry(arm, point)`` gives that scenario's CSVs by rep; ``copy_result`` is a
    ``p2pcopy.json`` dict and ``matrix_text`` a cuda-samples p2pBandwidthLatencyTest output,
    either of which feeds the P2P matrix plot.
    """
    try:
        _pyplot()
        import matplotlib.pyplot as plt
    except ImportError:
        return [], ["plots skipped: matplotlib is not importable (it is a dependency of pytest-p2p: reinstall it)"]
    written: list[Path] = []
    notes: list[str] = []
    if not summary.get("scenarios"):
        return [], ["plots skipped: no scenario has any completed rep"]
    probe = summary.get("kind") == "probe"
    xlabel = "message size (bytes, log scale)" if probe else "concurrency (requests in flight)"

    def pair_of_panels(specs: list[tuple[str, str, str]], head: str, name: str, zero: bool = False) -> None:
        fig, axes = plt.subplots(1, len(specs), figsize=(5.5 * len(specs), 4.5), squeeze=False)
        for ax, (where, key, ylabel) in zip(axes[0], specs, strict=True):
            _arm_plot(ax, _series(summary, where, key), ylabel, xlabel, True)
            _ticks(ax, summary)
            if zero:
                ax.set_ylim(bottom=0)
            if probe:
                ax.tick_params(axis="x", labelrotation=45)
                if key == "time_us":
                    ax.set_yscale("log")  # 8 KiB and 64 MiB differ by 100x: linear hides the small sizes
        _title(fig, axes[0][0], head, summary)
        written.append(_save(fig, out_dir / name))

    if probe:
        pair_of_panels([("metrics", "time_us", "time per op (µs)"), ("metrics", "busbw_gbs", "bus bandwidth (GB/s)")],
                       "probe time and bus bandwidth vs message size", "probe_time_busbw.png")
        up = _uplift_plot(summary, out_dir / "uplift.png", "latency uplift (slower time / faster time − 1)")
    else:
        pair_of_panels([("metrics", "output_throughput", "output throughput (tok/s)"),
                        ("metrics", "total_token_throughput", "total throughput (tok/s)")],
                       "throughput vs concurrency", "throughput.png", zero=True)
        up = _uplift_plot(summary, out_dir / "uplift.png", "output-throughput uplift")
        pair_of_panels([("metrics", "mean_tpot_ms", "mean TPOT (ms)"), ("metrics", "mean_itl_ms", "mean ITL (ms)")],
                       "per-token latency: TPOT and ITL", "latency_tpot_itl.png", zero=True)
        if _series(summary, "metrics", "mean_ttft_ms"):
            ttft = [("metrics", "mean_ttft_ms", "mean TTFT (ms)")]
            if _series(summary, "metrics", "p99_ttft_ms"):
                ttft.append(("metrics", "p99_ttft_ms", "p99 TTFT (ms)"))
            else:  # an empty panel reads as "zero"; say it instead
                notes.append("latency_ttft.png: p99 TTFT is not recorded in this layout (mean TTFT only)")
            pair_of_panels(ttft, "time to first token", "latency_ttft.png", zero=True)
        else:
            notes.append("latency_ttft.png skipped: no scenario has mean_ttft_ms")
        if _series(summary, "energy", "tokens_per_joule"):
            pair_of_panels([("energy", "tokens_per_joule", "tokens per joule (tok/J)"),
                            ("energy", "avg_watts", "average power of the pair (W)")],
                           "energy efficiency", "tokens_per_joule.png", zero=True)
        else:
            notes.append("tokens_per_joule.png skipped: no rep carries energy.tokens_per_joule")
    if up is not None:
        written.append(up)
    else:
        notes.append("uplift.png skipped: no point has a paired rep of two arms")
    written += _hw_plots(summary, out_dir, telemetry, copy_result, matrix_text, notes)
    return written, notes


def _hw_plots(summary: Summary, out_dir: Path, telemetry: TelemetryLookup,
              copy_result: Mapping[str, object] | None, matrix_text: str | None, notes: list[str]) -> list[Path]:
    from pytest_p2p.report import plots_hw

    def title(fig: Figure, text: str) -> None:
        _title(fig, None, text, summary)

    written: list[Path] = []
    by_arm: dict[str, list[Path]] = {}
    for arm in dict.fromkeys(sc["arm"] for sc in summary["scenarios"]):
        files = plots_hw.arm_files(summary, telemetry, arm)
        by_arm[arm] = files
        if not files:
            notes.append(f"no telemetry timeline for arm {arm}: no telemetry CSV on disk")
            continue
        p = plots_hw.telemetry_plot(title, files, arm, out_dir / f"telemetry_{arm}.png", _save)
        if p is None:
            notes.append(f"telemetry timeline for {arm}: not recorded in this layout (its CSVs hold fewer than two "
                         "sample times: a snapshot, not a timeline)")
        else:
            written.append(p)
    p = plots_hw.pcie_plot(title, by_arm, out_dir / "pcie_link.png", _save)
    if p is None:
        notes.append("pcie_link.png: the PCIe link over time is not recorded in this layout (fewer than two "
                     "sample times carry pcie.link.gen.current)")
    else:
        written.append(p)
    matrices = _matrices(copy_result, matrix_text, notes)
    if matrices is not None:
        gpus, mats, source = matrices
        p = plots_hw.matrix_plot(title, gpus, mats, source, out_dir / "p2p_matrix.png", _save)
        if p is not None:
            written.append(p)
    return written


def _matrices(copy_result: Mapping[str, object] | None, matrix_text: str | None,
              notes: list[str]) -> tuple[list[int], dict[str, list[list[float | None]]], str] | None:
    from pytest_p2p.report import plots_hw

    if copy_result is not None:
        got = plots_hw.copy_matrices(copy_result)
        if got is not None:
            return got[0], got[1], "P2P copy probe: peer vs host-staged copies"
    if matrix_text:
        from pytest_p2p.errors import P2PError
        from pytest_p2p.probes.p2pmatrix import parse_p2p_bandwidth_latency

        try:
            res = parse_p2p_bandwidth_latency(matrix_text, "p2pBandwidthLatencyTest output", strict=False)
        except P2PError as exc:
            notes.append(f"p2p_matrix.png skipped: {exc}")
            return None
        names = {"latency_gpu_disabled": "latency_disabled", "latency_gpu_enabled": "latency_enabled",
                 "unidirectional_bw_disabled": "bandwidth_disabled", "unidirectional_bw_enabled": "bandwidth_enabled"}
        mats = {names[k]: v for k, v in res.matrices.items() if k in names}
        labels = next((res.labels[k] for k in res.matrices if k in names), [])
        if mats and labels:
            return list(labels), mats, "cuda-samples p2pBandwidthLatencyTest"
    notes.append("p2p_matrix.png skipped: no P2P copy probe result (p2pcopy.json) and no "
                 "p2pBandwidthLatencyTest output")
    return None
