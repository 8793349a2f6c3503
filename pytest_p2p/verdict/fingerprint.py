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

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from ..errors import ResultsError
from ..jsontypes import JSONObject, JSONValue, as_dict, as_list
from ..results.layout import AGGREGATE, PROOF
from ..results.read import optional_object, run_record, scenario_dirs

if TYPE_CHECKING:
    from ..evidence.model import Evidence, PcieReading

FINGERPRINT_VERSION = 1
VERSION_KEYS = ("driver", "cuda_driver", "nccl", "torch", "vllm", "plugin", "python", "kernel", "git_commit")


class PairIdentity(TypedDict):
    key: JSONValue  # run.json's pair key, as written
    ident: str  # :func:`pair_ident`
    gpus: list[JSONObject]  # index, bus_id, uuid and name of each GPU, as run.json states them


class ServerFacts(TypedDict):
    model: JSONValue
    args: JSONValue
    flags: JSONValue
    load: JSONValue  # the requests' shape (ModelBackend.load_shape); None in runs saved before 2026-11-27


class ArmFacts(TypedDict):
    env: JSONObject
    expect_transport: JSONValue
    custom_all_reduce: JSONValue


class TransportFacts(TypedDict):
    transport: JSONValue  # from the arm's transport proof
    nccl_version: JSONValue


class LinkFacts(TypedDict):
    """One GPU of the pair in the evidence snapshot (keyed by its bus id)."""

    index: int
    loaded: str | None  # "Gen4 x16"; None when it was not read under load
    max: str | None
    loaded_gen: int | None
    loaded_width: int | None
    max_gen: int | None
    max_width: int | None
    nvlinks_active: int
    nvlink_version: int | None


class PairFacts(TypedDict, total=False):
    """What the evidence says about the pair (empty when it does not list the pair)."""

    topology: str | None
    nvlinks_between: int
    p2p_read: str | None
    p2p_write: str | None


class Fingerprint(TypedDict):
    """What :func:`build_fingerprint` writes (a stored one is read back as plain JSON)."""

    fingerprint_version: int
    run_id: str
    rig: str
    rig_digest: JSONValue  # what the rig file says (plugin.rig.content_digest); its bytes' digest in older runs
    rig_file_digest: JSONValue  # the rig file's bytes (None in runs saved before content digests)
    kind: str | None
    simulated: bool
    started_at: JSONValue
    pair: PairIdentity
    versions: JSONObject  # VERSION_KEYS
    kernel_cmdline: str | None
    server: ServerFacts | None
    arms: dict[str, ArmFacts]
    transport: dict[str, TransportFacts]
    links: dict[str, LinkFacts]
    pair_facts: PairFacts
    throttled: dict[str, list[JSONValue]]  # scenario -> flagged reps
    downtrained: dict[str, list[JSONValue]]


def load_evidence(run_dir: Path) -> Evidence | None:
    """The evidence snapshot of the run, or None when the run has none."""
    path = run_dir / "env" / "snapshot.json"
    if not path.exists():
        return None
    from ..evidence.snapshot import load_snapshot

    return load_snapshot(path)  # a bad snapshot raises SnapshotError naming the file and field


def pair_gpus(run: Mapping[str, object]) -> list[JSONObject]:
    """``run["pair"]["gpus"]``: the GPUs of the pair as run.json (or a store record) lists them."""
    pair = run["pair"]
    listed = pair["gpus"] if isinstance(pair, dict) else None
    gpus = [g for g in listed if isinstance(g, dict)] if isinstance(listed, list) else []
    if not isinstance(listed, list) or len(gpus) != len(listed):
        raise ResultsError(f"run {run.get('run_id')!r}: pair.gpus must list the pair's GPUs as objects")
    return gpus


def pair_ident(run: Mapping[str, object]) -> str:
    """The persisted identity of a pair: its bus ids in order (slots, so a swapped GPU is a change)."""
    from ..util import normalize_bus_id

    ids = []
    for g in pair_gpus(run):
        bus = g.get("bus_id")
        if bus and not isinstance(bus, str):
            raise ResultsError(f"run {run.get('run_id')!r}: pair.gpus: bus_id {bus!r} is not a PCI bus id")
        ids.append(normalize_bus_id(bus) if isinstance(bus, str) and bus else str(g.get("uuid")))
    return "+".join(sorted(ids))


def _label(r: PcieReading | None) -> str | None:
    return None if r is None else r.label()


def _links(evidence: Evidence | None, run: Mapping[str, object]) -> dict[str, LinkFacts]:
    out: dict[str, LinkFacts] = {}
    if evidence is None:
        return out
    from ..util import normalize_bus_id

    by_bus = {}
    for gpu in evidence.gpus:
        try:
            by_bus[normalize_bus_id(gpu.bus_id)] = gpu
        except ValueError:
            continue
    for pg in pair_gpus(run):
        raw = pg.get("bus_id")
        if not isinstance(raw, str):
            continue
        try:
            bus = normalize_bus_id(raw)
        except ValueError:
            continue
        g = by_bus.get(bus)
        if g is None:
            continue
        loaded, mx = g.pcie.loaded, g.pcie.max
        active = g.active_nvlinks
        versions = sorted({lk.version for lk in active if lk.version is not None})
        out[bus] = {
            "index": g.index,
            "loaded": _label(loaded),
            "max": _label(mx),
            "loaded_gen": loaded.gen if loaded is not None else None,
            "loaded_width": loaded.width if loaded is not None else None,
            "max_gen": mx.gen,
            "max_width": mx.width,
            "nvlinks_active": len(active),
            "nvlink_version": versions[-1] if versions else None,
        }
    return out


def _index(value: object) -> int:
    """``int(value)`` of a JSON value (a GPU index as run.json writes it)."""
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"int() argument must be a string or a real number, not {type(value).__name__!r}")
    return int(value)


def _pair_facts(evidence: Evidence | None, run: Mapping[str, object]) -> PairFacts:
    if evidence is None:
        return {}
    idx = sorted(_index(g["index"]) for g in pair_gpus(run) if g.get("index") is not None)
    for p in evidence.pairs:
        if len(idx) == 2 and [p.a, p.b] == idx:
            return {"topology": p.topology, "nvlinks_between": p.nvlinks_between,
                    "p2p_read": p.p2p_read, "p2p_write": p.p2p_write}
    return {}


def _text(value: object) -> str | None:
    """A run.json field stored as text (``None`` stays ``None``), as the store's text columns keep it."""
    return None if value is None else str(value)


def build_fingerprint(run_dir: str | Path) -> Fingerprint:
    """Read a results directory into a JSON-serialisable fingerprint (see module doc)."""
    run_dir = Path(run_dir)
    run = run_record(run_dir)
    evidence = load_evidence(run_dir)
    cmdline_path = run_dir / "env" / "kernel_cmdline.txt"
    cmdline = cmdline_path.read_text(encoding="utf-8", errors="replace").strip() if cmdline_path.exists() else None
    versions = as_dict(run.get("versions"))
    transport: dict[str, TransportFacts] = {}
    throttled: dict[str, list[JSONValue]] = {}
    downtrained: dict[str, list[JSONValue]] = {}
    for arm, _, sdir in scenario_dirs(run_dir):
        proof = optional_object(sdir / PROOF)
        if proof is not None:
            transport.setdefault(arm, {"transport": proof.get("transport"), "nccl_version": proof.get("nccl_version")})
        agg = optional_object(sdir / AGGREGATE)
        if agg is not None:
            flags = as_dict(agg.get("flags"))
            if flags.get("throttled_reps"):
                throttled[sdir.name] = list(as_list(flags["throttled_reps"]))
            if flags.get("downtrained_reps"):
                downtrained[sdir.name] = list(as_list(flags["downtrained_reps"]))
    nccl = versions.get("nccl")
    if nccl is None:
        seen = sorted({str(t["nccl_version"]) for t in transport.values() if t.get("nccl_version")})
        nccl = ",".join(seen) or None
    server = run.get("server")
    gpus = pair_gpus(run)
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "run_id": str(run["run_id"]),
        "rig": str(run["rig"]),
        "rig_digest": run.get("rig_digest"),
        "rig_file_digest": run.get("rig_file_digest"),
        "kind": _text(run.get("kind")),
        "simulated": bool(run.get("simulated", False) or (evidence is not None and evidence.simulated)),
        "started_at": run.get("started_at"),
        "pair": {
            "key": as_dict(run["pair"]).get("key"),
            "ident": pair_ident(run),
            "gpus": [{k: g.get(k) for k in ("index", "bus_id", "uuid", "name")} for g in gpus],
        },
        "versions": {**{k: versions.get(k) for k in VERSION_KEYS}, "nccl": nccl,
                     "driver": versions.get("driver") or (evidence.driver_version if evidence is not None else None)},
        "kernel_cmdline": cmdline,
        "server": None if not isinstance(server, dict) else {
            "model": server.get("model"), "args": server.get("args"), "flags": server.get("flags"),
            "load": server.get("load")},
        "arms": {name: {"env": dict(as_dict(a.get("env"))), "expect_transport": a.get("expect_transport"),
                        "custom_all_reduce": a.get("custom_all_reduce")}
                 for name, a in as_dict(run.get("arms")).items() if isinstance(a, dict)},
        "transport": transport,
        "links": _links(evidence, run),
        "pair_facts": _pair_facts(evidence, run),
        "throttled": throttled,
        "downtrained": downtrained,
    }


def same_rig_file(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """Whether two runs (fingerprints, or ``run.json``) ran the same rig file: the same content digest, or, where
    one run was saved before content digests (no ``rig_file_digest``), its digest equal to the other's file digest.

    Why both: a run's ``rig_digest`` was the file's bytes until a comment edit was seen to count as a new rig file;
    it is what the file says now. A store of nights saved before keeps its chain with the rig file as it was."""
    da, db = a.get("rig_digest"), b.get("rig_digest")
    if da == db:
        return True
    fa, fb = a.get("rig_file_digest"), b.get("rig_file_digest")
    return bool((fa is None and da and da == fb) or (fb is None and db and db == fa))


def gpu_models(fp: Mapping[str, object]) -> list[str] | None:
    """The names of the pair's GPUs (``pair.gpus[*].name``), sorted; None where any is not known.

    Sorted because the pair ident orders the GPUs by bus id: the models compare as a multiset.
    """
    gpus = as_dict(fp.get("pair")).get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return None
    names = [g.get("name") if isinstance(g, dict) else None for g in gpus]
    known = [n for n in names if isinstance(n, str) and n]
    return sorted(known) if len(known) == len(names) else None


def comparability(fp: Mapping[str, object], arm: str) -> JSONObject:
    """What must be equal for a scenario of ``arm`` to be compared at all (model, args, load, arm, GPUs).

    The arm's *environment* is deliberately not here: an env change (``NCCL_P2P_LEVEL=LOC``
    under the same arm name) is a candidate cause that attribution reports, not a new arm.
    The GPU *models* are: the pair ident names the slots only, and a pair of other GPUs in the same slots
    (H100s one night, H200s the next on a cloud runner: the same virtual bus ids, 2026-11-27) runs at
    another level, so no throughput of one says anything about the other's interconnect. A GPU replaced
    by one of the same model stays comparable; its UUID change is a cause attribution names.
    """
    server = as_dict(fp.get("server"))
    arm_def = as_dict(as_dict(fp.get("arms")).get(arm))
    return {
        "kind": fp.get("kind"),
        "simulated": bool(fp.get("simulated")),
        "model": server.get("model"),
        "server args": server.get("args"),
        "load": server.get("load"),
        "arm expect_transport": arm_def.get("expect_transport"),
        "arm custom_all_reduce": arm_def.get("custom_all_reduce"),
        "gpu models": gpu_models(fp),
    }


#: a baseline or history reads this many times its length of stored runs, so that the runs :func:`incomparable`
#: leaves out (other GPUs in the same slots, another request shape) do not crowd the comparable ones out of it
READ_DEPTH = 4

# keys of comparability() that a fingerprint may not know (runs saved before it was recorded): unknown on
# either side is no difference
_MAY_BE_UNKNOWN = frozenset({"gpu models", "load"})


def difference_text(key: str, have: object, want: object) -> str:
    """``load input_len 128 -> 1024``: one :func:`comparability` key's change, a mapping's by the entries
    that differ (a whole request shape or argument list on one line named none of them)."""
    if isinstance(have, Mapping) and isinstance(want, Mapping):
        keys = sorted({*have, *want}, key=str)
        return ", ".join(f"{key} {k} {have.get(k)!r} -> {want.get(k)!r}" for k in keys if have.get(k) != want.get(k))
    return f"{key} {have!r} -> {want!r}"


def incomparable(want: Mapping[str, object], have: Mapping[str, object]) -> list[str]:
    """The keys of :func:`comparability` on which a baseline run (``have``) differs from tonight (``want``)."""
    return [k for k in want if want[k] != have.get(k)
            and not (k in _MAY_BE_UNKNOWN and (want[k] is None or have.get(k) is None))]


def flatten(obj: object, prefix: str = "") -> JSONObject:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists stay values (they are compared whole)."""
    out: JSONObject = {}
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
