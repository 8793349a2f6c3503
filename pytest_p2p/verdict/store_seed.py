"""A p2p-bench results directory (the seed report's layout) as one run of the baseline store.

Why: rig owners arrive with p2p-bench results and want them as their first baseline
(``python -m pytest_p2p baseline save DIR``), but that layout has no ``run.json`` and no
evidence snapshot. :mod:`pytest_p2p.seedlayout` reads it as it is on disk; this module
turns that into what :meth:`.store.Store.save` keeps: a run record, a fingerprint of the
same shape as :func:`.fingerprint.build_fingerprint` writes (only what the directory
states; nothing guessed), and one metric row per scenario metric with the SAMPLE std
(p2p-bench writes the population std; :func:`~pytest_p2p.seedlayout.seed_metrics` converts).

Identity: the run id is ``seed-<directory name>`` (saving the same directory twice stores
it once); the rig is ``p2p-bench``; the pair is the ``CUDA_VISIBLE_DEVICES`` of its
scenarios, identified by bus id from ``env/p2p_evidence.json`` where it lists the GPUs.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from pathlib import Path

from ..jsontypes import JSONObject, as_dict
from ..seedlayout import SeedRun, read_seed_run, seed_metrics
from .fingerprint import FINGERPRINT_VERSION, VERSION_KEYS, ArmFacts, Fingerprint, TransportFacts
from .store_base import MetricRow

SEED_RIG = "p2p-bench"
_DATE_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})")


class SeedFingerprint(Fingerprint):
    """A fingerprint of the same shape, saying which p2p-bench directory it was read from."""

    source: str


def _pair_indices(run: SeedRun) -> list[int]:
    for sc in run.scenarios:
        env = (sc.server or {}).get("env")
        visible = env.get("CUDA_VISIBLE_DEVICES") if isinstance(env, dict) else None
        if isinstance(visible, str):
            idx = [int(x) for x in visible.split(",") if x.strip().isdigit()]
            if len(idx) == 2:
                return idx
    return []


def _gpus(run: SeedRun, indices: list[int]) -> list[JSONObject]:
    """The pair's GPUs with bus ids where the evidence lists them; else a name that says what is unknown."""
    order = (run.evidence or {}).get("device_order")
    listed = order.get("all_gpus") if isinstance(order, dict) else None
    by_index = {g.get("index"): g for g in listed if isinstance(g, dict)} if isinstance(listed, list) else {}
    if len(indices) != 2:
        return [{"index": None, "bus_id": None, "uuid": f"{run.path.name}:gpu-{k} (not recorded)", "name": None}
                for k in ("a", "b")]
    out: list[JSONObject] = []
    for i in indices:
        g = by_index.get(i) or {}
        out.append({"index": i, "bus_id": g.get("bus_id"), "name": g.get("name"),
                    "uuid": None if g.get("bus_id") else f"{run.path.name}:gpu{i} (no bus id recorded)"})
    return out


def _transport(run: SeedRun) -> dict[str, TransportFacts]:
    out: dict[str, TransportFacts] = {}
    for sc in run.scenarios:
        proof = sc.transport
        if proof is None or sc.arm in out:
            continue
        used = "P2P" if proof.get("nccl_used_p2p") else "SHM" if proof.get("nccl_used_shm") else None
        out[sc.arm] = {"transport": used, "nccl_version": proof.get("nccl_version")}
    return out


def seed_record(path: str | Path) -> tuple[JSONObject, SeedFingerprint, list[MetricRow]]:
    """``(run, fingerprint, rows)`` for :meth:`.store.Store.save`; a bad file is a ResultsError naming it."""
    run = read_seed_run(path)
    name = run.path.resolve().name
    indices = _pair_indices(run)
    gpus = _gpus(run, indices)
    key = "-".join(f"gpu{i}" for i in indices) if indices else "unknown pair"
    date = _DATE_RE.match(name)
    run_id, started_at = f"seed-{name}", date.group(1) if date else None
    record: JSONObject = {"run_id": run_id, "rig": SEED_RIG, "pair": {"key": key, "gpus": gpus},
                          "kind": "model", "started_at": started_at, "status": "complete", "simulated": False}
    transport = _transport(run)
    first: Mapping[str, object] = (run.scenarios[0].server or {}) if run.scenarios else {}
    arms: dict[str, ArmFacts] = {}
    for sc in run.scenarios:
        env = (sc.server or {}).get("env")
        proof = transport.get(sc.arm)
        arms.setdefault(sc.arm, {"env": dict(env) if isinstance(env, dict) else {},
                                 "expect_transport": proof["transport"] if proof is not None else None,
                                 "custom_all_reduce": (sc.transport or {}).get("custom_all_reduce")})
    versions = as_dict((run.evidence or {}).get("versions"))
    nccl = ",".join(sorted({str(t["nccl_version"]) for t in transport.values() if t.get("nccl_version")})) or None
    from .fingerprint import pair_ident

    fingerprint: SeedFingerprint = {
        "fingerprint_version": FINGERPRINT_VERSION, "run_id": run_id, "rig": SEED_RIG,
        "rig_digest": None, "rig_file_digest": None, "kind": "model", "simulated": False, "started_at": started_at,
        "source": f"p2p-bench results directory {name} (seed layout)",
        "pair": {"key": key, "ident": pair_ident(record),
                 "gpus": [{k: g.get(k) for k in ("index", "bus_id", "uuid", "name")} for g in gpus]},
        "versions": {**{k: None for k in VERSION_KEYS}, "nccl": nccl, "driver": versions.get("driver_version")},
        "kernel_cmdline": None,
        "server": {"model": first.get("model"), "args": first.get("args"), "flags": first.get("flags"),
                   "load": None},  # the seed's harness does not record its request shape: unknown, as for old runs
        "arms": arms,
        "transport": transport, "links": {}, "pair_facts": {}, "throttled": {}, "downtrained": {},
    }
    rows = [MetricRow(arm=m.arm, point=m.point, metric=m.metric, n=m.n, mean=m.mean, std=m.std,
                      median=statistics.median(m.values) if m.values else None, values=list(m.values))
            for m in seed_metrics(run)]
    return record, fingerprint, rows
