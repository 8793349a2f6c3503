"""The summary files of a run directory: ``summary.csv`` and ``summary.md`` from the summary dict.

Split from :mod:`render` (which builds the dict from the rep files) so that each stays
small. ``summary.csv`` keeps the seed's column names (``output_tok_s``, ``output_tok_s_std``,
``total_tok_s``, ``p99_tpot_ms``, ``tokens_per_joule``...) so a p2p-bench user's scripts read it;
``summary.md`` carries the glance table, the uplift, and the seed's proof sections.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from pytest_p2p.jsontypes import as_dict, as_dicts
from pytest_p2p.report import terminal
from pytest_p2p.report.proof import Proof, proof_markdown
from pytest_p2p.report.summary_types import Summary, stat_at
from pytest_p2p.util import parse_size

_MODEL_CSV = (
    ("output_tok_s", "output_throughput"),
    ("total_tok_s", "total_token_throughput"),
    ("request_throughput", "request_throughput"),
    ("mean_ttft_ms", "mean_ttft_ms"),
    ("median_ttft_ms", "median_ttft_ms"),
    ("p99_ttft_ms", "p99_ttft_ms"),
    ("mean_tpot_ms", "mean_tpot_ms"),
    ("median_tpot_ms", "median_tpot_ms"),
    ("p99_tpot_ms", "p99_tpot_ms"),
    ("mean_itl_ms", "mean_itl_ms"),
    ("median_itl_ms", "median_itl_ms"),
    ("p99_itl_ms", "p99_itl_ms"),
    ("mean_e2el_ms", "mean_e2el_ms"),
    ("p99_e2el_ms", "p99_e2el_ms"),
    ("completed", "completed"),
    ("failed", "failed"),
)
_PROBE_CSV = (("time_us", "time_us"), ("busbw_gbs", "busbw_gbs"), ("algbw_gbs", "algbw_gbs"))


def csv_text(summary: Summary) -> str:
    probe = summary["kind"] == "probe"
    cols = _PROBE_CSV if probe else _MODEL_CSV
    header = ["arm", "size_bytes" if probe else "concurrency", "point", "n_reps"]
    for out_name, _key in cols:
        header += [out_name, f"{out_name}_std"] if out_name in ("output_tok_s", "total_tok_s") or probe else [out_name]
    if not probe:
        header += ["avg_watts", "tokens_per_joule", "joules_per_token"]
    header += ["throttled_reps", "downtrained_reps", "transport", "simulated"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for sc in summary["scenarios"]:
        point = sc["point"]
        try:
            pval: int | str = parse_size(point[1:]) if probe else int(point[1:])
        except ValueError:
            pval = point
        n = max((v.get("n") or 0) for v in sc["metrics"].values()) if sc["metrics"] else 0
        row: list[object] = [sc["arm"], pval, point, n]
        for out_name, key in cols:
            st = stat_at(sc, "metrics", key) or {}
            row.append(_r(st.get("mean")))
            if out_name in ("output_tok_s", "total_tok_s") or probe:
                row.append(_r(st.get("std")))
        if not probe:
            row += [_r((stat_at(sc, "energy", k) or {}).get("mean")) for k in ("avg_watts", "tokens_per_joule",
                                                                          "joules_per_token")]
        row += [" ".join(map(str, sc["flags"].get("throttled_reps") or [])),
                " ".join(map(str, sc["flags"].get("downtrained_reps") or [])),
                sc.get("transport") or "", summary["simulated"]]
        w.writerow(row)
    return buf.getvalue()


def _r(v: float | None) -> float | str:
    return "" if v is None else round(float(v), 4)


def md_text(summary: Summary, plot_paths: list[Path], notes: list[str], run_dir: Path,
            proof: Proof | None = None) -> str:
    sim = summary["simulated"]
    pair = as_dict(summary.get("pair"))
    lines = [f"# {terminal.title(summary)}", ""]
    if sim:
        lines += ["> **SIMULATED**: produced on the demo rig (recorded snapshot + stand-in server). "
                  "These numbers exercise the tooling; they measure no real interconnect.", ""]
    gpus = ", ".join(f"GPU{g.get('index')} {g.get('name', '')} {g.get('bus_id', '')}".strip()
                     for g in as_dicts(pair.get("gpus")))
    lines += [
        f"- status: **{summary['status']}**"
        + (f" ({note})" if (note := summary.get("status_note")) else "")
        + f"; kind: {summary['kind']}; reps per scenario: {summary.get('reps')}; "
        f"schedule: {summary.get('schedule') or '-'}",
        f"- pair: {pair.get('key', '?')}" + (f" ({gpus})" if gpus else ""),
        f"- started: {summary.get('started_at') or '-'}; finished: {summary.get('finished_at') or '-'}",
        "",
        "## Results at a glance",
        "",
    ]
    headers, rows = terminal.glance_rows(summary)
    lines += [terminal.markdown_table(headers, rows) if rows else "_no scenario has any completed rep_", ""]
    lines += ["Cells are means over the reps on disk; ± is the sample standard deviation (ddof=1). "
              "Uplift is paired by rep: geometric mean of the per-rep ratios − 1.", ""]
    serving_headers, serving = terminal.serving_rows(summary)
    if serving:
        lines += ["## Serving (vllm bench serve's keys, means over the reps)", "",
                  terminal.markdown_table(serving_headers, serving), ""]
    lines += [terminal.uplift_line(summary), ""]
    if summary["uplift"]:
        headers, rows = terminal.verdict_rows(summary)
        lines += ["## Verdict per point", "", terminal.markdown_table(headers, rows), "",
                  f"**{terminal.verdict_line(summary)}**", ""]
    lines += ["## Transport per arm", "", "| Arm | Expected | Observed (transport_proof.json) |", "|---|---|---|"]
    for arm, t in summary["transport"].items():
        lines.append(f"| {arm} | {t.get('expected') or '-'} | {', '.join(t.get('observed') or []) or 'no proof'} |")
    if proof is not None:
        lines += ["", *proof_markdown(proof)]
    lines += ["", "## Flags", ""]
    flagged = False
    for sc in summary["scenarios"]:
        for key, label in (("throttled_reps", "throttled"), ("downtrained_reps", "PCIe link downtrained")):
            if sc["flags"].get(key):
                flagged = True
                lines.append(f"- {sc['arm']}-{sc['point']}: {label} in run "
                             f"{', '.join(map(str, sc['flags'][key]))}")
        if sc.get("excluded_reps"):
            flagged = True
            lines.append(f"- {sc['arm']}-{sc['point']}: run {', '.join(map(str, sc['excluded_reps']))} excluded "
                         "from means and uplift (exclude_throttled)")
    if not flagged:
        lines.append("- none (no rep throttled, no link downtrained)")
    lines += ["", "## Missing", ""]
    lines += [f"- {m}" for m in summary["missing"]] or ["- nothing: every expected rep is on disk"]
    if plot_paths or notes:
        lines += ["", "## Plots", ""]
        lines += [f"![{p.stem}]({p.relative_to(run_dir).as_posix()})" for p in plot_paths]
        lines += [f"- note: {n}" for n in notes]
    return "\n".join(lines) + "\n"
