"""Hardware plots: telemetry timelines, the PCIe link timeline and the P2P latency/bandwidth matrix.

Split from :mod:`plots` (performance plots) because these read the raw telemetry CSVs and
probe results rather than the summary. Design choices a reader may question:

* A telemetry timeline spans EVERY rep of every point of an arm, on one time axis
  (seconds since the arm's first sample), with gaps where the other arm was running:
  one rep at one point is a second or two on a fast rig, which says nothing.
* One column of panels per GPU: two cards of a pair usually read the same utilisation and
  clocks, and two lines on one axis hide each other.
* The matrix mirrors cuda-samples ``p2pBandwidthLatencyTest``: rows are the source GPU,
  columns the destination, P2P disabled beside enabled; cells we have no number for say
  ``n/a`` rather than 0.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_p2p.report import terminal
from pytest_p2p.report.proof import cell_number
from pytest_p2p.report.summary_types import Summary

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TelemetryLookup = Callable[[str, str], Mapping[int, Path]]
#: draws the title (and the SIMULATED stamp) of a figure; writes a figure as PNG and returns its path
Title = Callable[["Figure", str], None]
Save = Callable[["Figure", Path], Path]

_PANELS = (
    ("utilization.gpu", "utilization (%)", (0.0, 105.0)),
    ("temperature.gpu", "temperature (°C)", None),
    ("power.draw", "power (W)", None),
    ("clocks.current.sm", "SM clock (MHz)", None),
)


def read_samples(files: Iterable[Path]) -> dict[str, list[dict[str, float]]]:
    """GPU index -> samples (``t`` = wall_epoch plus every numeric column), each file one segment.

    A ``{"t": nan}`` row separates files so a line breaks between reps instead of bridging a gap.
    """
    out: dict[str, list[dict[str, float]]] = {}
    for f in files:
        try:
            with f.open(newline="", encoding="utf-8", errors="replace") as fh:
                reader = csv.DictReader(fh)
                if not reader.fieldnames or "wall_epoch" not in reader.fieldnames:
                    continue
                for row in reader:
                    t = cell_number(row.get("wall_epoch"))
                    if t is None:
                        continue
                    sample = {"t": t}
                    for k, v in row.items():
                        if k and k not in ("wall_epoch", "index") and (x := cell_number(v)) is not None:
                            sample[k.removesuffix(".max")] = x
                    out.setdefault(row.get("index") or "?", []).append(sample)
        except (OSError, csv.Error):
            continue
        for rows in out.values():
            if rows and not math.isnan(rows[-1]["t"]):
                rows.append({"t": math.nan})
    return out


GAP_S = 10.0  # idle stretches longer than this (the other arm running) are cut out of the time axis


def compress_gaps(times: list[float]) -> tuple[Callable[[float], float], list[float]]:
    """A map from wall time to "seconds sampled" with idle gaps > GAP_S cut, and where the cuts are."""
    ts = sorted(t for t in times if not math.isnan(t))
    starts: list[tuple[float, float]] = []  # (wall time where a segment starts, seconds removed before it)
    removed = 0.0
    cuts: list[float] = []
    for prev, cur in zip(ts, ts[1:], strict=False):
        if cur - prev > GAP_S:
            removed += cur - prev - 1.0
            starts.append((cur, removed))
            cuts.append(cur - ts[0] - removed - 0.5)
    t0 = ts[0] if ts else 0.0

    def to_x(t: float) -> float:
        cut = 0.0
        for start, rem in starts:
            if t >= start:
                cut = rem
        return t - t0 - cut

    return to_x, cuts


def _xy(rows: list[dict[str, float]], col: str, to_x: Callable[[float], float]) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    for r in rows:
        if math.isnan(r["t"]):
            xs.append(math.nan)
            ys.append(math.nan)
        elif col in r:
            xs.append(to_x(r["t"]))
            ys.append(r[col])
    return xs, ys


def arm_files(summary: Summary, telemetry: TelemetryLookup, arm: str) -> list[Path]:
    """Every telemetry CSV of an arm, points in order, reps in order."""
    points = sorted({sc["point"] for sc in summary.get("scenarios") or [] if sc["arm"] == arm},
                    key=terminal.point_sort_key)
    return [f for p in points for _rep, f in sorted(telemetry(arm, p).items())]


def telemetry_plot(title: Title, files: list[Path], label: str, path: Path, save: Save) -> Path | None:
    import matplotlib.pyplot as plt

    by_gpu = read_samples(files)
    times = [r["t"] for rows in by_gpu.values() for r in rows if not math.isnan(r["t"])]
    if len(set(times)) < 2:  # none, or one snapshot: a timeline of it would be empty axes ("0 s sampled")
        return None
    to_x, cuts = compress_gaps(times)
    gpus = sorted(by_gpu)
    fig, axes = plt.subplots(len(_PANELS), len(gpus), figsize=(5.5 * len(gpus) + 1, 8.5), sharex=True, sharey="row",
                             squeeze=False)
    for gi, gpu in enumerate(gpus):
        for pi, (col, ylabel, ylim) in enumerate(_PANELS):
            ax = axes[pi][gi]
            xs, ys = _xy(by_gpu[gpu], col, to_x)
            ax.plot(xs, ys, linewidth=1.0, color=f"C{gi}")
            for c in cuts:
                ax.axvline(c, color="grey", linestyle=":", linewidth=0.8)
            if ylim:
                ax.set_ylim(*ylim)
            elif col == "power.draw":
                ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            if gi == 0:
                ax.set_ylabel(ylabel)
            if pi == 0:
                ax.set_title(f"GPU{gpu}", fontsize=10)
        axes[-1][gi].set_xlabel("seconds sampled (dotted: idle gap cut, e.g. the other arm running)")
    span = to_x(max(times))
    title(fig, f"telemetry timeline {label}: every rep and point ({len(files)} files, {span:.0f} s sampled)")
    return save(fig, path)


def pcie_plot(title: Title, by_arm: Mapping[str, list[Path]], path: Path, save: Save) -> Path | None:
    """PCIe generation and width per GPU over the whole campaign (both arms, one clock)."""
    import matplotlib.pyplot as plt

    series: dict[str, list[dict[str, float]]] = {}
    for files in by_arm.values():
        for gpu, rows in read_samples(files).items():
            series.setdefault(gpu, []).extend(rows)
    times = [r["t"] for rows in series.values() for r in rows if not math.isnan(r["t"]) and
             "pcie.link.gen.current" in r]
    if len(set(times)) < 2:  # one snapshot is no timeline: said in a note instead of drawn
        return None
    t0 = min(times)

    def to_x(t: float) -> float:
        return t - t0

    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for gi, gpu in enumerate(sorted(series)):
        rows = sorted((r for r in series[gpu] if not math.isnan(r["t"])), key=lambda r: r["t"])
        for ax, col, maxcol in ((axes[0], "pcie.link.gen.current", "pcie.link.gen.max"),
                                (axes[1], "pcie.link.width.current", "pcie.link.width.max")):
            xs, ys = _xy(rows, col, to_x)
            ax.step(xs, ys, where="post", label=f"GPU{gpu}", color=f"C{gi}", linestyle="-" if gi % 2 == 0 else "--",
                    linewidth=1.6)
            mx = [r[maxcol] for r in rows if maxcol in r]
            if mx:
                ax.axhline(max(mx), color=f"C{gi}", linestyle=":", linewidth=0.8, label=f"GPU{gpu} max")
    axes[0].set_ylabel("PCIe generation")
    axes[1].set_ylabel("PCIe width (lanes)")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[1].set_xlabel("time since the campaign's first sample (s)")
    title(fig, "PCIe link over the campaign (a drop is a downtrained link)")
    return save(fig, path)


Matrix = list[list[float | None]]


def copy_matrices(copy: Mapping[str, object]) -> tuple[list[int], dict[str, Matrix]] | None:
    """Latency and bandwidth matrices (P2P disabled = host-staged, enabled = peer) of a p2pcopy.json."""
    pair = copy.get("pair")
    modes = copy.get("modes")
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(modes, dict)):
        return None
    gpus = [int(pair[0]), int(pair[1])]
    out: dict[str, Matrix] = {}
    for mode, tag in (("host_staged", "disabled"), ("peer", "enabled")):
        m = modes.get(mode)
        if not isinstance(m, dict):
            continue
        for key, name in (("latency_us", "latency"), ("unidir_gbs", "bandwidth")):
            d = m.get(key) if isinstance(m.get(key), dict) else {}
            assert isinstance(d, dict)
            mat: Matrix = [[None, None], [None, None]]
            for direction, v in d.items():
                src, _, dst = str(direction).partition("->")
                if src.isdigit() and dst.isdigit() and int(src) in gpus and int(dst) in gpus:
                    mat[gpus.index(int(src))][gpus.index(int(dst))] = cell_number(v)
            out[f"{name}_{tag}"] = mat
    return (gpus, out) if out else None


def matrix_plot(title: Title, gpus: list[int], mats: Mapping[str, Matrix], source: str, path: Path,
                save: Save) -> Path | None:
    import matplotlib.pyplot as plt

    panels = [(k, lbl) for k, lbl in (("latency_disabled", "latency, P2P disabled (µs)"),
                                      ("latency_enabled", "latency, P2P enabled (µs)"),
                                      ("bandwidth_disabled", "unidirectional BW, P2P disabled (GB/s)"),
                                      ("bandwidth_enabled", "unidirectional BW, P2P enabled (GB/s)")) if k in mats]
    if not panels:
        return None
    cols = 2
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, cols, figsize=(10, 4.2 * rows), squeeze=False)
    import matplotlib as mpl

    for i, (key, label) in enumerate(panels):
        ax = axes[i // cols][i % cols]
        mat = mats[key]
        vals = [[math.nan if v is None else v for v in row] for row in mat]
        # one colour scale per quantity, so "disabled" and "enabled" read against each other
        quantity = key.split("_")[0]
        known = [v for k, m in mats.items() if k.startswith(quantity) for row in m for v in row if v is not None]
        norm = mpl.colors.LogNorm(vmin=min(known), vmax=max(known)) if known and min(known) > 0 else None
        cmap = mpl.colormaps["viridis_r" if quantity == "latency" else "viridis"]
        ax.imshow(vals, cmap=cmap, norm=norm)
        for r, row in enumerate(mat):
            for c, v in enumerate(row):
                color = "black"
                if v is not None and norm is not None:
                    red, green, blue, _ = cmap(norm(v))
                    color = "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"
                ax.text(c, r, "n/a" if v is None else f"{v:.2f}", ha="center", va="center", fontsize=10,
                        color=color, fontweight="bold")
        ax.set_xticks(range(len(gpus)))
        ax.set_xticklabels([f"GPU{g}" for g in gpus])
        ax.set_yticks(range(len(gpus)))
        ax.set_yticklabels([f"GPU{g}" for g in gpus])
        ax.set_xlabel("destination")
        ax.set_ylabel("source")
        ax.set_title(label, fontsize=10)
    for j in range(len(panels), rows * cols):
        axes[j // cols][j % cols].axis("off")
    title(fig, f"P2P latency / bandwidth matrix ({source})")
    return save(fig, path)
