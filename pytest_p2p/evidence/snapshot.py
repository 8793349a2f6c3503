"""Recorded evidence: a versioned JSON file written by ``python -m pytest_p2p snapshot``.

A snapshot lets CI (no GPU) run the very checks the rig runs, and lets a rig owner
attach "what the machine said" to a bug report or a baseline. The envelope is::

    {"schema": "pytest-p2p/snapshot", "version": 1, "recorded_by": "pytest-p2p 0.1.0",
     "evidence": { ... Evidence.to_dict() ... }}

Reading validates the envelope and every field's type, and names the field on error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from .. import __version__
from ..errors import SnapshotError
from ..jsontypes import JSONObject, JSONValue, as_list
from ..util import atomic_write_json
from .model import Evidence, EvidenceDict, evidence_from_dict

SCHEMA = "pytest-p2p/snapshot"
VERSION = 1

Types = tuple[type, ...]  # the types a field may hold (``isinstance`` form; bool is never an integer here)

_OPT_INT = (int, type(None))
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))
_OPT_BOOL = (bool, type(None))

_READING: dict[str, Types] = {"gen": _OPT_INT, "width": _OPT_INT}
_GPU_FIELDS: dict[str, Types] = {
    "index": (int,), "name": (str,), "uuid": _OPT_STR, "bus_id": (str,),
    "memory_total_mib": _OPT_INT, "memory_used_mib": _OPT_INT, "energy_mj": _OPT_INT, "power_w": _OPT_NUM,
    "power_limit_w": _OPT_NUM, "sm_clock_mhz": _OPT_INT, "mem_clock_mhz": _OPT_INT, "temperature_c": _OPT_INT,
    "pstate": _OPT_INT, "throttle_reasons": _OPT_INT, "cuda_index": _OPT_INT,
}
# Fields added after version 1 was published: absent in older recordings, so optional.
_GPU_OPTIONAL: dict[str, Types] = {"mig_mode": _OPT_BOOL}
MAX_BYTES = 16 * 2**20  # a 64-GPU machine's snapshot is well under 1 MiB
MAX_DIGITS = 20  # every integer in a snapshot fits in 64 bits
_LINK_FIELDS: dict[str, Types] = {"link": (int,), "active": (bool,), "version": _OPT_INT, "remote_bus_id": _OPT_STR,
                "remote_type": _OPT_STR, "crc_errors": _OPT_INT, "replay_errors": _OPT_INT}
_PAIR_FIELDS: dict[str, Types] = {"a": (int,), "b": (int,), "topology": _OPT_STR, "nvml_topology_level": _OPT_INT,
                "nvlinks_between": (int,), "p2p_read": _OPT_STR, "p2p_write": _OPT_STR, "p2p_nvlink": _OPT_STR,
                "p2p_atomics": _OPT_STR, "cuda_peer_ab": _OPT_BOOL, "cuda_peer_ba": _OPT_BOOL}
_TOP_FIELDS: dict[str, Types] = {"source": (str,), "origin": (str,), "recorded_at": (str,), "host": (str,),
               "driver_version": _OPT_STR, "nvml_version": _OPT_STR, "cuda_driver_version": _OPT_INT,
               "gpus": (list,), "pairs": (list,), "notes": (list,), "simulated": (bool,)}


DEMO_NAME = "h200x2-nvlink.snapshot.json"


def bundled_demo() -> Path:
    """The snapshot shipped inside the package (our 2x H200 NVLink machine); ``--snapshot demo`` names it."""
    from importlib import resources

    return Path(str(resources.files("pytest_p2p") / "demo" / DEMO_NAME))


def is_bundled_demo(evidence: Evidence) -> bool:
    """Whether ``evidence`` is the bundled demo recording (replayed because no GPU answered, or named)."""
    if evidence.simulated:
        return True
    try:
        return evidence.source == "snapshot" and Path(evidence.origin).resolve() == bundled_demo().resolve()
    except (OSError, ValueError):
        return False


def snapshot_path(name: str) -> Path:
    """``demo`` is the bundled snapshot; anything else is a path."""
    return bundled_demo() if name == "demo" else Path(name)


def envelope(evidence: Evidence) -> JSONObject:
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
    data = parse_json(text, label)
    ev = evidence_from_envelope(data, label)
    ev.source = "snapshot"
    ev.origin = str(p)
    return ev


class _BadNumber(ValueError):
    pass


def _parse_int(token: str) -> int:
    if len(token.lstrip("-")) > MAX_DIGITS:
        raise _BadNumber(f"an integer of {len(token)} digits (at most {MAX_DIGITS} in a snapshot)")
    return int(token)


def _parse_constant(token: str) -> float:
    raise _BadNumber(f"{token} is not a number a snapshot can hold")


def parse_json(text: str, label: str) -> JSONValue:
    """JSON text to Python, bounded: size, nesting, integer length and NaN/Infinity are :class:`SnapshotError`."""
    if len(text) > MAX_BYTES:
        raise SnapshotError(f"{label}: {len(text)} characters is too large for a snapshot (limit {MAX_BYTES})")
    try:
        return json.loads(text, parse_int=_parse_int, parse_constant=_parse_constant)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{label}: not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except _BadNumber as exc:
        raise SnapshotError(f"{label}: {exc}") from None
    except RecursionError:
        raise SnapshotError(f"{label}: JSON nested too deeply for a snapshot") from None


def evidence_from_envelope(data: object, label: str) -> Evidence:
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
    ev = _check(data.get("evidence"), _TOP_FIELDS, label, "evidence")
    if not ev["gpus"]:
        raise SnapshotError(f"{label}: evidence.gpus: the snapshot holds no GPU; record one on a machine whose "
                            f"driver sees its GPUs ('nvidia-smi' lists them)")
    gpu_indices: list[int] = []
    for i, raw_gpu in enumerate(as_list(ev["gpus"])):
        path = f"evidence.gpus[{i}]"
        g = _check(raw_gpu, {**_GPU_FIELDS, "pcie": (dict,), "nvlinks": (list,)}, label, path, _GPU_OPTIONAL)
        index = g["index"]
        if not isinstance(index, int) or not 0 <= index <= 1023:  # an integer: _check said so
            raise SnapshotError(f"{label}: {path}.index: expected 0..1023, got {index}")
        gpu_indices.append(index)
        pcie = _check(g["pcie"], {"idle": (dict,), "loaded": (dict, type(None)), "max": (dict,), "gpu_max": (dict,),
                                  "replay_counter": _OPT_INT, "load_method": (str,)}, label, f"{path}.pcie")
        for key in ("idle", "loaded", "max", "gpu_max"):
            if pcie[key] is not None:
                _check(pcie[key], _READING, label, f"{path}.pcie.{key}")
        for j, link in enumerate(as_list(g["nvlinks"])):
            _check(link, _LINK_FIELDS, label, f"{path}.nvlinks[{j}]")
    indices: set[int] = set()
    for i, index in enumerate(gpu_indices):
        if index in indices:
            raise SnapshotError(f"{label}: evidence.gpus[{i}].index: GPU {index} appears twice")
        indices.add(index)
    seen: set[tuple[object, object]] = set()
    for i, raw_pair in enumerate(as_list(ev["pairs"])):
        p = _check(raw_pair, _PAIR_FIELDS, label, f"evidence.pairs[{i}]")
        for side in ("a", "b"):
            if p[side] not in indices:
                raise SnapshotError(f"{label}: evidence.pairs[{i}].{side}: GPU {p[side]} is not among the "
                                    f"snapshot's GPUs {sorted(indices)}")
        # lookups go by (lower, higher) index: a reversed or repeated pair would be unreachable or ambiguous
        a, b = p["a"], p["b"]  # integers: _check said so
        if not (isinstance(a, int) and isinstance(b, int) and a < b) or (a, b) in seen:
            raise SnapshotError(f"{label}: evidence.pairs[{i}]: expected each pair once with a < b, "
                                f"got a={a}, b={b}")
        seen.add((a, b))
    # every field of the tree has now been checked against the tables above, which mirror EvidenceDict
    return evidence_from_dict(cast(EvidenceDict, ev))


def _check(obj: object, fields: Mapping[str, Types], label: str, path: str,
           optional: Mapping[str, Types] | None = None) -> JSONObject:
    """``obj`` as an object whose every field has one of its listed types; :class:`SnapshotError` naming the first
    that does not (or is missing, or unknown)."""
    if not isinstance(obj, dict):
        raise SnapshotError(f"{label}: {path}: expected an object, got {type(obj).__name__}")
    allowed = {**fields, **(optional or {})}
    for key, types in allowed.items():
        if key not in obj:
            if key in fields:
                raise SnapshotError(f"{label}: {path}.{key}: missing")
            continue
        val = obj[key]
        if (isinstance(val, bool) and bool not in types) or not isinstance(val, types):
            raise SnapshotError(f"{label}: {path}.{key}: expected {_names(types)}, got {_show(val)}")
    extra = set(obj) - set(allowed)
    if extra:
        names = sorted(str(k)[:40] for k in extra)
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        raise SnapshotError(f"{label}: {path}: unknown field(s) {names[:5]}{more}")
    return obj


def _show(value: object) -> str:
    """A bad value, short: a huge nested value must not be rendered whole into an error message."""
    if isinstance(value, (dict, list)):
        return f"{'an object' if isinstance(value, dict) else 'a list'} of {len(value)} item(s)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _names(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true/false", list: "a list",
             dict: "an object", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)
