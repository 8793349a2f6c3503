"""The transport proof as data: connections, claims with their evidence lines, and its JSON form.

A proof distinguishes *what was seen* from *what can be concluded*. A transport seen on a
connection line is used; a transport not seen is "not used" only when the log shows it is
complete (:attr:`TransportProof.complete`: every rank of every communicator finished
``Init COMPLETE`` and printed its connections). Otherwise the claim is ``None`` — unknown —
never ``False``: an excerpt, a ``grep``, one host's half of a two-host job prove nothing by
absence. :attr:`TransportProof.state` names the situation in one word.

This module is the data and how it is written (``to_dict``); reading the JSON back, with every
value narrowed strictly, is :mod:`.transport_readback` (split off to keep both under ~400 lines).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TypedDict

from .transport_expect import ExpectResult, check_expectation

PROOF_SCHEMA = "pytest-p2p/transport-proof"
PROOF_VERSION = 1

NO_INFO_PROBLEM = "no NCCL INFO lines: set NCCL_DEBUG=INFO"
MAX_EVIDENCE = 8
# Connection objects kept per peer pair (ConnKey) and in all; every further line is only counted in
# ``connection_counts`` (a 50 MB log of connection lines would otherwise hold 10^5..10^6 objects).
KEEP_PER_PAIR = 64
KEEP_TOTAL = 8192

# What every claim needs of a connection: transport, kind, flags, direction, src rank/dev, dst rank/dev.
ConnKey = tuple[str, str, tuple[str, ...], str | None, int, str, int, str]

# The one-word states of a proof (docs/transport.md, "States").
PROVED = "proved"  # connection lines seen and the log is complete: positive and negative claims hold
INCOMPLETE = "incomplete"  # connection lines seen, completeness not shown: only positive claims hold
UNRECOGNISED = "unrecognised"  # lines that look like connections, none in a format this parser knows
NO_CONNECTIONS = "no_connections"  # INFO lines but no connection line at all
NO_INFO = "no_info"  # no NCCL INFO line
STATES = (PROVED, INCOMPLETE, UNRECOGNISED, NO_CONNECTIONS, NO_INFO)


class CommInfo(TypedDict):
    """A ``comm 0x.. rank R nRanks N nNodes M localRanks L localRank l [MNNVL x]`` line."""

    comm: str
    rank: int
    nRanks: int
    nNodes: int
    localRanks: int
    localRank: int
    mnnvl: int | None
    pid: int | None
    line: int


@dataclass(slots=True)
class Connection:
    """One channel connection NCCL printed: ``channel`` from ``src_rank[src_dev]`` to ``dst_rank[dst_dev]``.

    ``src_dev``/``dst_dev`` are the bracket contents as printed: a hex PCI bus id before
    NCCL 2.18.3, the NVML device index from 2.18.3 on, empty in 2.4's bracket-less lines.
    Not frozen only for speed (built for the first lines of each peer pair); nothing mutates one.
    """

    channel: int
    src_rank: int
    src_dev: str
    dst_rank: int
    dst_dev: str
    transport: str  # "P2P" | "SHM" | "NET" | "COLLNET"
    kind: str  # P2P: CUMEM/IPC/direct pointer/MNNVL/indirect; SHM: direct/direct, CE/direct, legacy; NET: plugin
    line: int
    conn_index: int | None = None
    flags: tuple[str, ...] = ()  # "read", "CE", "GDRDMA", "PCI", "Shared"
    direction: str | None = None  # NET/COLLNET: "send" | "receive"
    net_dev: int | None = None
    proxy_rank: int | None = None
    via_rank: int | None = None  # P2P/indirect: the intermediate rank
    pid: int | None = None

    @property
    def label(self) -> str:
        """The label an arm expectation is matched against: ``P2P/CUMEM``, ``SHM``, ``NET/IB/GDRDMA``."""
        return key_label(self.key)

    @property
    def key(self) -> ConnKey:
        """Everything a claim reads of this connection (not channel, line, pid): what counts aggregate by."""
        return (self.transport, self.kind, self.flags, self.direction, self.src_rank, self.src_dev,
                self.dst_rank, self.dst_dev)

    @property
    def printed_by(self) -> int:
        return self.dst_rank if self.direction == "receive" else self.src_rank

    def to_dict(self) -> dict[str, object]:
        return {
            "channel": self.channel, "conn_index": self.conn_index, "src_rank": self.src_rank,
            "src_dev": self.src_dev, "dst_rank": self.dst_rank, "dst_dev": self.dst_dev,
            "transport": self.transport, "kind": self.kind, "flags": list(self.flags),
            "direction": self.direction, "net_dev": self.net_dev, "proxy_rank": self.proxy_rank,
            "via_rank": self.via_rank, "pid": self.pid, "line": self.line, "label": self.label,
        }


def key_label(key: ConnKey) -> str:
    """:attr:`Connection.label` of a :data:`ConnKey`."""
    transport, kind, flags = key[0], key[1], key[2]
    if transport == "P2P":
        return f"P2P/{kind}"
    if transport in ("NET", "COLLNET"):
        return f"{transport}/{kind}{'/GDRDMA' if 'GDRDMA' in flags else ''}"
    return transport


def key_printer(key: ConnKey) -> int:
    """The rank that printed a line of this key: the receiver of a ``[receive]`` line, else the sender."""
    return key[6] if key[3] == "receive" else key[4]


def _key_dict(key: ConnKey, count: int) -> dict[str, object]:
    return {"transport": key[0], "kind": key[1], "flags": list(key[2]), "direction": key[3], "src_rank": key[4],
            "src_dev": key[5], "dst_rank": key[6], "dst_dev": key[7], "label": key_label(key), "count": count}


@dataclass(frozen=True)
class Claim:
    """One statement of the proof with the log lines that prove it.

    ``lines`` holds at most :data:`MAX_EVIDENCE` ``(line_number, text)`` pairs (1-based
    line numbers of the original log); ``count`` is how many lines support it in all.
    A ``None`` value means *unknown*: the log does not say.
    """

    name: str
    value: object
    lines: tuple[tuple[int, str], ...] = ()
    count: int = 0

    def to_dict(self) -> dict[str, object]:
        return {"value": self.value, "count": self.count, "lines": [[n, t] for n, t in self.lines]}


@dataclass
class TransportProof:
    """What NCCL's INFO log proves about the transport; see the module docstring and docs/transport.md."""

    source: str = "<log>"
    has_info: bool = False
    problem: str | None = None
    state: str = NO_INFO
    complete: bool = False
    completeness: str = ""  # why the log is (or is not) complete, in words
    nccl_version: str | None = None
    # The first KEEP_PER_PAIR connections of each ConnKey (KEEP_TOTAL in all), in line order.
    connections: list[Connection] = field(default_factory=list)
    # Every connection line, counted per ConnKey; empty means "count ``connections``" (a proof built by hand).
    connection_counts: Counter[ConnKey] = field(default_factory=Counter)
    claims: dict[str, Claim] = field(default_factory=dict)
    env_overrides: dict[str, str] = field(default_factory=dict)
    p2p_type: dict[str, int] | None = None
    comms: list[CommInfo] = field(default_factory=list)
    net_plugin: str | None = None
    net_devices: list[str] = field(default_factory=list)
    gdr_support: list[dict[str, object]] = field(default_factory=list)
    nvls_channels: int | None = None
    nvls_supported: bool | None = None
    used_nvls: bool | None = None
    used_collnet: bool | None = None
    collnet_state: str | None = None  # "connected" | "abandoned" | "unconfirmed" | "zero_channels" | None
    device_id_format: str | None = None  # "bus_id" | "device_index"
    warnings: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    # -- summary ---------------------------------------------------------------------------
    @property
    def counts(self) -> Counter[ConnKey]:
        """Every connection line per :data:`ConnKey` (the kept ``connections`` are only the first ones)."""
        if self.connection_counts or not self.connections:
            return self.connection_counts
        return Counter(c.key for c in self.connections)

    @property
    def n_connections(self) -> int:
        return sum(self.counts.values())

    def _of(self, transport: str) -> list[ConnKey]:
        return [k for k in self.counts if k[0] == transport]

    def _used(self, transport: str) -> bool | None:
        if self._of(transport):
            return True
        return False if self.complete else None

    @property
    def used_p2p(self) -> bool | None:
        """True: a P2P connection line; False: none in a complete log; None: none seen, log not complete."""
        return self._used("P2P")

    @property
    def used_shm(self) -> bool | None:
        return self._used("SHM")

    @property
    def used_net(self) -> bool | None:
        return self._used("NET")

    @property
    def p2p_kinds(self) -> list[str]:
        return sorted({k[1] for k in self._of("P2P")})

    @property
    def p2p_read(self) -> bool:
        return any("read" in k[2] for k in self._of("P2P"))

    @property
    def p2p_ce(self) -> bool:
        return any("CE" in k[2] for k in self._of("P2P"))

    @property
    def shm_modes(self) -> list[str]:
        return sorted({k[1] for k in self._of("SHM")})

    @property
    def net_gdrdma(self) -> bool | None:
        """True when every NET connection uses GPUDirect RDMA, False when some don't, None without NET."""
        net = self._of("NET")
        if not net:
            return None
        return all("GDRDMA" in k[2] for k in net)

    @property
    def mnnvl(self) -> bool:
        return any(k[1] == "MNNVL" for k in self.counts) or any(bool(c["mnnvl"]) for c in self.comms)

    @property
    def p2p_level(self) -> str | None:
        """``NCCL_P2P_LEVEL`` as NCCL echoed it: always a path name (``PXB``, ``SYS``), also when set as a number."""
        return self.env_overrides.get("NCCL_P2P_LEVEL")

    @property
    def effective_connections(self) -> list[Connection]:
        """The kept connections that carried data: CollNet ones only when CollNet was confirmed connected."""
        if self.used_collnet:
            return list(self.connections)
        return [c for c in self.connections if c.transport != "COLLNET"]

    @property
    def effective_labels(self) -> Counter[str]:
        """Every connection line that carried data, counted per label (CollNet only when confirmed)."""
        out: Counter[str] = Counter()
        for key, n in self.counts.items():
            if key[0] != "COLLNET" or self.used_collnet:
                out[key_label(key)] += n
        return out

    @property
    def transport(self) -> str:
        """The dominant label: ``P2P/CUMEM``, ``SHM``, ``NET/IB/GDRDMA``, ``mixed: A (n) + B (m)`` or ``none``."""
        counts = self.effective_labels
        if not counts:
            return "none"
        if len(counts) == 1:
            return next(iter(counts))
        parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return "mixed: " + " + ".join(f"{label} ({n})" for label, n in parts)

    # -- checking against an arm -----------------------------------------------------------
    def check(self, expect: str) -> ExpectResult:
        """The expectation judged: ``pass``, ``fail`` (a line says otherwise) or ``inconclusive``."""
        return check_expectation(self, expect)

    def satisfies(self, expect: str) -> tuple[bool, str]:
        """Does the proof *prove* an arm's expectation (``P2P``, ``P2P/CUMEM``, ``SHM``, ``NET/IB``, ``P2P+NET``)?

        True only for a ``pass``; an incomplete log or an unrecognised format is not a proof.
        See :func:`~pytest_p2p.probes.transport_expect.check_expectation` for the matching rules.
        """
        result = self.check(expect)
        return result.outcome == "pass", result.why

    def evidence_lines(self, claim: str) -> list[tuple[int, str]]:
        """The ``(line_number, text)`` pairs that prove ``claim`` (see :attr:`claims` for the names)."""
        try:
            return list(self.claims[claim].lines)
        except KeyError:
            known = ", ".join(sorted(self.claims)) or "none (no NCCL INFO lines)"
            raise KeyError(f"{self.source}: no claim {claim!r} in this transport proof; known: {known}") from None

    # -- persistence -----------------------------------------------------------------------
    def summary(self) -> dict[str, object]:
        return {
            "state": self.state, "complete": self.complete,
            "used_p2p": self.used_p2p, "used_shm": self.used_shm, "used_net": self.used_net,
            "used_nvls": self.used_nvls, "used_collnet": self.used_collnet, "collnet_state": self.collnet_state,
            "p2p_kinds": self.p2p_kinds, "p2p_read": self.p2p_read, "p2p_ce": self.p2p_ce,
            "shm_modes": self.shm_modes, "net_plugin": self.net_plugin, "net_devices": list(self.net_devices),
            "net_gdrdma": self.net_gdrdma, "nvls_channels": self.nvls_channels,
            "nvls_supported": self.nvls_supported, "mnnvl": self.mnnvl, "p2p_level": self.p2p_level,
            "n_connections": self.n_connections,
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": PROOF_SCHEMA, "version": PROOF_VERSION, "source": self.source,
            "has_info": self.has_info, "problem": self.problem, "state": self.state,
            "complete": self.complete, "completeness": self.completeness, "nccl_version": self.nccl_version,
            "transport": self.transport, "summary": self.summary(),
            "env_overrides": dict(self.env_overrides), "p2p_type": self.p2p_type,
            "comms": [dict(c) for c in self.comms], "gdr_support": [dict(g) for g in self.gdr_support],
            "device_id_format": self.device_id_format,
            "connections": [c.to_dict() for c in self.connections],
            "connection_counts": [_key_dict(k, n) for k, n in self.counts.items()],
            "claims": {name: c.to_dict() for name, c in self.claims.items()},
            "warnings": list(self.warnings), "stats": dict(self.stats),
        }
