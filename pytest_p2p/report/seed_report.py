"""``report DIR`` on a p2p-bench results directory: the seed's table and uplift line, our sections.

The seed's files are read as they are (:mod:`pytest_p2p.seedlayout`) and turned into the
same ``summary`` dict our own run directories give, so the glance table, the uplift line
and the plots are the ones a pytest-p2p user knows. Three things differ and are said in
the output rather than hidden:

* ``±`` is the seed's POPULATION standard deviation (ddof=0), checked against the stored
  per-run values where they exist; our own runs print the sample std (ddof=1).
* The uplift is p2p-bench's: ratio of the two arms' means − 1 (it has no per-rep pairing),
  with no confidence interval and no threshold.
* Nothing is written into the seed's directory (it has its own summary.md/csv/json): the
  rendering goes to ``<DIR>/pytest-p2p-report/`` (or ``--out``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pytest_p2p.report import terminal
from pytest_p2p.report.proof import proof_for_seed, proof_markdown
from pytest_p2p.report.summary_types import EnergyGroup, Scenario, Stat, Summary, UpliftEntry
from pytest_p2p.results.layout import AGGREGATE
from pytest_p2p.seedlayout import SeedRun, read_seed_run
from pytest_p2p.util import atomic_write_json, atomic_write_text

OUT_DIR = "pytest-p2p-report"
SEED_LEVEL = 0.95  # the seed's runs are not judged against a threshold: a plain two-sided 95 % interval


def _welch(a: Stat, b: Stat, *, population: bool) -> tuple[float, float] | None:
    """Welch's interval of the ratio of the two arms' means (sample std, ddof=1: a population std is rescaled)."""
    from pytest_p2p.stats.welch import welch_ratio_interval

    def mean_std_n(st: Stat) -> tuple[float, float, int]:
        vals = list(st.get("values") or [])
        if len(vals) >= 2:
            m = sum(vals) / len(vals)
            return m, (sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5, len(vals)
        mean, std, n = st.get("mean"), st.get("std"), st.get("n") or 0
        if mean is None or std is None or n < 2:
            return (0.0, 0.0, 0)
        return float(mean), float(std) * ((n / (n - 1)) ** 0.5 if population else 1.0), n

    return welch_ratio_interval(mean_std_n(a), mean_std_n(b), level=SEED_LEVEL)

# summary.csv column -> our metric name, for scenarios that have no aggregate.json
_CSV_METRICS = {"output_tok_s": "output_throughput", "total_tok_s": "total_token_throughput",
                "p99_tpot_ms": "p99_tpot_ms", "p99_e2el_ms": "p99_e2el_ms"}


@dataclass
class SeedRendered:
    out_dir: Path
    summary: Summary
    paths: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _pair(arms: list[str]) -> tuple[str, str] | None:
    if "p2p_on" in arms and "p2p_off" in arms:
        return "p2p_on", "p2p_off"
    return (arms[0], arms[1]) if len(arms) >= 2 else None


def seed_summary(run: SeedRun) -> Summary:
    """Our ``summary`` dict (as in summary.json) from a p2p-bench directory."""
    scenarios: list[Scenario] = []
    seen: set[tuple[str, str]] = set()
    for s in run.scenarios:
        metrics: dict[str, Stat] = {name: {"mean": st.mean, "std": st.std, "n": s.n_runs or None,
                                           "values": list(st.values)} for name, st in s.metrics.items()}
        energy: EnergyGroup = {}
        if s.mean_watts:
            energy["avg_watts"] = {"mean": s.mean_watts, "n": 1}
            out = s.metrics.get("output_throughput")
            if out is not None:
                energy["tokens_per_joule"] = {"mean": out.mean / s.mean_watts, "n": 1}
            energy["method"] = "p2p-bench energy.mean_watts (combined GPU power)"
        transport = None
        if s.transport:
            p2p, shm = s.transport.get("nccl_used_p2p"), s.transport.get("nccl_used_shm")
            transport = "P2P" if p2p is True else "SHM" if shm is True else None
        scenarios.append({"arm": s.arm, "point": s.point, "reps": sorted(s.runs), "excluded_reps": [],
                          "expected_reps": s.n_runs, "source": AGGREGATE, "metrics": metrics,
                          "energy": energy, "flags": {"throttled_reps": [], "downtrained_reps": []},
                          "transport": transport})
        seen.add((s.arm, s.point))
    for row in run.summary_rows:  # summary.csv rows whose scenario directory is absent
        arm, conc = row.get("arm", ""), row.get("concurrency", "")
        if not arm or not conc.isdigit() or (arm, f"c{conc}") in seen:
            continue
        metrics = {}
        for col, name in _CSV_METRICS.items():
            if (v := _num(row.get(col))) is not None:
                metrics[name] = {"mean": v, "std": _num(row.get(f"{col}_std")), "n": None, "values": []}
        scenarios.append({"arm": arm, "point": f"c{conc}", "reps": [], "excluded_reps": [], "expected_reps": None,
                          "source": "summary.csv", "metrics": metrics, "energy": {},
                          "flags": {"throttled_reps": [], "downtrained_reps": []}, "transport": None})
    arms: list[str] = []
    for arm in [*(r.get("arm", "") for r in run.summary_rows if r.get("arm")), *(sc["arm"] for sc in scenarios)]:
        if arm not in arms:
            arms.append(arm)
    points = sorted({sc["point"] for sc in scenarios}, key=terminal.point_sort_key)
    named = {t.arm: t.observed for t in proof_for_seed(run).transports if t.observed}
    for sc in scenarios:  # "P2P" as the seed's proof line names it: P2P/CUMEM
        if sc["transport"] and sc["arm"] in named and named[sc["arm"]].startswith(str(sc["transport"])):
            sc["transport"] = named[sc["arm"]]
    observed = {a: sorted({t for sc in scenarios if sc["arm"] == a and (t := sc["transport"])}) for a in arms}
    uplift: list[UpliftEntry] = []
    summary: Summary = {
        "schema": 1, "run_id": run.path.name, "rig": "p2p-bench", "pair": {"key": "seed layout"}, "kind": "model",
        "simulated": False, "status": "complete", "missing": list(run.missing), "reps": None, "schedule": None,
        "started_at": None, "finished_at": None, "arms": {a: {} for a in arms}, "points": points,
        "transport": {a: {"expected": None, "observed": observed[a]} for a in arms},
        "scenarios": scenarios, "uplift": uplift, "verdicts": None,
        "source_layout": "p2p-bench", "std_convention": run.std_convention,
        "uplift_convention": "ratio of the arms' means − 1 (p2p-bench); separate runs, not paired: "
                             "Welch's interval on the log scale",
    }
    pair = _pair(arms)
    if pair is not None:
        faster, slower = pair
        summary["uplift_label"] = "P2P output-throughput uplift" if [o.split("/")[0] for o in observed.get(
            faster, [])] == ["P2P"] else None
        by = {(sc["arm"], sc["point"]): sc for sc in scenarios}
        for p in points:
            a = (by.get((faster, p)) or {}).get("metrics", {}).get("output_throughput")
            b = (by.get((slower, p)) or {}).get("metrics", {}).get("output_throughput")
            if not a or not b or not (b_mean := b.get("mean")) or (a_mean := a.get("mean")) is None:
                continue
            interval = _welch(a, b, population=summary["std_convention"].startswith("population"))
            uplift.append({
                "point": p, "metric": "output_throughput", "faster_arm": faster, "slower_arm": slower,
                "estimate": a_mean / b_mean - 1.0, "interval": list(interval) if interval else None,
                "level": SEED_LEVEL if interval else None, "n": min(a.get("n") or 0, b.get("n") or 0),
                "direction": "higher", "threshold": None, "rule": "ratio of means", "passed": None,
                "message": "p2p-bench convention: ratio of means",
            })
    return summary


def _markdown(summary: Summary, run: SeedRun, plots: list[Path], notes: list[str], out_dir: Path) -> str:
    headers, rows = terminal.glance_rows(summary)
    lines = [f"# {terminal.title(summary)}", "",
             f"Read from the p2p-bench results directory `{run.path}` as it is (nothing there was changed).", "",
             *([f"Joined from separate runs (unpaired: Welch's interval): "
                f"{', '.join(f'`{p.name}`' for p in run.joined_from)}.", ""] if run.joined_from else []),
             "## Results at a glance", "",
             terminal.markdown_table(headers, rows) if rows else "_no scenario_", "",
             f"± is the seed's standard deviation: **{summary['std_convention']}**. Uplift: "
             f"{summary['uplift_convention']}. tok/J = output tok/s ÷ energy.mean_watts.", "",
             terminal.uplift_line(summary), "", terminal.markdown_table(*terminal.verdict_rows(summary)), ""]
    lines += proof_markdown(proof_for_seed(run))
    lines += ["", "## Missing", ""]
    lines += [f"- {m}" for m in summary["missing"]] or ["- nothing"]
    if plots or notes:
        lines += ["", "## Plots", ""]
        lines += [f"![{p.stem}]({p.relative_to(out_dir).as_posix()})" for p in plots]
        lines += [f"- note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


def render_seed_report(path: str | Path | SeedRun, *, out: str | Path | None = None,
                       plots: bool = True) -> SeedRendered:
    """Write summary.{md,json} and plots for a p2p-bench directory into ``out`` (default ``DIR/pytest-p2p-report``).

    ``path`` may be a run already read (a folder's runs joined by :func:`~pytest_p2p.seedlayout.join_seed_runs`).
    """
    run = path if isinstance(path, SeedRun) else read_seed_run(path)
    summary = seed_summary(run)
    out_dir = Path(out) if out is not None else run.path / OUT_DIR
    plot_paths: list[Path] = []
    notes: list[str] = []
    if plots:
        from pytest_p2p.report.plots import render_plots

        tele = {(s.arm, s.point): dict(s.telemetry) for s in run.scenarios}
        plot_paths, notes = render_plots(summary, out_dir / "plots", lambda arm, point: tele.get((arm, point), {}),
                                         copy_result=None, matrix_text=_matrix_text(run))
    rendered = SeedRendered(out_dir=out_dir, summary=summary, notes=notes)
    rendered.paths = [atomic_write_text(out_dir / "summary.md", _markdown(summary, run, plot_paths, notes, out_dir)),
                      atomic_write_json(out_dir / "summary.json", summary), *plot_paths]
    return rendered


def _matrix_text(run: SeedRun) -> str | None:
    text = (run.evidence or {}).get("cuda_samples_p2p")
    return text if isinstance(text, str) else None
