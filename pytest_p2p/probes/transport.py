"""The NCCL transport proof: which path the bytes *actually* took, read from ``NCCL_DEBUG=INFO``.

"P2P enabled is not P2P used." Peer access can be on while NCCL still stages through
host memory (``NCCL_P2P_DISABLE``, ``NCCL_P2P_LEVEL``, a topology NCCL distrusts), and
an arm meant to be "P2P off" can still move data over P2P. The only ground truth NCCL
gives is the per-channel connection line it prints when it wires a channel, e.g.::

    host:694:694 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
    host:753:753 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct
    host:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
    host:1:1 [0] NCCL INFO Ring 00 : 6 -> 2 [receive] via NET/IB/0          (NCCL 2.4-2.6)

:func:`parse_nccl_log` turns a log (NCCL 2.4 .. 2.30, several processes interleaved, ANSI
colour, CRLF, truncated or glued lines) into a :class:`TransportProof`: every connection
line counted per peer pair (the first ones of each pair kept whole), a summary, the
environment overrides NCCL echoed, for each claim the numbered lines that prove it — and
whether the log is *complete*, because only a complete log may prove that something was
**not** used (see :mod:`.transport_model`). It is linear in the size of the
text and total: any text gives a proof (:mod:`.nccl_lines` bounds every line and number).

This module builds the proof; :mod:`.nccl_lines` reads lines, :mod:`.transport_model` is
the data and its JSON (:mod:`.transport_readback` reads it back), :mod:`.transport_expect` judges arm
expectations.
"""

from __future__ import annotations

import re

from .nccl_lines import NcclMessage, iter_nccl_messages, looks_like_connection, short
from .transport_claims import CONNECTION_STARTS, Connections, Evidence, build_claims, contradictions
from .transport_complete import InitLines, completeness
from .transport_expect import ExpectResult, check_expectation, label_matches, plugin_family
from .transport_model import (
    INCOMPLETE,
    MAX_EVIDENCE,
    NO_CONNECTIONS,
    NO_INFO,
    NO_INFO_PROBLEM,
    PROOF_SCHEMA,
    PROOF_VERSION,
    PROVED,
    STATES,
    UNRECOGNISED,
    Claim,
    CommInfo,
    Connection,
    TransportProof,
)
from .transport_readback import proof_from_dict

__all__ = [
    "INCOMPLETE", "MAX_EVIDENCE", "NO_CONNECTIONS", "NO_INFO", "NO_INFO_PROBLEM", "PROOF_SCHEMA", "PROOF_VERSION",
    "PROVED", "STATES", "UNRECOGNISED", "Claim", "Connection", "ExpectResult", "TransportProof", "check_expectation",
    "contradictions", "iter_nccl_messages", "label_matches", "parse_nccl_log", "plugin_family", "proof_from_dict",
]

P2P_KINDS = ("CUMEM", "IPC", "direct pointer", "MNNVL", "indirect")

_N = r"\d{1,9}"
_VERSION_RE = re.compile(r"NCCL version (?P<v>\d{1,3}\.\d{1,3}\.\d{1,4})")
_VLLM_NCCL_RE = re.compile(r"nccl==(?P<v>\d{1,3}\.\d{1,3}\.\d{1,4})")
_ENV_RE = re.compile(r"^(?P<var>NCCL_[A-Z0-9_]{1,64}) set by environment to (?P<val>.{0,400}?)\.?\s*$")
_P2P_TYPE_RE = re.compile(
    r"^Check P2P Type (?P<first>isAllDirectP2p|intraNodeP2pSupport) (?P<a>\d{1,3}) directMode (?P<b>\d{1,3})"
    r"(?: isAllCudaP2p (?P<c>\d{1,3}))?"
)
_COMM_RE = re.compile(
    r"^comm (?P<comm>\S{1,40}) rank (?P<rank>" + _N + r") nRanks (?P<nranks>" + _N + r") nNodes (?P<nnodes>" + _N
    + r") localRanks (?P<lranks>" + _N + r") localRank (?P<lrank>" + _N + r")(?: MNNVL (?P<mnnvl>\d{1,3}))?"
)
_INIT_DONE_RE = re.compile(
    r"^(?:\w{1,40} )?comm (?P<comm>\S{1,40}) rank (?P<rank>" + _N + r") nranks (?P<nranks>" + _N + r")\b"
)
_COMM_ID_RE = re.compile(r" commId (?P<id>(?:0x)?[0-9a-fA-F]{1,20})\b")
_CHANNELS_RE = re.compile(
    r"^(?P<coll>\d{1,4}) coll channels, (?:(?P<collnet>\d{1,4}) collnet channels, )?"
    r"(?:(?P<nvls>\d{1,4}) nvls channels, )?(?P<p2p>\d{1,4}) p2p channels, (?P<perpeer>\d{1,4}) p2p channels per peer"
)
_NVLS_SUPPORT_RE = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev (?P<dev>\d{1,4})")
_NVLS_USE_RE = re.compile(r"^(?:Connected NVLS|NVLS comm \S{1,40} (?:rank|headRank) )")
_COLLNET_USE_RE = re.compile(r"^(?:rank \d{1,9} Connected CollNet|Connected Collnet Chains|Connected CollNet)")
# CollNet given up: NCCL's own fallback warnings, or the SHARP plugin failing to create its group.
_COLLNET_ABANDON_RE = re.compile(
    r"Cannot initialize CollNet|CollNet is not supported or fails to initialize|CollNet setup failed|"
    r"SHARP group create.{0,80}fail", re.IGNORECASE
)
_GDR_HCA_RE = re.compile(
    r"^NET/(?P<plugin>[^:\s]{1,64}) ?: GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<hca>\d{1,4}) "
    r"'(?P<name>[^']{0,64})'"
)
_GDR_GPU_RE = re.compile(
    r"^GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>\S{1,20}) / HCA (?P<hca>\S{1,20}) "
    r"\(distance (?P<dist>\d{1,4}) (?:<=|>) (?P<level>\d{1,4})\)(?:, read (?P<read>\d{1,3}))?"
    r"(?: mode (?P<mode>\S{1,20}))?"
)
_USING_NET_RE = re.compile(r"^Using network (?P<plugin>\S.{0,63}?)\s*$")
_NET_DEVS_RE = re.compile(r"^NET/(?P<plugin>[^:\s]{1,64}) ?: Using (?P<devs>.{0,2000}?)\s*$")
_NET_DEV_ITEM_RE = re.compile(r"\[(?P<idx>\d{1,4})\](?P<name>[^\s;\[]{1,64})")


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    try:
        return tuple(int(x) for x in version.split(".")[:3])
    except ValueError:
        return None


def parse_nccl_log(text: str | bytes, source: str = "<log>") -> TransportProof:
    """Parse ``NCCL_DEBUG=INFO`` output into a :class:`TransportProof`; total and linear on any text."""
    if isinstance(text, (bytes, bytearray)):  # a careless caller: decode rather than fail
        text = bytes(text).decode("utf-8", "replace")
    proof = TransportProof(source=source)
    ev = Evidence()
    versions: list[str] = []
    vllm_versions: list[str] = []
    init = InitLines()
    unparsed = 0
    long_lines: list[int] = []
    abandon: list[NcclMessage] = []
    collnet_connected = False
    nvls_counts: list[int] = []
    conns = Connections()

    for msg in iter_nccl_messages(text, None, long_lines):
        t = msg.text
        if msg.level == "BANNER":
            m = _VERSION_RE.search(t)
            if m:
                versions.append(m["v"])
                ev.add("nccl_version", msg)
            else:
                m = _VLLM_NCCL_RE.search(t)
                if m:
                    vllm_versions.append(m["v"])
                    ev.add("nccl_version_vllm", msg)
            continue
        if msg.level == "WARN":
            if _COLLNET_ABANDON_RE.search(t):
                abandon.append(msg)
                ev.add("collnet_abandoned", msg)
            continue
        if t.startswith(CONNECTION_STARTS) and conns.read(t, msg, proof, ev):
            continue
        if looks_like_connection(t):
            unparsed += 1
            ev.add("unrecognised", msg)
            if unparsed <= 3:
                proof.warnings.append(
                    f"line {msg.line}: looks like a channel connection but matches no NCCL format this parser knows "
                    f"(truncated, or a new format): {short(t)!r}"
                )
            continue
        _other_line(t, msg, proof, ev, versions, init, nvls_counts)
        if _COLLNET_USE_RE.match(t):
            collnet_connected = True
            ev.add("collnet", msg)
        elif _COLLNET_ABANDON_RE.search(t):
            abandon.append(msg)
            ev.add("collnet_abandoned", msg)

    # Counted at C speed over the whole text: the loop above sees only the lines the proof can use.
    info, warn = text.count("NCCL INFO "), text.count("NCCL WARN ")
    proof.connection_counts = conns.finish(ev)
    proof.stats = {"lines": text.count("\n") + (1 if text and not text.endswith("\n") else 0), "info_lines": info,
                   "warn_lines": warn, "unparsed_connection_lines": unparsed, "long_lines": len(long_lines)}
    if long_lines:
        proof.warnings.append(f"{len(long_lines)} line(s) longer than the parser reads were cut "
                              f"(first: line {long_lines[0]})")
    proof.has_info = info > 0
    _versions(proof, versions, vllm_versions)
    proof.device_id_format = _device_id_format(proof)
    _collnet(proof, collnet_connected, abandon, "collnet_zero" in ev.counts)
    _nvls(proof, nvls_counts)
    proof.complete, proof.completeness = completeness(proof, init, unparsed)
    if proof.collnet_state is None and proof.used_collnet is None and proof.complete:
        proof.used_collnet = False
    if proof.used_nvls is None and proof.complete:
        proof.used_nvls = False
    if not proof.has_info:
        proof.state = NO_INFO
        proof.problem = NO_INFO_PROBLEM if not warn else (
            f"{NO_INFO_PROBLEM} (only {warn} NCCL WARN line(s): NCCL_DEBUG=WARN hides the transport)"
        )
        return proof
    if not proof.connection_counts:
        if unparsed:
            proof.state = UNRECOGNISED
            proof.problem = (f"format not recognised: {unparsed} line(s) look like channel connection lines but "
                             f"match no NCCL format this parser knows; no transport is claimed")
        else:
            proof.state = NO_CONNECTIONS
            proof.problem = ("NCCL INFO lines but no channel connection lines: no communicator connected a peer "
                             "in this log (single rank, no collective ran, NCCL_DEBUG_SUBSYS excludes INIT, "
                             "or an excerpt)")
    else:
        proof.state = PROVED if proof.complete else INCOMPLETE
    proof.claims = build_claims(proof, ev.lines, ev.counts)
    for problem in contradictions(proof):
        proof.warnings.append(f"internal: {problem}")
    return proof


def _other_line(t: str, msg: NcclMessage, proof: TransportProof, ev: Evidence, versions: list[str],
                init: InitLines, nvls_counts: list[int]) -> None:
    """Every INFO message that is not a connection line."""
    if t.startswith("NCCL version "):
        m = _VERSION_RE.match(t)
        if m:
            versions.append(m["v"])
            ev.add("nccl_version", msg)
        return
    m = _ENV_RE.match(t)
    if m:
        proof.env_overrides[m["var"]] = m["val"].strip()
        ev.add(f"env:{m['var']}", msg)
        return
    m = _P2P_TYPE_RE.match(t)
    if m:
        p2p_type = {m["first"]: int(m["a"]), "directMode": int(m["b"])}
        if m["c"] is not None:
            p2p_type["isAllCudaP2p"] = int(m["c"])
        proof.p2p_type = p2p_type
        ev.add("p2p_type", msg)
        return
    m = _COMM_RE.match(t)
    if m:
        proof.comms.append(CommInfo(
            comm=m["comm"], rank=int(m["rank"]), nRanks=int(m["nranks"]), nNodes=int(m["nnodes"]),
            localRanks=int(m["lranks"]), localRank=int(m["lrank"]),
            mnnvl=int(m["mnnvl"]) if m["mnnvl"] is not None else None, pid=msg.pid, line=msg.line,
        ))
        ev.add("comm", msg)
        return
    if "Init COMPLETE" in t:
        m = _INIT_DONE_RE.match(t)
        if m:
            cid = _COMM_ID_RE.search(t)
            init.add(cid["id"] if cid else None, int(m["rank"]), int(m["nranks"]))
            ev.add("init_complete", msg)
        return
    m = _CHANNELS_RE.match(t)
    if m:
        if m["collnet"] is not None and int(m["collnet"]) == 0:
            ev.add("collnet_zero", msg)  # a sign, not an absence; a count > 0 proves nothing (2.28 prints nChannels)
        if m["nvls"] is not None:
            n = int(m["nvls"])
            nvls_counts.append(n)
            proof.nvls_channels = max(proof.nvls_channels or 0, n)
            ev.add("nvls" if n > 0 else "nvls_zero", msg)
        ev.add("channel_counts", msg)
        return
    m = _NVLS_SUPPORT_RE.match(t)
    if m:
        supported = not m["not"]
        proof.nvls_supported = supported if proof.nvls_supported is None else (proof.nvls_supported or supported)
        ev.add("nvls_support", msg)  # support is not use: never feeds the "nvls" claim
        return
    if _NVLS_USE_RE.match(t):
        nvls_counts.append(-1)  # a use line: positive
        ev.add("nvls", msg)
        return
    m = _GDR_HCA_RE.match(t)
    if m:
        proof.gdr_support.append({"scope": "hca", "plugin": m["plugin"], "hca": m["hca"], "name": m["name"],
                                  "enabled": m["state"] == "Enabled", "line": msg.line})
        ev.add("gdr_support", msg)
        return
    m = _GDR_GPU_RE.match(t)
    if m:
        proof.gdr_support.append({
            "scope": "gpu", "gpu": m["gpu"], "hca": m["hca"], "enabled": m["state"] == "Enabled",
            "distance": int(m["dist"]), "level": int(m["level"]),
            "read": int(m["read"]) if m["read"] is not None else None, "mode": m["mode"], "line": msg.line,
        })
        ev.add("gdr_support", msg)
        return
    m = _USING_NET_RE.match(t)
    if m:
        proof.net_plugin = m["plugin"]
        ev.add("net_plugin", msg)
        return
    m = _NET_DEVS_RE.match(t)
    if m:
        found = [f"{m['plugin']}:{d['name']}" for d in _NET_DEV_ITEM_RE.finditer(m["devs"])]
        for name in found:
            if name not in proof.net_devices and len(proof.net_devices) < 64:
                proof.net_devices.append(name)
        if found:  # "NET/IB : Using [RO]; OOB eth0" names no device
            ev.add("net_devices", msg)


def _versions(proof: TransportProof, versions: list[str], vllm_versions: list[str]) -> None:
    if versions:
        proof.nccl_version = versions[0]
        distinct = sorted(set(versions))
        if len(distinct) > 1:
            proof.warnings.append(f"several NCCL versions in one log: {', '.join(distinct[:8])}")
    elif vllm_versions:
        proof.nccl_version = vllm_versions[0]  # vLLM's "vLLM is using nccl==X" (pynccl.py)


def _collnet(proof: TransportProof, connected: bool, abandon: list[NcclMessage], zero: bool) -> None:
    """CollNet is used only when its setup finished and was not abandoned.

    ``CollNet 00/0 : 4 [receive] via COLLNET/SHARP/0/GDRDMA`` lines are the *setup*; NCCL
    may then warn ``Cannot initialize CollNet, using point-to-point network instead`` (the
    data goes over P2P/NET) or hang. Only a ``Connected CollNet`` line confirms use.
    """
    has_lines = any(k[0] == "COLLNET" for k in proof.counts)
    if abandon:
        proof.collnet_state, proof.used_collnet = "abandoned", False
    elif connected:
        proof.collnet_state, proof.used_collnet = "connected", True
    elif has_lines:
        proof.collnet_state, proof.used_collnet = "unconfirmed", None
        proof.warnings.append("CollNet connection lines but no 'Connected CollNet' line: CollNet setup never "
                              "finished in this log (hung, or an excerpt); CollNet is not claimed")
    elif zero:
        proof.collnet_state, proof.used_collnet = "zero_channels", False


def _nvls(proof: TransportProof, counts: list[int]) -> None:
    """NVLS is used on a positive sign; not used when every channel-count line says 0 nvls channels."""
    if any(n != 0 for n in counts):
        proof.used_nvls = True
    elif counts:
        proof.used_nvls = False  # "0 nvls channels" is a sign, not an absence
    else:
        proof.used_nvls = None


def _device_id_format(proof: TransportProof) -> str | None:
    devs = [d for k in proof.counts for d in (k[5], k[7]) if d]
    if not devs:
        return None
    v = _version_tuple(proof.nccl_version)
    if v is not None:
        # 2.18.1's P2P/CUMEM line already printed "%x" of the bus id; only 2.18.3 switched to nvmlDev.
        return "bus_id" if v < (2, 18, 3) else "device_index"
    if any(len(d) >= 4 or any(ch in "abcdefABCDEF" for ch in d) for d in devs):
        return "bus_id"
    return "device_index"
