"""The end of a campaign on disk: aggregates, the paired uplift and the final ``run.json``.

Runs after a complete campaign and equally after an interruption, a failure or a full
disk, with whatever was measured: a write that fails here is recorded in ``errors`` (and
turns ``complete`` into ``failed``) instead of hiding the original outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ..results.write import RunWriter
from .aggregate import aggregate, uplift_at
from .config import CampaignConfig
from .envinfo import versions
from .result import CampaignResult

if TYPE_CHECKING:
    from ..evidence.model import Evidence
    from ..stats import StartPrior


def _fail(result: CampaignResult, message: str) -> None:
    result.errors.append(message)
    if result.status == "complete":
        result.status = "failed"


def write_final(rd: RunWriter, result: CampaignResult, points: list[str], config: CampaignConfig, kind: str,
                evidence: Evidence | None, start_priors: Mapping[str, StartPrior] | None = None) -> None:
    """Fill ``result.aggregates``/``uplift`` and write ``aggregate.json`` per scenario and the final ``run.json``."""
    for arm in config.arms:
        for point in points:
            reps = result.rep_data.get((arm, point), {})
            if not reps:
                continue
            agg = aggregate(reps, config, kind)
            if point in result.decisions:
                agg["uplift_decision"] = result.decisions[point]
            result.aggregates[(arm, point)] = {"arm": arm, "point": point, **agg}
            try:
                rd.write_aggregate(arm, point, agg)
            except OSError as exc:  # disk full: run.json below still gets the truth if it can
                _fail(result, str(exc))
    if config.arm_b is not None:
        ks = list(range(1, result.reps + 1))
        for point in points:
            result.uplift[point] = uplift_at(result.rep_data.get((config.arm_a, point), {}),
                                             result.rep_data.get((config.arm_b, point), {}), config, kind, ks,
                                             (start_priors or {}).get(point))
    if result.simulated:
        result.notes.append("SIMULATED: stand-in server and/or simulated telemetry; not a measurement")
    nccl = next((p.get("nccl_version") for p in result.proofs.values() if p), None)
    try:
        rd.write_run_meta({
            "status": result.status, "missing": result.missing, "errors": result.errors, "reps": result.reps,
            "decisions": result.decisions,
            "rep_failures": [a.to_dict() for a in result.set_aside], "notes": result.notes,
            "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "versions": versions(evidence, nccl),
            "transport": {arm: (p or {}).get("transport") for arm, p in result.proofs.items()},
        })
    except OSError as exc:
        _fail(result, f"run.json could not be updated: {exc}")
