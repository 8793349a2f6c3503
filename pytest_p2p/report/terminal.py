"""The "results at a glance" table and the uplift line, from a ``summary.json`` dict.

The same rows feed the terminal summary (plain aligned text) and ``summary.md``
(a markdown table), so the two can never disagree. Columns follow the seed report:
a reader who knows that report recognises the table at once.
"""

from __future__ import annotations

from pytest_p2p.jsontypes import as_dict
from pytest_p2p.report.summary_types import Scenario, Stat, Summary, UpliftEntry, stat_at
from pytest_p2p.util import format_size, parse_size

SIMULATED_TAG = "SIMULATED"

# (header as the seed report writes it (None: the terminal only), terminal header (None: summary.md only;
# the terminal's table fits 100 columns, its latencies are in serving_rows), metric key, where ("metrics"
# or "energy"), digits, show std)
_Column = tuple[str | None, str | None, str, str, int, bool]
_MODEL_COLUMNS: tuple[_Column, ...] = (
    ("Output tok/s", "Output tok/s", "output_throughput", "metrics", 1, True),
    ("Total tok/s", "Total tok/s", "total_token_throughput", "metrics", 1, False),
    (None, "req", "completed", "metrics", 0, False),
    (None, "fail", "failed", "metrics", 0, False),
    (None, "dur s", "duration", "metrics", 1, False),
    ("mean TTFT (ms)", None, "mean_ttft_ms", "metrics", 0, False),
    ("mean TPOT (ms)", None, "mean_tpot_ms", "metrics", 1, False),
    ("p99 TPOT (ms)", None, "p99_tpot_ms", "metrics", 1, False),
    ("mean ITL (ms)", None, "mean_itl_ms", "metrics", 1, False),
    ("Avg power (W)", "W", "avg_watts", "energy", 0, False),
    ("tok/J", "tok/J", "tokens_per_joule", "energy", 3, False),
)
_PROBE_COLUMNS: tuple[_Column, ...] = (
    ("time (us)", "time (us)", "time_us", "metrics", 2, True),
    ("busbw (GB/s)", "busbw (GB/s)", "busbw_gbs", "metrics", 2, True),
)


def point_sort_key(point: str) -> tuple[int, float, str]:
    """``c2`` before ``c10``; ``s8KiB`` before ``s1MiB``; anything else last, by name."""
    try:
        if point.startswith("c"):
            return (0, float(int(point[1:])), point)
        if point.startswith("s"):
            return (1, float(parse_size(point[1:])), point)
    except ValueError:
        pass
    return (2, 0.0, point)


def point_label(point: str) -> str:
    """``c8`` -> ``8`` (concurrency), ``s8KiB`` -> ``8KiB`` (message size)."""
    if point.startswith("c") and point[1:].isdigit():
        return point[1:]
    if point.startswith("s"):
        try:
            return format_size(parse_size(point[1:]))
        except ValueError:
            return point[1:]
    return point


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"


def _cell(stat: Stat | None, digits: int, with_std: bool) -> str:
    mean = stat.get("mean") if stat else None
    if stat is None or mean is None:
        return "-"
    text = _fmt(float(mean), digits)
    std = stat.get("std")
    n = stat.get("n")
    if with_std and std is not None and (n is None or n >= 2):  # n None: a stored std of unknown count
        text += f" ±{float(std):.{digits}f}"
    return text


def _ordered_scenarios(summary: Summary) -> list[Scenario]:
    arm_order = {name: i for i, name in enumerate(summary.get("arms") or {})}
    return sorted(
        summary.get("scenarios") or [],
        key=lambda s: (point_sort_key(s["point"]), arm_order.get(s["arm"], len(arm_order)), s["arm"]),
    )


def glance_rows(summary: Summary, *, short: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the glance table; one row per scenario, ordered by point then arm.

    ``short``: the terminal's headers, which keep the table within 100 columns; summary.md keeps
    the seed report's headers. The cells are the same either way.
    """
    probe = summary.get("kind") == "probe"
    columns = [c for c in (_PROBE_COLUMNS if probe else _MODEL_COLUMNS) if c[1 if short else 0] is not None]
    first = "Size" if probe else ("Conc" if short else "Concurrency")
    headers = [first, "Arm"] + [str(c[1] if short else c[0]) for c in columns]
    rows: list[list[str]] = []
    for sc in _ordered_scenarios(summary):
        row = [point_label(sc["point"]), sc["arm"]]
        for _header, _short, key, where, digits, with_std in columns:
            row.append(_cell(stat_at(sc, where, key), digits, with_std))
        rows.append(row)
    return headers, rows


_BENCH_COUNTS = (("Successful requests", "req", "completed", 0), ("Failed requests", "fail", "failed", 0),
                 ("Benchmark duration (s)", "dur s", "duration", 1))
_BENCH_LATENCY = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"))


def serving_rows(summary: Summary, *, short: bool = False) -> tuple[list[str], list[list[str]]]:
    """``vllm bench serve``'s result keys per scenario (means over the reps): requests, failed, duration and
    mean / median / p99 of TTFT, TPOT and ITL. Empty for a probe run or a run without these keys.

    ``short`` (the terminal): the three statistics of one quantity share a cell, ``mean/median/p99``,
    so the table stays within 100 columns; summary.md has one column per key, named as bench prints it.
    """
    scenarios = [sc for sc in _ordered_scenarios(summary) if stat_at(sc, "metrics", "mean_ttft_ms")]
    if summary.get("kind") == "probe" or not scenarios:
        return [], []
    headers = ["Conc" if short else "Concurrency", "Arm"] + ([] if short else [c[0] for c in _BENCH_COUNTS])
    for label, _key in _BENCH_LATENCY:
        headers += [f"{label} ms mean/med/p99"] if short else [f"{s} {label} (ms)" for s in ("Mean", "Median", "P99")]
    rows = []
    for sc in scenarios:
        row = [point_label(sc["point"]), sc["arm"]]
        if not short:  # the terminal has them in its glance table
            row += [_cell(stat_at(sc, "metrics", key), digits, False) for _h, _s, key, digits in _BENCH_COUNTS]
        for _label, key in _BENCH_LATENCY:
            cells = [_cell(stat_at(sc, "metrics", f"{s}_{key}_ms"), 1, False) for s in ("mean", "median", "p99")]
            row += ["/".join(cells)] if short else cells
        rows.append(row)
    return headers, rows


def title(summary: Summary, *, run_id: bool = True) -> str:
    """One line naming the run; starts with SIMULATED for demo data so nobody quotes it.

    ``run_id=False``: without the run id, which the results path names anyway (the terminal drops
    it where the line would pass 100 columns).
    """
    sim = f"{SIMULATED_TAG} — " if summary.get("simulated") else ""
    pair = as_dict(summary.get("pair")).get("key", "?")
    status = summary.get("status", "?")
    status_note = "" if status == "complete" else f" [{status}]"
    rid = f" ({summary.get('run_id', '?')})" if run_id else ""
    return f"{sim}p2p results at a glance: {summary.get('rig', '?')} {pair}{rid}{status_note}"


def _text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return " | ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(cells))

    out = [line(headers), "-+-".join("-" * w for w in widths)]
    out.extend(line(r) for r in rows)
    return "\n".join(out)


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    """Aligned plain-text table: first two columns left, the rest right (numbers)."""
    return _text_table(headers, rows)


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] * len(headers)) + "|"]
    out.extend("| " + " | ".join(r) + " |" for r in rows)
    return "\n".join(out)


def glance_table(summary: Summary, *, short: bool = True) -> str:
    """The terminal table: a title line (SIMULATED first when simulated), then aligned rows.

    ``short=False``: the seed report's columns, for a p2p-bench directory read back as its owner knows it.
    """
    headers, rows = glance_rows(summary, short=short)
    if not rows:
        return title(summary) + "\n(no scenario has any completed rep)"
    return title(summary) + "\n" + _text_table(headers, rows)


def _uplift_label(summary: Summary, faster: str, slower: str, multi: bool) -> str:
    if not multi and isinstance(summary.get("uplift_label"), str):
        return str(summary["uplift_label"])  # e.g. a p2p-bench directory, whose arms carry no expectation
    arms = summary.get("arms") or {}
    probe = summary.get("kind") == "probe"
    what = "latency uplift" if probe else "output-throughput uplift"
    expect = str(as_dict(arms.get(faster)).get("expect_transport") or "")
    if not multi and expect.upper().startswith("P2P"):
        return f"P2P {what}"
    return f"{faster} vs {slower} {what}"


def _pct(value: float) -> str:
    return f"{value * 100:+.1f} %"


def interval_text(entry: UpliftEntry) -> str:
    """``+10.4 % .. +12.0 %`` of the decision's own interval, ``-`` when there is none."""
    iv = entry.get("interval")
    if not iv or len(iv) != 2:
        return "-"
    return f"{_pct(float(iv[0]))} .. {_pct(float(iv[1]))}"


def level_text(entries: list[UpliftEntry]) -> str:
    """``98 % CI``: the one confidence level of these decisions (``CI`` alone if they differ or none is known)."""
    levels = {round(float(lv) * 100, 1) for e in entries if (lv := e.get("level")) is not None}
    if len(levels) != 1:
        return "CI"
    (level,) = levels
    return f"{level:g} % CI"


def outcome_of(entry: UpliftEntry) -> str:
    """PASS / FAIL / INCONCLUSIVE (or NOT JUDGED when no decision could be made)."""
    outcome = entry.get("outcome")
    if outcome in ("pass", "fail", "inconclusive"):
        return str(outcome).upper()
    passed = entry.get("passed")
    return {True: "PASS", False: "FAIL"}.get(passed, "NOT JUDGED") if passed is not None else "NOT JUDGED"


def verdict_rows(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """One row per judged quantity: point, what, estimate, interval (its level in the header), threshold, verdict."""
    entries = sorted(summary.get("uplift") or [], key=lambda e: point_sort_key(e["point"]))
    headers = ["Point", "Uplift of", "Estimate", level_text(entries), "Threshold", "Verdict"]
    rows = []
    for e in entries:
        estimate, threshold = e.get("estimate"), e.get("threshold")
        verdict = outcome_of(e)
        need = e.get("pairs_needed")
        if verdict == "INCONCLUSIVE" and need:
            verdict += f" (~{need} {e.get('needed_unit') or 'pairs'})"
        rows.append([point_label(e["point"]) if summary.get("kind") == "probe" else e["point"],
                     f"{e['faster_arm']} / {e['slower_arm']}",
                     _pct(float(estimate)) if estimate is not None else "-", interval_text(e),
                     f">= {_pct(float(threshold))}" if threshold is not None else "-", verdict])
    return headers, rows


def verdict_line(summary: Summary) -> str:
    """One line for the whole run: FAIL if any point failed, else INCONCLUSIVE if any was undecided, else PASS."""
    entries = summary.get("uplift") or []
    sim = f"{SIMULATED_TAG} — " if summary.get("simulated") else ""
    if not entries:
        return f"{sim}verdict: NOT JUDGED — no point has paired reps of two arms"
    outcomes = [outcome_of(e) for e in entries]
    counts = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
    overall = next((o for o in ("FAIL", "INCONCLUSIVE", "NOT JUDGED") if o in counts), "PASS")
    label = _uplift_label(summary, entries[0]["faster_arm"], entries[0]["slower_arm"],
                          len({(e["faster_arm"], e["slower_arm"]) for e in entries}) > 1)
    label = label.replace("output-throughput ", "")
    parts = ", ".join(f"{n} {o.lower()}" for o, n in counts.items())
    return f"{sim}verdict: {overall} — {label}, {len(entries)} points: {parts} ({level_text(entries)})"


def uplift_line(summary: Summary) -> str:
    """``P2P output-throughput uplift: c1 +9.0 % · c2 +12.6 %`` (one line per compared arm pair).

    For probe campaigns the uplift is in time (``slower/faster - 1`` of ``time_us``), so a
    P2P copy that takes a twentieth of the SHM time reads ``+1900.0 %``. A point whose
    uplift missed its threshold is marked ``(FAIL < +x %)``.
    """
    entries = summary.get("uplift") or []
    if not entries:
        return "uplift: not computed (needs two arms with at least one paired rep at some point)"
    groups: dict[tuple[str, str], list[UpliftEntry]] = {}
    for e in entries:
        groups.setdefault((e["faster_arm"], e["slower_arm"]), []).append(e)
    lines = []
    for (faster, slower), items in groups.items():
        parts = []
        for e in sorted(items, key=lambda e: point_sort_key(e["point"])):
            estimate, threshold = e.get("estimate"), e.get("threshold")
            if estimate is None:
                parts.append(f"{e['point']} n/a")
                continue
            part = f"{e['point']} {_pct(float(estimate))}"
            if e.get("passed") is False and threshold is not None:
                part += f" (FAIL < {_pct(float(threshold))})"
            elif e.get("outcome") == "inconclusive":
                need = e.get("pairs_needed")
                unit = e.get("needed_unit") or "pairs"
                part += f" (inconclusive{f', ~{need} {unit} needed' if need else ''})"
            parts.append(part)
        label = _uplift_label(summary, faster, slower, len(groups) > 1)
        lines.append(f"{label}: " + " · ".join(parts))
    if summary.get("simulated"):
        lines = [f"{SIMULATED_TAG} — {line}" for line in lines]
    return "\n".join(lines)

