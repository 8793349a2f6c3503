"""Render ``summary.{json,csv,md}`` and ``plots/`` of a run directory from its files.

The summary is always rebuilt from the per-rep ``run_<k>.json`` files (falling back to
``aggregate.json`` only for a scenario without any rep file), never from objects held
in memory by the campaign. That is what makes ``python -m pytest_p2p report DIR`` after
an interrupted campaign correct: reps 1-2 are summarised, rep 3 is listed as missing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from pytest_p2p.errors import ResultsError
from pytest_p2p.jsontypes import JSONObject, as_dict, as_float, as_int, as_list
from pytest_p2p.report import terminal
from pytest_p2p.report.proof import proof_for_run
from pytest_p2p.report.summary_files import csv_text, md_text
from pytest_p2p.report.summary_types import EnergyGroup, Scenario, Stat, Summary, TransportEntry, UpliftEntry, is_stat
from pytest_p2p.results.layout import AGGREGATE, PLOTS, PROOF, point_reps
from pytest_p2p.results.process import writer_state
from pytest_p2p.results.read import RunReader, optional_object
from pytest_p2p.util import atomic_write_json, atomic_write_text

SUMMARY_SCHEMA = 1

# Metric whose paired uplift is reported, and whether a larger value is better.
UPLIFT_METRIC = {"model": ("output_throughput", True), "probe": ("time_us", False)}
ENERGY_KEYS: Final = ("tokens_per_joule", "joules_per_token", "avg_watts")

if TYPE_CHECKING:
    from pytest_p2p.campaign.config import CampaignConfig
    from pytest_p2p.stats.uplift_rule import UpliftRule


class _PairedUplift(Protocol):
    """``stats.summary.paired_uplift``: ``{estimate, ci95, n, ratios, kind}`` of reps paired by index."""

    def __call__(self, a_values: Sequence[float | None], b_values: Sequence[float | None], /, *,
                 higher_is_better: bool = ...) -> Mapping[str, object]: ...


_Summarize = Callable[[Sequence[float]], Mapping[str, object]]

@dataclass
class Rendered:
    """What :func:`render_report` wrote, and what it could not (``notes``)."""

    run_dir: Path
    summary_json: Path
    summary_csv: Path
    summary_md: Path
    plots: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)

    @property
    def paths(self) -> list[Path]:
        return [self.summary_md, self.summary_csv, self.summary_json, *self.plots]


def _stats() -> tuple[_Summarize, _PairedUplift]:
    """The campaign stage owns the statistics; the report only calls them."""
    try:
        from pytest_p2p.stats.summary import paired_uplift, summarize
    except ImportError as exc:  # pragma: no cover - only in a broken install
        raise ResultsError(f"pytest_p2p.stats.summary is not importable ({exc}); reinstall pytest-p2p") from None
    return summarize, paired_uplift


def _summarize(values: list[float]) -> Stat:
    summarize, _ = _stats()
    out = dict(summarize(values))
    out["values"] = list(values)
    if not is_stat(out):  # pragma: no cover - summarize gives numbers or null
        raise ResultsError(f"stats.summary.summarize gave {out!r}, not a metric summary")
    return out


def _aggregate_reps(reps: Mapping[int, JSONObject]) -> tuple[dict[str, Stat], EnergyGroup, dict[str, list[int]]]:
    """metrics, energy and flags of one scenario from its rep files."""
    names: list[str] = []
    for data in reps.values():
        for k, v in data.items():
            if as_float(v) is not None and k not in names:
                names.append(k)
    metrics: dict[str, Stat] = {}
    for name in names:
        vals = [f for d in reps.values() if (f := as_float(d.get(name))) is not None]
        if vals:
            metrics[name] = _summarize(vals)
    energy: EnergyGroup = {}
    for key in ENERGY_KEYS:
        vals = [f for d in reps.values() if (f := as_float(as_dict(d.get("energy")).get(key))) is not None]
        if vals:
            energy[key] = _summarize(vals)
    methods = sorted({str(e.get("method")) for d in reps.values() if (e := as_dict(d.get("energy"))).get("method")})
    if methods:
        energy["method"] = ", ".join(methods)
    flags = {
        "throttled_reps": [k for k, d in reps.items() if as_dict(d.get("flags")).get("throttled")],
        "downtrained_reps": [k for k, d in reps.items() if as_dict(d.get("flags")).get("downtrained")],
    }
    return metrics, energy, flags


def _untrustworthy(rep: Mapping[str, object]) -> bool:
    """A rep the campaign's ``exclude_throttled`` drops: throttled, or its PCIe link downtrained."""
    flags = as_dict(rep.get("flags"))
    return bool(flags.get("throttled") or flags.get("downtrained"))


def _aggregate_file(aggregate: Mapping[str, object]) -> tuple[dict[str, Stat], EnergyGroup, dict[str, list[int]]]:
    """metrics, energy and flags of an ``aggregate.json`` (a scenario without rep files).

    Entries of a wrong shape are left out rather than carried into the summary.
    """
    metrics = {k: v for k, v in as_dict(aggregate.get("metrics")).items() if is_stat(v)}
    energy: EnergyGroup = {k: v for k, v in as_dict(aggregate.get("energy")).items()
                           if is_stat(v) or v is None or isinstance(v, (str, bool))}
    flags = {k: [r for r in v if isinstance(r, int)] for k, v in as_dict(aggregate.get("flags")).items()
             if isinstance(v, list)}
    return metrics, energy, flags or {"throttled_reps": [], "downtrained_reps": []}


_META_MISSING_RE = re.compile(r"^(?P<scenario>\S+-\S+) rep (?P<rep>[0-9]+)$")


def _expected(meta: Mapping[str, object]) -> tuple[list[str], list[str], int | None]:
    arms = meta.get("arms") or {}
    arm_names = [str(a) for a in arms] if isinstance(arms, (dict, list)) else []
    points = [str(p) for p in as_list(meta.get("points"))]
    reps = meta.get("reps")
    return arm_names, points, reps if isinstance(reps, int) and not isinstance(reps, bool) else None


def _transport_of(proof: Mapping[str, object] | None) -> str | None:
    if not proof:
        return None
    for key in ("transport", "observed", "observed_transport"):
        if isinstance(value := proof.get(key), str):
            return value
    if proof.get("nccl_used_p2p") is True:
        return "P2P"
    if proof.get("nccl_used_shm") is True:
        return "SHM"
    return None


def _comparisons(meta: Mapping[str, object], arm_names: list[str]) -> list[tuple[str, str]]:
    """(A, B) pairs: ``run.json``'s ``uplift.faster_arm``/``slower_arm`` when the campaign wrote them,
    else its first arm over its second (campaign config: "uplift is A over B").

    A third or later arm (e.g. custom all-reduce + P2P) is compared against B too.
    """
    up = meta.get("uplift")
    if isinstance(up, dict) and "slower_arm" in up:
        a, b = up.get("faster_arm"), up.get("slower_arm")
        if not b or a not in arm_names or b not in arm_names:
            return []
        return [(str(a), str(b))] + [(x, str(b)) for x in arm_names if x not in (a, b)]
    if len(arm_names) < 2:
        return []
    ref = arm_names[1]
    return [(a, ref) for a in arm_names if a != ref]


def _uplift_settings(meta: Mapping[str, object], kind: str) -> tuple[str, bool, UpliftRule, bool]:
    """metric, higher_is_better, the UpliftRule and exclude_throttled, as the campaign recorded them.

    ``run.json`` may carry ``uplift: {metric, direction, rule: UpliftRule.to_dict(),
    exclude_throttled}``; absent keys fall back to ``campaign: CampaignConfig.to_dict()``
    and then to the campaign defaults (output_throughput / time_us, 5 %, point rule).
    """
    from pytest_p2p.stats.uplift_rule import RULES, UpliftRule

    up = as_dict(meta.get("uplift"))
    camp = as_dict(meta.get("campaign"))
    default_metric, default_higher = UPLIFT_METRIC[kind]
    metric = str(up.get("metric") or camp.get("uplift_metric") or default_metric)
    direction = up.get("direction") or camp.get("uplift_direction")
    if direction in ("higher", "lower"):
        higher = direction == "higher"
    elif metric == default_metric:
        higher = default_higher
    else:  # the campaign's own rule for a metric it was given no direction for
        from pytest_p2p.campaign.config import metric_direction

        higher = metric_direction(metric) != "lower"
    rule_d = as_dict(up.get("rule"))
    rule_name = rule_d.get("rule") or camp.get("uplift_rule") or "point"
    if not isinstance(rule_name, str) or rule_name not in RULES:
        raise ResultsError(f"run.json: uplift.rule.rule is {rule_name!r}, expected one of {', '.join(RULES)}")
    try:
        rule = UpliftRule.from_dict(rule_d, rule_name)
    except (TypeError, ValueError):
        raise ResultsError(f"run.json: uplift.rule {rule_d!r} is not an UpliftRule dict "
                           "({default, per_point, rule, alpha, plan})") from None
    excl = up.get("exclude_throttled", camp.get("exclude_throttled", True))
    return metric, higher, rule, bool(excl)



def _uplift(meta: Mapping[str, object], kind: str, arm_names: list[str],
            rep_data: dict[tuple[str, str], dict[int, JSONObject]],
            agg_values: dict[tuple[str, str], dict[str, list[float]]], points: list[str]) -> list[UpliftEntry]:
    from pytest_p2p.stats.uplift_rule import judge

    _, paired_uplift = _stats()
    metric, higher, rule, _excl = _uplift_settings(meta, kind)
    family = rule.in_family(len(points))  # the campaign's alpha split over its points, as it decides
    own_config = functools.cache(lambda: _campaign_config(meta))  # read once, when a resident run first needs it
    out: list[UpliftEntry] = []
    for faster, slower in _comparisons(meta, arm_names):
        for point in points:
            fr, sr = rep_data.get((faster, point), {}), rep_data.get((slower, point), {})
            common = sorted(k for k in fr if k in sr)
            fv: list[float | None] = [as_float(fr[k].get(metric)) for k in common]
            sv: list[float | None] = [as_float(sr[k].get(metric)) for k in common]
            if not common:  # no paired rep files: pair the aggregate values in order, if both have them
                fa = agg_values.get((faster, point), {}).get(metric, [])
                sa = agg_values.get((slower, point), {}).get(metric, [])
                n = min(len(fa), len(sa))
                fv, sv = list(fa[:n]), list(sa[:n])
            if not any(a is not None and b is not None for a, b in zip(fv, sv, strict=True)):
                continue
            try:
                res = paired_uplift(fv, sv, higher_is_better=higher)
            except ValueError as exc:  # StatsError: e.g. a rep with 0 tok/s cannot form a ratio
                out.append({"point": point, "metric": metric, "faster_arm": faster, "slower_arm": slower,
                            "estimate": None, "interval": None, "level": None, "n": 0,
                            "direction": "higher" if higher else "lower",
                            "threshold": rule.threshold(point), "rule": rule.rule, "passed": None,
                            "message": f"uplift not computable at {point}: {exc}"})
                continue
            entry: UpliftEntry = {
                "point": point, "metric": metric, "faster_arm": faster, "slower_arm": slower,
                "estimate": as_float(res.get("estimate")), "interval": None, "level": None,
                "n": as_int(res.get("n", 0)) or 0,
                "direction": "higher" if higher else "lower",
                "threshold": rule.threshold(point), "rule": rule.rule, "passed": None, "message": "",
            }
            blocks = _start_blocks(fr, sr, common, metric)
            if blocks:  # resident arms: the start is the unit, as in the campaign's own decision
                own = own_config()
                if own is not None and (own.arm_a, own.arm_b) == (faster, slower):
                    _decide_as_the_campaign(entry, own, kind, fr, sr, common, len(points))
                else:
                    _judge_starts(entry, blocks, family, higher)
                _take_decision(entry, as_dict(as_dict(meta.get("decisions")).get(point)))
                out.append(entry)
                continue
            verdict = judge(res, point, family, metric=metric, faster_arm=faster, slower_arm=slower)
            outcome = str(getattr(verdict, "outcome", "pass" if verdict.passed else "fail"))
            # inconclusive is neither a pass nor a fail: passed None, and how many more pairs would decide
            entry["passed"] = {"pass": True, "fail": False}.get(outcome)
            entry["outcome"] = outcome
            entry["pairs_needed"] = getattr(verdict, "pairs_needed", None)
            entry["message"] = verdict.message
            entry["interval"] = list(verdict.ci95) if verdict.ci95 else None
            entry["level"] = verdict.level
            _take_decision(entry, as_dict(as_dict(meta.get("decisions")).get(point)))
            out.append(entry)
    return out


def _start_blocks(fr: Mapping[int, JSONObject], sr: Mapping[int, JSONObject], common: Sequence[int],
                  metric: str) -> dict[int, list[tuple[float, float]]]:
    """Window pairs grouped by the server start they ran in (``meta.start``), or ``{}`` for restart-per-rep reps.

    Why: windows of one start share that start's effect, so judging them as independent pairs gives
    an interval that is far too narrow. Seen on 4x H100 (2026-11-26): a resident campaign that failed
    after 2 starts had no decision of its own in run.json, and the report re-judged its 6 window pairs
    as 6 pairs: ``+20.7 % (98 % CI +17.7 .. +23.7 %) PASS`` where the start means give df = 1 and
    ``-38 .. +136 %``.
    """
    from pytest_p2p.campaign.aggregate import group_by_start, start_of

    starts = [start_of(fr[k]) for k in common]
    if any(s is None for s in starts):
        return {}
    values = [(as_float(fr[k].get(metric)), as_float(sr[k].get(metric))) for k in common]
    return group_by_start((s, (a, b)) for s, (a, b) in zip(starts, values, strict=True)
                          if a is not None and b is not None)


def _campaign_config(meta: Mapping[str, object]) -> CampaignConfig | None:
    """The campaign's settings as ``run.json`` recorded them (``CampaignConfig.to_dict``, read back by the rig
    file's own parser), or ``None`` for a run that recorded none."""
    from pytest_p2p.campaign.config import parse_campaign
    from pytest_p2p.errors import ConfigError

    camp = meta.get("campaign")
    if camp is None:
        return None
    try:
        return parse_campaign(camp, "run.json")
    except ConfigError as exc:
        raise ResultsError(f"run.json: the campaign section cannot be read back: {exc}") from None


def _decide_as_the_campaign(entry: UpliftEntry, cfg: CampaignConfig, kind: str, fr: Mapping[int, JSONObject],
                            sr: Mapping[int, JSONObject], common: list[int], points: int) -> None:
    """A resident run's uplift decided as the campaign decides it (``campaign.adaptive.decide_after``, at the
    campaign's alpha split over its ``points``), for a run that ended before it decided.

    Why: ``test_uplift`` judges such a run this way (``CampaignResult.uplift_verdict``); judged at the per-point
    alpha the report said 98 % where the check said 99 % for 2 points, and the two could disagree."""
    from pytest_p2p.campaign.adaptive import decide_after
    from pytest_p2p.stats import StatsError

    try:
        after = decide_after(fr, sr, cfg, kind, common, float(entry["threshold"] or 0.0), points)
    except StatsError as exc:
        entry["message"] = f"uplift of {entry['faster_arm']} over {entry['slower_arm']} at {entry['point']}: " \
                           f"cannot be judged ({exc})"
        return
    entry["n"] = as_int(after.get("n")) or 0
    _take_decision(entry, after)


def _judge_starts(entry: UpliftEntry, by_start: Mapping[int, list[tuple[float, float]]], rule: UpliftRule,
                  higher: bool) -> None:
    """The nested decision (start means; the first arm's effect fitted from 6 starts on) of a resident run at the
    ``rule``'s alpha (the caller's, split over the run's points), taken into ``entry`` as the campaign's own
    decision would be (:func:`_take_decision`): for a run that recorded no campaign settings, or a comparison of
    arms other than the campaign's own pair."""
    from pytest_p2p.campaign.adaptive import decision_json
    from pytest_p2p.campaign.schedule import sequence_label
    from pytest_p2p.stats import StatsError
    from pytest_p2p.stats.nested import decide_nested

    what = f"uplift of {entry['faster_arm']} over {entry['slower_arm']}"
    blocks = list(by_start.values())
    # the first arm alternates start by start: labelled as the campaign's own decision labels it
    orders = [sequence_label([str(entry["faster_arm"]), str(entry["slower_arm"])], s) for s in by_start]
    try:
        d = decide_nested(blocks, threshold=float(entry["threshold"] or 0.0), higher_is_better=higher,
                          alpha=min(rule.alpha_for(len(blocks)), 0.49), quantity=what, sequences=orders)
    except StatsError as exc:
        entry["message"] = f"{what} at {entry['point']}: cannot be judged ({exc})"
        return
    entry["n"] = len(blocks)
    _take_decision(entry, {**decision_json(d), "needed_unit": "starts"})


def _take_decision(entry: UpliftEntry, decision: Mapping[str, object]) -> None:
    """The campaign's own decision at this point, when it judged this pair of arms, replaces the re-judged one.

    Why: the campaign decides with its sequential looks' alpha; a report that judged again printed
    ``98 % CI +0.2 % .. +20.5 %`` in the terminal and ``95% CI +3.0 % .. +17.2 %`` in summary.md for
    one point (issue 26). One decision, one interval, one level, everywhere.
    """
    from pytest_p2p.stats.uplift_rule import read_decision

    d = read_decision(decision, str(entry["faster_arm"]), str(entry["slower_arm"]))
    if d is None:
        return
    entry["outcome"] = d.outcome
    entry["passed"] = {"pass": True, "fail": False}.get(d.outcome)
    entry["estimate"] = d.estimate
    entry["interval"] = [d.lower, d.upper] if d.lower is not None and d.upper is not None else None
    entry["level"] = d.level
    entry["pairs_needed"] = d.pairs_needed
    entry["needed_unit"] = d.needed_unit  # resident campaigns count starts
    if d.reason is not None:
        entry["message"] = d.reason


def build_summary(rd: RunReader) -> Summary:
    """The ``summary.json`` dict of a run directory (reads files only, writes nothing)."""
    meta = rd.read_run_meta()
    kind = str(meta["kind"]) if meta.get("kind") in UPLIFT_METRIC else "model"
    arm_names, points, n_reps = _expected(meta)
    on_disk = list(rd.scenarios())
    for arm, point in on_disk:
        if arm not in arm_names:
            arm_names.append(arm)
        if point not in points:
            points.append(point)
    points.sort(key=terminal.point_sort_key)
    _metric, _higher, _rule, excl = _uplift_settings(meta, kind)
    campaign = meta.get("campaign")
    expected = (point_reps(n_reps, campaign.get("windows") if isinstance(campaign, Mapping) else None, points)
                if n_reps is not None else {})

    scenarios: list[Scenario] = []
    missing: list[str] = []
    rep_data: dict[tuple[str, str], dict[int, JSONObject]] = {}
    agg_values: dict[tuple[str, str], dict[str, list[float]]] = {}
    transports: dict[str, set[str]] = {}
    for arm in arm_names:
        for point in points:
            name = f"{arm}-{point}"
            reps = rd.reps(arm, point) if (arm, point) in on_disk else {}
            aggregate = rd.read_scenario_file(arm, point, AGGREGATE) if (arm, point) in on_disk else None
            proof = rd.read_scenario_file(arm, point, PROOF) if (arm, point) in on_disk else None
            excluded: list[int] = [k for k, d in reps.items() if excl and _untrustworthy(d)]
            used = {k: d for k, d in reps.items() if k not in excluded}
            rep_data[(arm, point)] = used
            if n_reps is not None:
                wanted = expected[point] if point in expected else list(range(1, n_reps + 1))
                absent = [k for k in wanted if k not in reps]
                if len(absent) == len(wanted) and not aggregate:
                    missing.append(f"{name}: no rep completed (expected {len(wanted)})")
                elif absent and reps:
                    # "of 12" where the numbers run 1..12; a point with fewer pairs per start has gaps in them
                    of = f"of {n_reps} missing" if len(wanted) == n_reps else f"missing ({len(wanted)} expected)"
                    missing.append(f"{name}: run {', '.join(map(str, absent))} {of}")
            metrics: dict[str, Stat]
            energy: EnergyGroup
            flags: dict[str, list[int]]
            if reps:
                metrics, energy = _aggregate_reps(used)[:2] if used else ({}, {})
                _, _, flags = _aggregate_reps(reps)
                source = "run files"
            elif aggregate:
                metrics, energy, flags = _aggregate_file(aggregate)
                source = AGGREGATE
                agg_values[(arm, point)] = {k: list(v.get("values") or []) for k, v in metrics.items()}
            else:
                if n_reps is None:
                    missing.append(f"{name}: no rep completed")
                continue
            observed = _transport_of(proof)
            if observed:
                transports.setdefault(arm, set()).add(observed)
            scenarios.append({
                "arm": arm, "point": point, "reps": sorted(reps), "excluded_reps": excluded,
                "expected_reps": len(expected[point]) if point in expected else n_reps, "source": source,
                "metrics": metrics, "energy": energy, "flags": flags, "transport": observed,
            })
    derived = {m.split(":", 1)[0] for m in missing}
    for m in as_list(meta.get("missing")):
        text = m if isinstance(m, str) else str(m)
        hit = _META_MISSING_RE.match(text)
        if hit and hit.group("scenario") in derived:
            continue  # the campaign's "<arm>-<point> rep <k>", already said above from the files
        if text not in missing:
            missing.append(text)

    arms_meta: JSONObject = as_dict(arms) if isinstance(arms := meta.get("arms"), dict) else {a: {} for a in arm_names}
    transport: dict[str, TransportEntry] = {
        arm: {"expected": as_dict(arms_meta.get(arm)).get("expect_transport"),
              "observed": sorted(transports.get(arm, set()))}
        for arm in arm_names
    }
    summary: Summary = {
        "schema": SUMMARY_SCHEMA,
        "run_id": meta.get("run_id", rd.path.name),
        "rig": meta.get("rig"),
        "pair": as_dict(meta.get("pair")),
        "kind": kind,
        "simulated": bool(meta.get("simulated")),
        "status": meta.get("status", "unknown"),
        "missing": missing,
        "reps": n_reps,
        "schedule": meta.get("schedule"),
        "started_at": meta.get("started_at"),
        "finished_at": meta.get("finished_at"),
        "arms": arms_meta,
        "points": points,
        "transport": transport,
        "scenarios": scenarios,
        "uplift": _uplift(meta, kind, arm_names, rep_data, agg_values, points),
        "verdicts": None,
    }
    # a run killed outright never wrote its last status: on the host that wrote it, a writer that is gone says so
    # (the run's files are walked for their last write only where run.json says running)
    state = writer_state(meta, rd.last_write()) if meta.get("status") == "running" else None
    if state is not None:
        summary["status_note"] = state.text
        if state.gone:
            summary["status"] = "abandoned"
    return summary


def render_report(run_dir: str | Path, *, plots: bool = True) -> Rendered:
    """Rebuild ``summary.{json,csv,md}`` (and ``plots/`` unless ``plots=False``) of one run dir.

    Safe to call at any time, including on a run dir whose campaign died mid-way: the
    summary's ``missing`` list says which reps and scenarios are absent.
    """
    rd = RunReader.open(run_dir)
    summary = build_summary(rd)
    plot_paths: list[Path] = []
    notes: list[str] = []
    base = rd.path
    pair_key = str((summary.get("pair") or {}).get("key") or "")
    if plots:
        from pytest_p2p.report.plots import render_plots

        copy_result = optional_object(base.parent / "probes" / pair_key / "p2pcopy.json") if pair_key else None
        plot_paths, notes = render_plots(summary, base / PLOTS, rd.telemetry_files, copy_result=copy_result)
    proof = proof_for_run(base, summary)
    summary["proof"] = proof.to_dict()
    rendered = Rendered(
        run_dir=base,
        summary_json=atomic_write_json(base / "summary.json", summary),
        summary_csv=atomic_write_text(base / "summary.csv", csv_text(summary)),
        summary_md=atomic_write_text(base / "summary.md", md_text(summary, plot_paths, notes, base, proof)),
        plots=plot_paths,
        notes=notes,
        summary=summary,
    )
    return rendered
