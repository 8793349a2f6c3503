"""The fingerprint of a campaign run: everything that could explain a change in its numbers.

A baseline comparison is only useful if it can say *why* the numbers moved, so every
run records the facts that plausibly matter — the pair's GPUs (by bus id and UUID, never
by index alone), their link state under load and at best, topology, NVLink and P2P
status, driver/CUDA/NCCL/torch/vLLM versions, the kernel, the model and server args,
each arm's effective environment, the transport NCCL actually chose, throttling seen
during the reps, the rig file digest and the test repo's commit. The fingerprint is read
from the results directory (the contract with the campaign stage), never from live objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ResultsError

FINGERPRINT_VERSION = 1
VERSION_KEYS = ("driver", "cuda_driver", "nccl", "torch", "vllm", "plugin", "python", "kernel", "git_commit")


def read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{path}: {what} is missing (is this a pytest-p2p results directory?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: {what} is not readable JSON: {exc}") from None


def load_run(run_dir: Path) -> dict[str, Any]:
    """``run.json`` with the fields the verdict relies on checked."""
    run = read_json(run_dir / "run.json", "run.json")
    if not isinstance(run, dict):
        raise ResultsError(f"{run_dir / 'run.json'}: expected a JSON object")
    for key in ("run_id", "rig", "pair"):
        if key not in run:
            raise ResultsError(f"{run_dir / 'run.json'}: field {key!r} is missing")
    gpus = run["pair"].get("gpus") if isinstance(run["pair"], dict) else None
    if not isinstance(gpus, list) or len(gpus) != 2:
        raise ResultsError(f"{run_dir / 'run.json'}: pair.gpus must list the pair's two GPUs")
    return run


def load_evidence_dict(run_dir: Path) -> dict[str, Any] | None:
    """The evidence snapshot of the run as a plain dict, or None when the run has none."""
    path = run_dir / "env" / "snapshot.json"
    if not path.exists():
        return None
    from ..evidence.snapshot import load_snapshot

    return load_snapshot(path).to_dict()  # a bad snapshot raises SnapshotError naming the file and field


def pair_ident(run: Mapping[str, Any]) -> str:
    """The persisted identity of a pair: its bus ids in order (slots, so a swapped GPU is a change)."""
    from ..util import normalize_bus_id

    ids = []
    for g in run["pair"]["gpus"]:
        bus = g.get("bus_id")
        ids.append(normalize_bus_id(bus) if bus else str(g.get("uuid")))
    return "+".join(sorted(ids))


def _reading(d: Any) -> dict[str, int | None] | None:
    if not isinstance(d, dict):
        return None
    return {"gen": d.get("gen"), "width": d.get("width")}


def _label(r: dict[str, int | None] | None) -> str | None:
    if r is None:
        return None
    g = f"Gen{r['gen']}" if r.get("gen") is not None else "Gen?"
    w = f"x{r['width']}" if r.get("width") is not None else "x?"
    return f"{g} {w}"


def _links(evidence: Mapping[str, Any] | None, run: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if evidence is None:
        return out
    from ..util import normalize_bus_id

    by_bus = {}
    for g in evidence.get("gpus", []):
        try:
            by_bus[normalize_bus_id(g["bus_id"])] = g
        except (KeyError, ValueError, TypeError):
            continue
    for pg in run["pair"]["gpus"]:
        try:
            bus = normalize_bus_id(pg["bus_id"])
        except (KeyError, ValueError, TypeError):
            continue
        g = by_bus.get(bus)
        if g is None:
            continue
        pcie = g.get("pcie") or {}
        loaded, mx = _reading(pcie.get("loaded")), _reading(pcie.get("max"))
        active = [lk for lk in g.get("nvlinks", []) if lk.get("active")]
        versions = sorted({lk.get("version") for lk in active if lk.get("version") is not None})
        out[bus] = {
            "index": g.get("index"),
            "loaded": _label(loaded),
            "max": _label(mx),
            "loaded_gen": loaded and loaded["gen"],
            "loaded_width": loaded and loaded["width"],
            "max_gen": mx and mx["gen"],
            "max_width": mx and mx["width"],
            "nvlinks_active": len(active),
            "nvlink_version": versions[-1] if versions else None,
        }
    return out


def _pair_facts(evidence: Mapping[str, Any] | None, run: Mapping[str, Any]) -> dict[str, Any]:
    if evidence is None:
        return {}
    idx = sorted(int(g["index"]) for g in run["pair"]["gpus"] if g.get("index") is not None)
    for p in evidence.get("pairs", []):
        if len(idx) == 2 and [p.get("a"), p.get("b")] == idx:
            return {"topology": p.get("topology"), "nvlinks_between": p.get("nvlinks_between"),
                    "p2p_read": p.get("p2p_read"), "p2p_write": p.get("p2p_write")}
    return {}


def _scenario_files(run_dir: Path) -> list[Path]:
    root = run_dir / "scenarios"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def build_fingerprint(run_dir: str | Path) -> dict[str, Any]:
    """Read a results directory into a JSON-serialisable fingerprint (see module doc)."""
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    evidence = load_evidence_dict(run_dir)
    cmdline_path = run_dir / "env" / "kernel_cmdline.txt"
    cmdline = cmdline_path.read_text(encoding="utf-8", errors="replace").strip() if cmdline_path.exists() else None
    versions = run.get("versions") or {}
    transport: dict[str, dict[str, Any]] = {}
    throttled: dict[str, list[int]] = {}
    downtrained: dict[str, list[int]] = {}
    for sdir in _scenario_files(run_dir):
        proof_path = sdir / "transport_proof.json"
        agg_path = sdir / "aggregate.json"
        if proof_path.exists():
            proof = read_json(proof_path, "transport proof")
            arm = sdir.name.rsplit("-", 1)[0]
            if isinstance(proof, dict):
                transport.setdefault(arm, {"transport": proof.get("transport"),
                                           "nccl_version": proof.get("nccl_version")})
        if agg_path.exists():
            agg = read_json(agg_path, "scenario aggregate")
            flags = agg.get("flags") or {} if isinstance(agg, dict) else {}
            if flags.get("throttled_reps"):
                throttled[sdir.name] = list(flags["throttled_reps"])
            if flags.get("downtrained_reps"):
                downtrained[sdir.name] = list(flags["downtrained_reps"])
    nccl = versions.get("nccl")
    if nccl is None:
        seen = sorted({str(t["nccl_version"]) for t in transport.values() if t.get("nccl_version")})
        nccl = ",".join(seen) or None
    server = run.get("server")
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "run_id": run["run_id"],
        "rig": run["rig"],
        "rig_digest": run.get("rig_digest"),
        "kind": run.get("kind"),
        "simulated": bool(run.get("simulated", False) or (evidence or {}).get("simulated", False)),
        "started_at": run.get("started_at"),
        "pair": {
            "key": run["pair"].get("key"),
            "ident": pair_ident(run),
            "gpus": [{k: g.get(k) for k in ("index", "bus_id", "uuid", "name")} for g in run["pair"]["gpus"]],
        },
        "versions": {**{k: versions.get(k) for k in VERSION_KEYS}, "nccl": nccl,
                     "driver": versions.get("driver") or (evidence or {}).get("driver_version")},
        "kernel_cmdline": cmdline,
        "server": None if not isinstance(server, dict) else {
            "model": server.get("model"), "args": server.get("args"), "flags": server.get("flags")},
        "arms": {name: {"env": dict(a.get("env") or {}), "expect_transport": a.get("expect_transport"),
                        "custom_all_reduce": a.get("custom_all_reduce")}
                 for name, a in (run.get("arms") or {}).items() if isinstance(a, dict)},
        "transport": transport,
        "links": _links(evidence, run),
        "pair_facts": _pair_facts(evidence, run),
        "throttled": throttled,
        "downtrained": downtrained,
    }


def comparability(fp: Mapping[str, Any], arm: str) -> dict[str, Any]:
    """What must be equal for a scenario of ``arm`` to be compared at all (model, args, arm definition).

    The arm's *environment* is deliberately not here: an env change (``NCCL_P2P_LEVEL=LOC``
    under the same arm name) is a candidate cause that attribution reports, not a new arm.
    """
    server = fp.get("server") or {}
    arm_def = (fp.get("arms") or {}).get(arm) or {}
    return {
        "kind": fp.get("kind"),
        "simulated": bool(fp.get("simulated")),
        "model": server.get("model"),
        "server args": server.get("args"),
        "arm expect_transport": arm_def.get("expect_transport"),
        "arm custom_all_reduce": arm_def.get("custom_all_reduce"),
    }


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values (they are compared whole)."""
    out: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        for k, val in obj.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(val, Mapping) and val:
                out.update(flatten(val, key))
            else:
                out[key] = val
    else:
        out[prefix] = obj
    return out
