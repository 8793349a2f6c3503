"""Recorded evidence: a versioned JSON file written by ``python -m pytest_p2p snapshot``.

A snapshot lets CI (no GPU) run the very checks the rig runs, and lets a rig owner
attach "what the machine said" to a bug report or a baseline. The envelope is::

    {"schema": "pytest-p2p/snapshot", "version": 1, "recorded_by": "pytest-p2p 0.1.0",
     "evidence": { ... Evidence.to_dict() ... }}

Reading validates the envelope and every field's type, and names the field on error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import SnapshotError
from ..util import atomic_write_json
from .model import Evidence, evidence_from_dict

SCHEMA = "pytest-p2p/snapshot"
VERSION = 1

_OPT_INT = (int, type(None))
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))
_OPT_BOOL = (bool, type(None))

_READING = {"gen": _OPT_INT, "width": _OPT_INT}
_GPU_FIELDS: dict[str, Any] = {
    "index": (int,), "name": (str,), "uuid": _OPT_STR, "bus_id": (str,),
    "memory_total_mib": _OPT_INT, "memory_used_mib": _OPT_INT, "energy_mj": _OPT_INT, "power_w": _OPT_NUM,
    "power_limit_w": _OPT_NUM, "sm_clock_mhz": _OPT_INT, "mem_clock_mhz": _OPT_INT, "temperature_c": _OPT_INT,
    "pstate": _OPT_INT, "throttle_reasons": _OPT_INT, "cuda_index": _OPT_INT,
}
_LINK_FIELDS = {"link": (int,), "active": (bool,), "version": _OPT_INT, "remote_bus_id": _OPT_STR,
                "remote_type": _OPT_STR, "crc_errors": _OPT_INT, "replay_errors": _OPT_INT}
_PAIR_FIELDS = {"a": (int,), "b": (int,), "topology": _OPT_STR, "nvml_topology_level": _OPT_INT,
                "nvlinks_between": (int,), "p2p_read": _OPT_STR, "p2p_write": _OPT_STR, "p2p_nvlink": _OPT_STR,
                "p2p_atomics": _OPT_STR, "cuda_peer_ab": _OPT_BOOL, "cuda_peer_ba": _OPT_BOOL}
_TOP_FIELDS = {"source": (str,), "origin": (str,), "recorded_at": (str,), "host": (str,),
               "driver_version": _OPT_STR, "nvml_version": _OPT_STR, "cuda_driver_version": _OPT_INT,
               "gpus": (list,), "pairs": (list,), "notes": (list,), "simulated": (bool,)}


def envelope(evidence: Evidence) -> dict[str, Any]:
    return {"schema": SCHEMA, "version": VERSION, "recorded_by": f"pytest-p2p {__version__}",
            "evidence": evidence.to_dict()}


def save_snapshot(evidence: Evidence, path: str | Path) -> Path:
    return atomic_write_json(path, envelope(evidence))


def load_snapshot(path: str | Path, origin: str | None = None) -> Evidence:
    """Read a snapshot; ``origin`` (``--p2p-snapshot``, ...) is named in errors."""
    p = Path(path)
    label = str(p) if origin is None else f"{p} (from {origin})"
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SnapshotError(f"{label}: no such snapshot file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{label}: cannot read the snapshot: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{label}: not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    ev = evidence_from_envelope(data, label)
    ev.source = "snapshot"
    ev.origin = str(p)
    return ev


def evidence_from_envelope(data: Any, label: str) -> Evidence:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise SnapshotError(f"{label}: not a pytest-p2p snapshot (schema is {got!r}, expected {SCHEMA!r}); "
                            f"record one with 'python -m pytest_p2p snapshot --out FILE'")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SnapshotError(f"{label}: version: expected an integer, got {version!r}")
    if version > VERSION:
        raise SnapshotError(f"{label}: snapshot schema version {version} is newer than this pytest-p2p "
                            f"({__version__}) understands (up to {VERSION}); upgrade pytest-p2p to read it")
    if version < 1:
        raise SnapshotError(f"{label}: version: {version} is not a valid snapshot version")
    ev: Any = data.get("evidence")
    _check(ev, _TOP_FIELDS, label, "evidence")
    for i, g in enumerate(ev["gpus"]):
        path = f"evidence.gpus[{i}]"
        _check(g, {**_GPU_FIELDS, "pcie": (dict,), "nvlinks": (list,)}, label, path)
        pcie = g["pcie"]
        _check(pcie, {"idle": (dict,), "loaded": (dict, type(None)), "max": (dict,), "gpu_max": (dict,),
                      "replay_counter": _OPT_INT, "load_method": (str,)}, label, f"{path}.pcie")
        for key in ("idle", "loaded", "max", "gpu_max"):
            if pcie[key] is not None:
                _check(pcie[key], _READING, label, f"{path}.pcie.{key}")
        for j, link in enumerate(g["nvlinks"]):
            _check(link, _LINK_FIELDS, label, f"{path}.nvlinks[{j}]")
    indices: set[int] = set()
    for i, g in enumerate(ev["gpus"]):
        if g["index"] in indices:
            raise SnapshotError(f"{label}: evidence.gpus[{i}].index: GPU {g['index']} appears twice")
        indices.add(g["index"])
    seen: set[tuple[int, int]] = set()
    for i, p in enumerate(ev["pairs"]):
        _check(p, _PAIR_FIELDS, label, f"evidence.pairs[{i}]")
        for side in ("a", "b"):
            if p[side] not in indices:
                raise SnapshotError(f"{label}: evidence.pairs[{i}].{side}: GPU {p[side]} is not among the "
                                    f"snapshot's GPUs {sorted(indices)}")
        # lookups go by (lower, higher) index: a reversed or repeated pair would be unreachable or ambiguous
        if not p["a"] < p["b"] or (p["a"], p["b"]) in seen:
            raise SnapshotError(f"{label}: evidence.pairs[{i}]: expected each pair once with a < b, "
                                f"got a={p['a']}, b={p['b']}")
        seen.add((p["a"], p["b"]))
    return evidence_from_dict(ev)


def _check(obj: Any, fields: dict[str, Any], label: str, path: str) -> None:
    if not isinstance(obj, dict):
        raise SnapshotError(f"{label}: {path}: expected an object, got {type(obj).__name__}")
    for key, types in fields.items():
        if key not in obj:
            raise SnapshotError(f"{label}: {path}.{key}: missing")
        val = obj[key]
        if isinstance(val, bool) and bool not in types:
            raise SnapshotError(f"{label}: {path}.{key}: expected {_names(types)}, got {val!r}")
        if not isinstance(val, types):
            raise SnapshotError(f"{label}: {path}.{key}: expected {_names(types)}, got {val!r}")
    extra = set(obj) - set(fields)
    if extra:
        raise SnapshotError(f"{label}: {path}: unknown field(s) {sorted(extra)}")


def _names(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true/false", list: "a list",
             dict: "an object", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)
