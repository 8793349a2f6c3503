"""The claims of a transport proof and the lines behind each, plus the check that no claim cites a line against it.

Every claim names the lines that prove it. A positive claim (``used_p2p: true``) cites the
connection lines of that transport; a negative one (``used_net: false``) exists only for a
complete log and cites what makes it complete (``Init COMPLETE`` lines) and what was used
instead; an unknown one (``None``) cites nothing it could be mistaken for. :func:`contradictions`
re-reads every cited line and reports a claim whose own evidence says otherwise — the parser
runs it on every proof, the tests on every log of the corpus.
"""

from __future__ import annotations

from collections.abc import Mapping

from .nccl_lines import iter_nccl_messages, parse_connection
from .transport_model import MAX_EVIDENCE, Claim, TransportProof

Lines = list[tuple[int, str]]
_TRANSPORT_CLAIMS = {"used_p2p": "P2P", "used_shm": "SHM", "used_net": "NET", "used_collnet": "COLLNET"}


def _completeness_lines(proof: TransportProof, lines: Mapping[str, Lines]) -> Lines:
    """Why a negative claim may be made: the Init COMPLETE lines and the connections used instead."""
    out = list(lines.get("init_complete", [])[:4])
    for name in ("used_p2p", "used_shm", "used_net"):
        out.extend(lines.get(name, [])[:2])
    if proof.used_collnet:
        out.extend(lines.get("used_collnet", [])[:2])
    return sorted(set(out))[:MAX_EVIDENCE]


def build_claims(proof: TransportProof, lines: Mapping[str, Lines], counts: Mapping[str, int]) -> dict[str, Claim]:
    """Every claim of ``proof`` with its evidence (see docs/transport.md, "Claims")."""
    values: dict[str, object] = {
        "nccl_version": proof.nccl_version,
        "complete": proof.complete,
        "used_p2p": proof.used_p2p,
        "used_shm": proof.used_shm,
        "used_net": proof.used_net,
        "used_collnet": proof.used_collnet,
        "p2p_kind": proof.p2p_kinds,
        "p2p_read": proof.p2p_read,
        "p2p_ce": proof.p2p_ce,
        "shm_mode": proof.shm_modes,
        "net_gdrdma": proof.net_gdrdma,
        "net_plugin": proof.net_plugin,
        "net_devices": list(proof.net_devices),
        "gdr_support": [g.get("enabled") for g in proof.gdr_support],
        "nvls": proof.used_nvls,
        "nvls_support": proof.nvls_supported,
        "collnet": proof.used_collnet,
        "p2p_type": proof.p2p_type,
        "comm": [{"rank": c["rank"], "nRanks": c["nRanks"], "nNodes": c["nNodes"], "localRanks": c["localRanks"]}
                 for c in proof.comms],
        "channel_counts": proof.nvls_channels,
        "init_complete": counts.get("init_complete", 0),
        "transport": proof.transport,
    }
    for var, val in proof.env_overrides.items():
        values[f"env:{var}"] = val
    evidence: dict[str, Lines] = {k: list(v) for k, v in lines.items()}
    evidence["complete"] = list(lines.get("init_complete", []))
    if "nccl_version" not in evidence:
        evidence["nccl_version"] = list(lines.get("nccl_version_vllm", []))
    transport_lines: Lines = []
    effective = {"P2P", "SHM", "NET"} | ({"COLLNET"} if proof.used_collnet else set())
    for name, transport in _TRANSPORT_CLAIMS.items():
        if transport in effective:
            transport_lines.extend(lines.get(name, [])[:2])
    evidence["transport"] = sorted(transport_lines)[:MAX_EVIDENCE]
    collnet = _collnet_lines(proof, lines)
    evidence["used_collnet"] = evidence["collnet"] = collnet
    evidence["nvls"] = list(lines.get("nvls", [])) if proof.used_nvls else (
        list(lines.get("nvls_zero", [])) if proof.used_nvls is False else [])
    claims: dict[str, Claim] = {}
    for name, value in values.items():
        cited = evidence.get(name, [])
        count = counts.get(name, len(cited))
        if name in _TRANSPORT_CLAIMS and name != "used_collnet":
            if value is False:
                cited, count = _completeness_lines(proof, lines), 0
            elif value is None:
                cited, count = [], 0
        if name == "transport":
            count = sum(proof.effective_labels.values())
        claims[name] = Claim(name, value, tuple(cited), count)
    return claims


def _collnet_lines(proof: TransportProof, lines: Mapping[str, Lines]) -> Lines:
    if proof.collnet_state == "abandoned":
        return list(lines.get("collnet_abandoned", []))
    if proof.collnet_state == "connected":
        return sorted(set(lines.get("collnet", []) + lines.get("used_collnet", [])[:2]))[:MAX_EVIDENCE]
    if proof.collnet_state == "zero_channels":
        return list(lines.get("collnet_zero", []))
    if proof.collnet_state == "unconfirmed":
        return []  # set up, never confirmed: nothing proves use, and citing the setup would read as proof
    if proof.used_collnet is False:
        return _completeness_lines(proof, lines)
    return []


def _transports_in(text: str) -> set[str]:
    found: set[str] = set()
    for msg in iter_nccl_messages(text, known=set()):
        conn = parse_connection(msg.text)
        if conn is not None:
            found.add(conn.transport)
    return found


def contradictions(proof: TransportProof) -> list[str]:
    """Claims that cite a line saying otherwise (empty for a sound proof)."""
    out: list[str] = []
    for name, transport in _TRANSPORT_CLAIMS.items():
        claim = proof.claims.get(name)
        if claim is None or claim.value is None:
            continue
        for number, text in claim.lines:
            seen = _transports_in(text)
            if transport == "COLLNET" and claim.value is True:
                if "Cannot initialize CollNet" in text:
                    out.append(f"{name}: true cites line {number}, which abandons CollNet")
                continue
            if claim.value is True and transport not in seen:
                out.append(f"{name}: true cites line {number}, which shows no {transport} connection")
            if claim.value is False and transport in seen:
                out.append(f"{name}: false cites line {number}, which shows a {transport} connection")
    nvls = proof.claims.get("nvls")
    if nvls is not None and nvls.value is True and any(" 0 nvls channels" in t and "Connected NVLS" not in t
                                                        and "NVLS comm" not in t for _, t in nvls.lines):
        out.append("nvls: true cites a '0 nvls channels' line")
    return out
