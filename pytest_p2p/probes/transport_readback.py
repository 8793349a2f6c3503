"""Reading a transport proof back from its JSON form: :func:`proof_from_dict`, the inverse of
:meth:`~.transport_model.TransportProof.to_dict`.

Split from :mod:`.transport_model` (issue 15, modules under ~400 lines): that module is the data
and how it is written; this one is how it is read, strictly. Values off disk are ``object`` and
narrowed here — an integer must be an int (not a bool) or a numeric string, a list a list, an
object a mapping — and a wrong shape or a missing required key becomes a
:class:`~pytest_p2p.errors.ProbeError` naming the file, never a silent default. Keys read with
``.get`` may be absent (hand-built or older proofs); the others are required.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ..errors import ProbeError
from .transport_model import (
    INCOMPLETE,
    NO_INFO,
    PROOF_SCHEMA,
    PROOF_VERSION,
    PROVED,
    Claim,
    CommInfo,
    Connection,
    ConnKey,
    TransportProof,
)

__all__ = ["connection_from_dict", "proof_from_dict"]


def _req_int(x: object) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, str)):
        raise TypeError(f"expected an integer, got {type(x).__name__}")
    return int(x)


def _opt_int(x: object) -> int | None:
    return None if x is None else _req_int(x)


def _opt_str(x: object) -> str | None:
    return None if x is None else str(x)


def _opt_bool(x: object) -> bool | None:
    return None if x is None else bool(x)


def _list(x: object) -> list[object]:
    if x is None:
        return []
    if not isinstance(x, (list, tuple)):
        raise TypeError(f"expected a list, got {type(x).__name__}")
    return list(x)


def _map(x: object) -> Mapping[str, object]:
    if x is None:
        return {}
    if not isinstance(x, Mapping):
        raise TypeError(f"expected an object, got {type(x).__name__}")
    return x


def connection_from_dict(d: Mapping[str, object]) -> Connection:
    """A :class:`Connection` from its :meth:`Connection.to_dict` form (``label`` is derived, not read)."""
    return Connection(
        channel=_req_int(d["channel"]), src_rank=_req_int(d["src_rank"]), src_dev=str(d["src_dev"]),
        dst_rank=_req_int(d["dst_rank"]), dst_dev=str(d["dst_dev"]), transport=str(d["transport"]),
        kind=str(d["kind"]), line=_req_int(d["line"]), conn_index=_opt_int(d.get("conn_index")),
        flags=tuple(str(f) for f in _list(d.get("flags"))), direction=_opt_str(d.get("direction")),
        net_dev=_opt_int(d.get("net_dev")), proxy_rank=_opt_int(d.get("proxy_rank")),
        via_rank=_opt_int(d.get("via_rank")), pid=_opt_int(d.get("pid")),
    )


def _key_from(d: Mapping[str, object]) -> tuple[ConnKey, int]:
    key: ConnKey = (str(d["transport"]), str(d["kind"]), tuple(str(f) for f in _list(d.get("flags"))),
                    _opt_str(d.get("direction")), _req_int(d["src_rank"]), str(d.get("src_dev", "")),
                    _req_int(d["dst_rank"]), str(d.get("dst_dev", "")))
    return key, _req_int(d["count"])


def _comm(d: object) -> CommInfo:
    m = _map(d)
    return CommInfo(comm=str(m.get("comm", "")), rank=_req_int(m["rank"]), nRanks=_req_int(m["nRanks"]),
                    nNodes=_req_int(m["nNodes"]), localRanks=_req_int(m["localRanks"]),
                    localRank=_req_int(m["localRank"]), mnnvl=_opt_int(m.get("mnnvl")), pid=_opt_int(m.get("pid")),
                    line=_req_int(m.get("line", 0)))


def _claim(name: str, d: object) -> Claim:
    m = _map(d)
    lines = tuple((_req_int(_list(p)[0]), str(_list(p)[1])) for p in _list(m.get("lines")))
    return Claim(name, m.get("value"), lines, _req_int(m.get("count", 0)))


def proof_from_dict(d: object, source: str = "transport_proof.json") -> TransportProof:
    """Rebuild a proof written by :meth:`TransportProof.to_dict`; other schemas or versions are errors."""
    if not isinstance(d, Mapping):
        raise ProbeError(f"{source}: expected a transport proof object, got {type(d).__name__}")
    if d.get("schema") != PROOF_SCHEMA:
        raise ProbeError(f"{source}: not a transport proof (schema {d.get('schema')!r}, expected {PROOF_SCHEMA!r})")
    if d.get("version") != PROOF_VERSION:
        raise ProbeError(
            f"{source}: transport proof version {d.get('version')!r} is not supported (this pytest-p2p reads "
            f"version {PROOF_VERSION}); re-parse the NCCL log with `python -m pytest_p2p transport LOG --json`"
        )
    try:
        summary = _map(d.get("summary"))
        connections = [connection_from_dict(_map(c)) for c in _list(d.get("connections"))]
        counts: Counter[ConnKey] = Counter(dict(_key_from(_map(x)) for x in _list(d.get("connection_counts"))))
        has_info = bool(d["has_info"])
        complete = bool(d.get("complete", False))
        state = str(d.get("state") or (NO_INFO if not has_info else PROVED if complete else INCOMPLETE))
        p2p_type = d.get("p2p_type")
        return TransportProof(
            source=str(d.get("source", source)), has_info=has_info, problem=_opt_str(d.get("problem")),
            state=state, complete=complete, completeness=str(d.get("completeness") or ""),
            nccl_version=_opt_str(d.get("nccl_version")), connections=connections, connection_counts=counts,
            claims={str(k): _claim(str(k), v) for k, v in _map(d.get("claims")).items()},
            env_overrides={str(k): str(v) for k, v in _map(d.get("env_overrides")).items()},
            p2p_type=None if p2p_type is None else {str(k): _req_int(v) for k, v in _map(p2p_type).items()},
            comms=[_comm(c) for c in _list(d.get("comms"))],
            net_plugin=_opt_str(summary.get("net_plugin")),
            net_devices=[str(x) for x in _list(summary.get("net_devices"))],
            gdr_support=[dict(_map(g)) for g in _list(d.get("gdr_support"))],
            nvls_channels=_opt_int(summary.get("nvls_channels")),
            nvls_supported=_opt_bool(summary.get("nvls_supported")), used_nvls=_opt_bool(summary.get("used_nvls")),
            used_collnet=_opt_bool(summary.get("used_collnet")), collnet_state=_opt_str(summary.get("collnet_state")),
            device_id_format=_opt_str(d.get("device_id_format")),
            warnings=[str(w) for w in _list(d.get("warnings"))],
            stats={str(k): _req_int(v) for k, v in _map(d.get("stats")).items()},
        )
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ProbeError(f"{source}: malformed transport proof ({type(exc).__name__}: {exc})") from None
