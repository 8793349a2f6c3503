"""From rep files to scenario aggregates and the paired uplift per point.

Which reps count: only measurements. A rep whose server died, in which no request
completed, or whose load client saturated never reaches here (the runner sets it aside and re-runs it); a rep flagged by
telemetry (throttled, link downtrained) is kept on disk and dropped here when
``exclude_throttled`` is set — from *both* arms of its pair, so the pairing stays intact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from ..stats.nested import StartPrior, decide_nested, nested_model
from ..stats.summary import paired_uplift, summarize
from ..stats.tdist import StatsError
from .config import CampaignConfig
from .schedule import sequence_label

T = TypeVar("T")
Json = dict[str, object]
ENERGY_KEYS = ("tokens_per_joule", "joules_per_token", "avg_watts", "total_joules", "idle_total_watts")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _flags(data: Mapping[str, object]) -> Mapping[str, object]:
    f = data.get("flags")
    return f if isinstance(f, dict) else {}


def failure_reasons(data: Mapping[str, object], top: int = 10) -> str:
    """The load's most frequent failure reasons, ``"3x HTTP 500; 1x timeout"``, from ``error_summary``.

    Why not ``errors``: it holds one string per request (thousands on a big run), far too much
    for a message; the load result's ``error_summary`` already counts them (top ten).
    """
    summary = data.get("error_summary")
    counts: list[tuple[str, int]] = []
    if isinstance(summary, list):
        for row in summary:
            if isinstance(row, dict) and row.get("error"):
                n = _number(row.get("count"))
                counts.append((str(row["error"]), int(n) if n is not None else 1))
    else:  # an older load result: count its per-request errors here
        errors = data.get("errors")
        tally: dict[str, int] = {}
        for e in errors if isinstance(errors, list) else []:
            if e:
                tally[str(e)] = tally.get(str(e), 0) + 1
        counts = sorted(tally.items(), key=lambda kv: -kv[1])
    return "; ".join(f"{n}x {(e if len(e) <= 200 else e[:197] + '...')}" for e, n in counts[:top])


def not_measured(data: Mapping[str, object], kind: str) -> str | None:
    """Why a rep is not a measurement, or ``None`` when it is one.

    A model rep with no completed request is not one (its zeros would be averaged in); nor is
    one whose load client could not keep up (``client_saturated``): its latencies measured the
    client, not the server, and the arm with the faster server would look worse.
    """
    if kind != "model":
        return None
    completed = _number(data.get("completed"))
    if completed is None or completed <= 0:
        reasons = failure_reasons(data)
        return f"no request completed ({data.get('failed')} failed{'; ' + reasons if reasons else ''}): " \
               "not a measurement"
    if data.get("client_saturated") is True:
        return f"load client saturated: {data.get('client_saturation') or 'no reason recorded'}"
    return None


def is_measurement(data: Mapping[str, object], kind: str) -> bool:
    """See :func:`not_measured`."""
    return not_measured(data, kind) is None


def excluded(data: Mapping[str, object], config: CampaignConfig, kind: str) -> bool:
    """Dropped from aggregates and pairing: not a measurement, or flagged with ``exclude_throttled`` on."""
    if not is_measurement(data, kind):
        return True
    f = _flags(data)
    return config.exclude_throttled and bool(f.get("throttled") or f.get("downtrained"))


def aggregate(reps: Mapping[int, Mapping[str, object]], config: CampaignConfig, kind: str) -> Json:
    """``{metrics: {name: summary}, energy: {...}, flags: {...}}`` of one scenario (``aggregate.json``)."""
    kept = {k: d for k, d in sorted(reps.items()) if not excluded(d, config, kind)}
    names: list[str] = []
    for d in kept.values():
        for key, val in d.items():
            if _number(val) is not None and key not in names:
                names.append(key)
    metrics: Json = {}
    for n in names:
        values = [v for d in kept.values() if (v := _number(d.get(n))) is not None]
        metrics[n] = summarize(values)
    energy: Json = {}
    for key in ENERGY_KEYS:
        vals = [v for d in kept.values() if isinstance(e := d.get("energy"), dict)
                and (v := _number(e.get(key))) is not None]
        if vals:
            energy[key] = summarize(vals)
    methods = sorted({str(e.get("method")) for d in reps.values() if isinstance(e := d.get("energy"), dict)})
    energy["method"] = ", ".join(methods) if methods else None
    energy["simulated"] = any(bool(e.get("simulated")) for d in reps.values() if isinstance(e := d.get("energy"), dict))
    flags = {
        "throttled_reps": sorted(k for k, d in reps.items() if _flags(d).get("throttled")),
        "downtrained_reps": sorted(k for k, d in reps.items() if _flags(d).get("downtrained")),
        "excluded_reps": sorted(set(reps) - set(kept)),
    }
    return {"metrics": metrics, "energy": energy, "flags": flags}


def paired_values(a_reps: Mapping[int, Mapping[str, object]], b_reps: Mapping[int, Mapping[str, object]],
                  metric: str, config: CampaignConfig, kind: str,
                  reps: list[int]) -> tuple[list[float | None], list[float | None]]:
    """Arm A's and arm B's ``metric`` by rep; ``None`` on both sides where either rep is missing or excluded."""
    av: list[float | None] = []
    bv: list[float | None] = []
    for k in reps:
        da, db = a_reps.get(k), b_reps.get(k)
        va = _number(da.get(metric)) if da is not None and not excluded(da, config, kind) else None
        vb = _number(db.get(metric)) if db is not None and not excluded(db, config, kind) else None
        ok = va is not None and vb is not None
        av.append(va if ok else None)
        bv.append(vb if ok else None)
    return av, bv


def uplift_at(a_reps: Mapping[int, Mapping[str, object]], b_reps: Mapping[int, Mapping[str, object]],
              config: CampaignConfig, kind: str, reps: list[int], prior: StartPrior | None = None) -> Json:
    """The paired uplift of arm A over arm B on the campaign's metric (``estimate``/``ci95``/``n``...);
    ``prior``: the start spread from earlier nights this point's decision may borrow (resident arms)."""
    metric = config.metric(kind)
    higher = config.direction(kind) == "higher"
    av, bv = paired_values(a_reps, b_reps, metric, config, kind, reps)
    try:
        up: Json = dict(paired_uplift(av, bv, higher_is_better=higher))
        starts = [start_of(a_reps.get(k)) for k in reps]
        if any(s is not None for s in starts):
            launches = {s: launch_of(a_reps.get(k)) for s, k in zip(starts, reps, strict=True) if s is not None}
            up.update(_nested_interval(av, bv, starts, higher, prior, launches, config.arms))
    except StatsError as exc:
        up = {"estimate": None, "ci95": None, "n": 0, "error": str(exc)}
    return {**up, "metric": metric, "faster_arm": config.arm_a, "slower_arm": config.arm_b}


def start_of(d: Mapping[str, object] | None) -> int | None:
    """The server start a rep's window ran in (resident arms, ``meta.start``); ``None`` for a restart-per-rep rep."""
    meta = d.get("meta") if d is not None else None
    got = meta.get("start") if isinstance(meta, dict) else None
    return got if isinstance(got, int) and not isinstance(got, bool) else None


def launch_of(d: Mapping[str, object] | None) -> int | None:
    """The launch that made the server start of a rep's window (``meta.launch``: starts made at once share one);
    ``None`` where the rep file predates it or ran in no launch (restart per rep)."""
    meta = d.get("meta") if d is not None else None
    got = meta.get("launch") if isinstance(meta, dict) else None
    return got if isinstance(got, int) and not isinstance(got, bool) else None


def launch_labels(launch_of_start: Mapping[int, int | None]) -> list[object] | None:
    """One launch label per start, in the mapping's order, for ``decide_nested(launches=)``: the campaign's
    launch number, or the start itself where a rep file has none (a launch of its own); ``None`` when every
    start was a launch of its own (nothing for the launch guard to check)."""
    labels: list[object] = [("launch", got) if got is not None else ("start", s) for s, got in launch_of_start.items()]
    return labels if len(set(labels)) < len(labels) else None


def group_by_start(items: Iterable[tuple[int | None, T]]) -> dict[int, list[T]]:
    """``{start: [item, ...]}`` in start order; items of no start (a restart-per-rep rep) are left out."""
    out: dict[int, list[T]] = {}
    for start, item in items:
        if start is not None:
            out.setdefault(start, []).append(item)
    return dict(sorted(out.items()))


def _nested_interval(av: list[float | None], bv: list[float | None], starts: list[int | None],
                     higher: bool, prior: StartPrior | None = None,
                     launches: Mapping[int, int | None] | None = None, arms: Sequence[str] = ()) -> Json:
    """Windows nested in server starts: the estimate and 95 % interval on the start means (the start is the
    unit, :func:`pytest_p2p.stats.decide_nested`), not on windows as if each had its own start; with the
    start spread from earlier nights where the decision borrows it (same guard), on the launch means where
    the launch guard fires (starts made at once), and with the first arm's effect fitted where the decision
    fits it (``arms``: the campaign's, whose order alternates start by start: :func:`~.schedule.sequence_label`),
    so the two intervals agree."""
    groups = group_by_start((s, (a, b)) for a, b, s in zip(av, bv, starts, strict=True)
                            if a is not None and b is not None)
    blocks = list(groups.values())
    labels = launch_labels({s: (launches or {}).get(s) for s in groups})
    seq = [sequence_label(arms, s) for s in groups] if arms else None
    d = decide_nested(blocks, threshold=0.0, higher_is_better=higher, alpha=0.025, prior=prior, launches=labels,
                      sequences=seq)
    ok = d.n >= 2 and math.isfinite(d.lower) and math.isfinite(d.upper)
    model = nested_model(blocks, higher_is_better=higher, prior=prior, launches=labels, sequences=seq)
    fitted = model.fit.status == "fitted"
    own = "df = starts - 2, the first arm's effect fitted" if fitted else "df = starts - 1"
    df = (f"{own} + {prior.df:.3g} from a start spread of {prior.nights} earlier nights"
          if model.prior.status == "used" and prior is not None else own)
    if model.launch.status == "fired":
        df = "the launch guard fired: df = launches - 1 on the launch means"
    mean = "each order's start means, the orders weighed alike" if fitted else "start means"
    return {"estimate": d.estimate if math.isfinite(d.estimate) else None,
            "ci95": [d.lower, d.upper] if ok else None, "starts": d.n,
            "kind": f"nested: windows within server starts; geometric mean of {mean}, t interval on "
                    f"start means ({df})"}
