"""The claims of a transport proof and the lines behind each: counted, cited, and checked against the claims.

Every claim names the lines that prove it. A positive claim (``used_p2p: true``) cites the
connection lines of that transport; a negative one (``used_net: false``) exists only for a
complete log and cites what makes it complete (``Init COMPLETE`` lines) and what was used
instead; an unknown one (``None``) cites nothing it could be mistaken for. :func:`contradictions`
re-reads every cited line and reports a claim whose own evidence says otherwise — the parser
runs it on every proof, the tests on every log of the corpus.

The lines come in through :class:`Evidence` (the first :data:`MAX_EVIDENCE` per claim and a
count of all) and :class:`Connections`. A 50 MB log can hold 10^5..10^6 connection lines; the
claims need of them only counts per peer pair (:data:`ConnKey`: all a claim, the transport
label and completeness read) and the first lines of each (evidence, the lines an expectation
names, the JSON's ``connections``). :class:`Connections` keeps exactly that, parsing each
distinct message once; tests/test_transport_aggregate.py checks that a log repeated past
every limit proves exactly what it proves once.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from .nccl_lines import NcclMessage, iter_nccl_messages, parse_connection
from .transport_complete import MAX_RANKS
from .transport_model import KEEP_PER_PAIR, KEEP_TOTAL, MAX_EVIDENCE, Claim, Connection, ConnKey, TransportProof

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


# -- counting the lines ------------------------------------------------------------------------

@dataclass
class Evidence:
    """Lines seen per claim name (at most :data:`MAX_EVIDENCE` each) and how many in all."""

    lines: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    full: set[str] = field(default_factory=set)  # claims with MAX_EVIDENCE lines already

    def add(self, claim: str, msg: NcclMessage) -> None:
        self.counts[claim] += 1
        lines = self.lines.get(claim)
        if lines is None:
            lines = self.lines[claim] = []
        if len(lines) < MAX_EVIDENCE and (not lines or lines[-1][0] != msg.line):
            lines.append((msg.line, msg.raw))
            if len(lines) >= MAX_EVIDENCE:
                self.full.add(claim)


def _folded(key: ConnKey) -> ConnKey:
    """A key past :data:`MAX_PAIRS`: devices dropped, the peer that did not print it is -1 ("one of many").

    What completeness reads is kept (the printing rank, while it is a rank completeness checks),
    and so is everything a label or claim reads; only the per-peer detail is lost.
    """
    transport, kind, flags, direction, src, _, dst, _ = key
    if direction == "receive":
        return (transport, kind, flags, direction, -1, "", dst if dst <= MAX_RANKS else -1, "")
    return (transport, kind, flags, direction, src if src <= MAX_RANKS else -1, "", -1, "")


class _Pair:
    """The lines of one :data:`ConnKey`: how many, and how many were only counted (not cited, not kept)."""

    __slots__ = ("key", "label", "claims", "count", "uncounted", "cited")

    def __init__(self, key: ConnKey, label: str, claims: tuple[str, ...]) -> None:
        self.key, self.label, self.claims = key, label, claims
        self.count = self.uncounted = 0
        self.cited = False  # every claim of this key has MAX_EVIDENCE lines: later lines are only counted


@dataclass(slots=True, eq=False)
class _Seen:
    """A connection message parsed once: its connection (line and pid of the first sighting) and its key."""

    conn: Connection
    pair: _Pair


_MISS = object()
MAX_PAIRS = 65536  # distinct peer-pair keys counted one by one; more are folded (_folded)
CONNECTION_STARTS = ("Channel ", "Ring ", "CollNet ")  # nccl_lines.looks_like_connection
_CHANNEL_NUMBERS_RE = re.compile(r"\d{1,4}(?:/\d{1,4})?")
_MAX_CACHED = 65536  # distinct connection messages remembered (a log repeats them across runs and processes)


class Connections:
    """Connection lines, linear in number; objects kept only for the first lines of each peer pair.

    Each distinct message text is parsed once (up to :data:`_MAX_CACHED` texts); every line is
    counted per :data:`ConnKey` (all a claim reads). A :class:`Connection` object is kept for
    the first :data:`KEEP_PER_PAIR` lines of a key while fewer than :data:`KEEP_TOTAL` are kept,
    and for the first line of every label — enough for the evidence, the lines an expectation
    names and the ``connections`` list of the JSON. Evidence lines are still taken from every
    line until each claim has :data:`MAX_EVIDENCE`; after that a line is only counted.
    """

    def __init__(self) -> None:
        self._cache: dict[str, _Seen | None] = {}
        self._pairs: dict[ConnKey, _Pair] = {}
        self._claims: dict[tuple[str, str, tuple[str, ...]], tuple[str, tuple[str, ...]]] = {}
        self._labels: set[str] = set()
        self.kept = 0

    def read(self, text: str, msg: NcclMessage, proof: TransportProof, ev: Evidence) -> bool:
        """Count (and keep, cite) the connection ``text`` describes; False when it describes none.

        The cache key is the text without its channel numbers (``Channel 07/1 : 0[0] -> 1[1] via
        P2P/CUMEM`` -> ``Channel : 0[0] -> 1[1] via P2P/CUMEM``): every connection format reads them
        as ``\\d{1,4}(/\\d{1,4})?`` and nothing else of the line depends on them, so a big job's
        lines, which differ by channel, are parsed once per peer pair.
        """
        sp = text.find(" ")
        colon = text.find(" : ", sp, 24)
        nums = text[sp + 1:colon]
        if colon < 0 or _CHANNEL_NUMBERS_RE.fullmatch(nums) is None:
            return False  # no connection format accepts anything else there
        key = text[:sp] + text[colon:]
        seen = self._cache.get(key, _MISS)
        if seen is _MISS:
            seen = self._parse(text, msg)
            if len(self._cache) < _MAX_CACHED:
                self._cache[key] = seen
        if not isinstance(seen, _Seen):
            return False
        pair = seen.pair
        n = pair.count
        pair.count = n + 1
        if (n < KEEP_PER_PAIR and self.kept < KEEP_TOTAL) or pair.label not in self._labels:
            self.kept += 1
            self._labels.add(pair.label)
            c = seen.conn
            chan, _, index = nums.partition("/")
            channel, conn_index = int(chan), int(index) if index else None
            if c.line != msg.line or c.pid != msg.pid or c.channel != channel or c.conn_index != conn_index:
                c = Connection(channel, c.src_rank, c.src_dev, c.dst_rank, c.dst_dev, c.transport, c.kind,
                               msg.line, conn_index, c.flags, c.direction, c.net_dev, c.proxy_rank, c.via_rank,
                               msg.pid)
            proof.connections.append(c)
        elif pair.cited or ev.full.issuperset(pair.claims):
            pair.cited = True
            pair.uncounted += 1
            return True
        for claim in pair.claims:
            ev.add(claim, msg)
        return True

    def _parse(self, text: str, msg: NcclMessage) -> _Seen | None:
        conn = parse_connection(text, msg.line, msg.pid)
        if conn is None:
            return None
        key = conn.key
        pair = self._pairs.get(key)
        if pair is None and len(self._pairs) >= MAX_PAIRS:  # a hostile log: fold the peer into "many"
            key = _folded(key)
            pair = self._pairs.get(key)
        if pair is None:
            label, claims = self._label_claims(conn)
            pair = self._pairs[key] = _Pair(key, label, claims)
        return _Seen(conn, pair)

    def finish(self, ev: Evidence) -> Counter[ConnKey]:
        """Add the lines only counted to the evidence counts; the counts per key."""
        counts: Counter[ConnKey] = Counter()
        self._cache.clear()
        for key, pair in self._pairs.items():
            counts[key] = pair.count
            if pair.uncounted:
                for claim in pair.claims:
                    ev.counts[claim] += pair.uncounted
        return counts

    def _label_claims(self, conn: Connection) -> tuple[str, tuple[str, ...]]:
        """The label of a connection and the evidence names it supports (one shared pair per kind of line)."""
        known = self._claims.get((conn.transport, conn.kind, conn.flags))
        if known is not None:
            return known
        out = [f"used_{conn.transport.lower()}"]
        if conn.transport == "P2P":
            out.append("p2p_kind")
            if "read" in conn.flags:
                out.append("p2p_read")
            if "CE" in conn.flags:
                out.append("p2p_ce")
        elif conn.transport == "NET":
            out.append("net_gdrdma")
        elif conn.transport == "SHM":
            out.append("shm_mode")
        if len(self._claims) < _MAX_CACHED:
            self._claims[(conn.transport, conn.kind, conn.flags)] = (conn.label, tuple(out))
        return conn.label, tuple(out)
