"""The NCCL transport proof: which path the bytes *actually* took, read from ``NCCL_DEBUG=INFO``.

"P2P enabled is not P2P used." Peer access can be on while NCCL still stages through
host memory (``NCCL_P2P_DISABLE``, ``NCCL_P2P_LEVEL``, a topology NCCL distrusts), and
an arm meant to be "P2P off" can still move data over P2P. The only ground truth NCCL
gives is the per-channel connection line it prints when it wires a channel, e.g.::

    host:694:694 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
    host:753:753 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct
    host:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA

:func:`parse_nccl_log` turns a log (NCCL 2.9 .. 2.30, several processes interleaved,
ANSI colour, CRLF, truncated lines) into a :class:`TransportProof`: every connection,
a summary (P2P/SHM/NET used, P2P kind, ``/read``, ``/CE``, GPUDirect RDMA, NVLS,
CollNet), the environment overrides NCCL echoed, and for each claim the numbered log
lines that prove it. It never raises on text; a log without INFO lines yields a proof
with ``has_info=False`` and a ``problem`` instead of claims. Format strings were taken
from NCCL's ``src/transport/{p2p,shm,net,coll_net,nvls}.cc``, ``src/init.cc`` and
``src/graph/paths.cc`` at each release tag (see docs/transport.md for the differences).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProbeError

PROOF_SCHEMA = "pytest-p2p/transport-proof"
PROOF_VERSION = 1

NO_INFO_PROBLEM = "no NCCL INFO lines: set NCCL_DEBUG=INFO"

# Evidence kept per claim; the count of all supporting lines is kept separately.
MAX_EVIDENCE = 8
MAX_LINE_CHARS = 400

P2P_KINDS = ("CUMEM", "IPC", "direct pointer", "MNNVL", "indirect")

_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# ``host:pid:tid [cudaDev] NCCL INFO`` (the prefix is optional: logs are sometimes re-prefixed).
_MARK_RE = re.compile(
    r"(?:(?P<host>[^\s:\[\]()/]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] )?NCCL (?P<level>INFO|WARN) "
)

_DEV = r"(?P<{0}>\d+)\[(?P<{0}_dev>[0-9a-fA-F]+)\]"
_CHAN = r"^Channel (?P<chan>\d+)(?:/(?P<conn>\d+))? : " + _DEV.format("src") + " -> " + _DEV.format("dst") + " "
_P2P_RE = re.compile(
    _CHAN + r"via P2P/(?:(?P<kind>CUMEM|IPC|MNNVL|direct pointer)|indirect/(?P<via>\d+)\[(?P<via_dev>[0-9a-fA-F]+)\])"
    r"(?P<flags>(?:/read|/CE)*)\s*$"
)
_SHM_RE = re.compile(
    _CHAN + r"via (?:SHM/(?P<send>direct|CE)(?:/(?P<recv>direct|CE))?|(?P<legacy>direct shared memory))\s*$"
)
_NET_RE = re.compile(
    _CHAN + r"\[(?P<dir>send|receive)\] via NET/(?P<plugin>[^/]+?)/(?P<netdev>\d+)(?:\((?P<proxy>\d+)\))?"
    r"(?P<flags>(?:/GDRDMA|\(PCI\)|/Shared)*)\s*$"
)
_COLLNET_RE = re.compile(
    r"^CollNet (?P<chan>\d+)(?:/(?P<conn>\d+))? : (?P<rank>\d+) \[(?P<dir>send|receive)\] via COLLNET/"
    r"(?P<plugin>[^/]+?)/(?P<netdev>\d+)(?P<flags>(?:/GDRDMA|\(PCI\)|/Shared)*)\s*$"
)
_CHANNEL_LIKE_RE = re.compile(r"^(?:Channel|CollNet) \d+.* via ")
_VERSION_RE = re.compile(r"^NCCL version (?P<v>\d+\.\d+\.\d+)(?P<suffix>\S*)")
_ENV_RE = re.compile(r"^(?P<var>NCCL_[A-Z0-9_]+) set by environment to (?P<val>.*?)\.?\s*$")
_P2P_TYPE_RE = re.compile(r"^Check P2P Type isAllDirectP2p (?P<a>\d+) directMode (?P<b>\d+) isAllCudaP2p (?P<c>\d+)")
_COMM_RE = re.compile(
    r"^comm (?P<comm>\S+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
    r"localRanks (?P<lranks>\d+) localRank (?P<lrank>\d+)(?: MNNVL (?P<mnnvl>\d+))?"
)
_INIT_DONE_RE = re.compile(
    r"^(?:\w+ )?comm (?P<comm>\S+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda>\d+)"
    r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+).*Init COMPLETE"
)
_CHANNELS_RE = re.compile(
    r"^(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?:(?P<nvls>\d+) nvls channels, )?"
    r"(?P<p2p>\d+) p2p channels, (?P<perpeer>\d+) p2p channels per peer"
)
_NVLS_SUPPORT_RE = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev (?P<dev>\d+)")
_NVLS_USE_RE = re.compile(r"^(?:Connected NVLS|NVLS comm \S+ (?:rank|headRank) )")
_COLLNET_USE_RE = re.compile(r"^(?:rank \d+ Connected CollNet|Connected Collnet Chains)")
_GDR_HCA_RE = re.compile(
    r"^NET/(?P<plugin>[^:]+?) : GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<hca>\d+) '(?P<name>[^']*)'"
)
_GDR_GPU_RE = re.compile(
    r"^GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU (?P<gpu>\S+) / HCA (?P<hca>\S+) "
    r"\(distance (?P<dist>\d+) (?:<=|>) (?P<level>\d+)\)(?:, read (?P<read>\d+))?(?: mode (?P<mode>\S+))?"
)
_USING_NET_RE = re.compile(r"^Using network (?P<plugin>\S.*?)\s*$")
_NET_DEVS_RE = re.compile(r"^NET/(?P<plugin>[^:]+?) : Using (?P<devs>.*?)\s*$")
_NET_DEV_ITEM_RE = re.compile(r"\[(?P<idx>\d+)\](?P<name>[^\s;\[]+)")


def _clean(line: str) -> str:
    return _ANSI_RE.sub("", line).replace("\x00", "").rstrip("\r\n")


def _short(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 3] + "..."


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    try:
        return tuple(int(x) for x in version.split(".")[:3])
    except ValueError:
        return None


@dataclass(frozen=True)
class Connection:
    """One channel connection NCCL printed: ``channel`` from ``src_rank[src_dev]`` to ``dst_rank[dst_dev]``.

    ``src_dev``/``dst_dev`` are the bracket contents as printed: a hex PCI bus id before
    NCCL 2.18.3, the NVML device index from 2.18.3 on (see ``TransportProof.device_id_format``).
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
        if self.transport == "P2P":
            return f"P2P/{self.kind}"
        if self.transport in ("NET", "COLLNET"):
            gdr = "/GDRDMA" if "GDRDMA" in self.flags else ""
            return f"{self.transport}/{self.kind}{gdr}"
        return self.transport

    def to_dict(self) -> dict[str, Any]:
        return {
            "channel": self.channel, "conn_index": self.conn_index, "src_rank": self.src_rank,
            "src_dev": self.src_dev, "dst_rank": self.dst_rank, "dst_dev": self.dst_dev,
            "transport": self.transport, "kind": self.kind, "flags": list(self.flags),
            "direction": self.direction, "net_dev": self.net_dev, "proxy_rank": self.proxy_rank,
            "via_rank": self.via_rank, "pid": self.pid, "line": self.line, "label": self.label,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Connection:
        return cls(
            channel=int(d["channel"]), src_rank=int(d["src_rank"]), src_dev=str(d["src_dev"]),
            dst_rank=int(d["dst_rank"]), dst_dev=str(d["dst_dev"]), transport=str(d["transport"]),
            kind=str(d["kind"]), line=int(d["line"]), conn_index=d.get("conn_index"),
            flags=tuple(d.get("flags") or ()), direction=d.get("direction"), net_dev=d.get("net_dev"),
            proxy_rank=d.get("proxy_rank"), via_rank=d.get("via_rank"), pid=d.get("pid"),
        )


@dataclass(frozen=True)
class Claim:
    """One statement of the proof with the log lines that prove it.

    ``lines`` holds at most :data:`MAX_EVIDENCE` ``(line_number, text)`` pairs (1-based
    line numbers of the original log); ``count`` is how many lines support it in all.
    """

    name: str
    value: Any
    lines: tuple[tuple[int, str], ...] = ()
    count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "count": self.count, "lines": [[n, t] for n, t in self.lines]}


@dataclass
class TransportProof:
    """What NCCL's INFO log proves about the transport; see the module docstring and docs/transport.md."""

    source: str = "<log>"
    has_info: bool = False
    problem: str | None = None
    nccl_version: str | None = None
    connections: list[Connection] = field(default_factory=list)
    claims: dict[str, Claim] = field(default_factory=dict)
    env_overrides: dict[str, str] = field(default_factory=dict)
    p2p_type: dict[str, int] | None = None
    comms: list[dict[str, Any]] = field(default_factory=list)
    net_plugin: str | None = None
    net_devices: list[str] = field(default_factory=list)
    gdr_support: list[dict[str, Any]] = field(default_factory=list)
    nvls_channels: int | None = None
    nvls_supported: bool | None = None
    used_nvls: bool = False
    used_collnet: bool = False
    device_id_format: str | None = None  # "bus_id" | "device_index"
    warnings: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    # -- summary ---------------------------------------------------------------------------
    def _of(self, transport: str) -> list[Connection]:
        return [c for c in self.connections if c.transport == transport]

    @property
    def used_p2p(self) -> bool:
        return bool(self._of("P2P"))

    @property
    def used_shm(self) -> bool:
        return bool(self._of("SHM"))

    @property
    def used_net(self) -> bool:
        return bool(self._of("NET"))

    @property
    def p2p_kinds(self) -> list[str]:
        return sorted({c.kind for c in self._of("P2P")})

    @property
    def p2p_read(self) -> bool:
        return any("read" in c.flags for c in self._of("P2P"))

    @property
    def p2p_ce(self) -> bool:
        return any("CE" in c.flags for c in self._of("P2P"))

    @property
    def shm_modes(self) -> list[str]:
        return sorted({c.kind for c in self._of("SHM")})

    @property
    def net_gdrdma(self) -> bool | None:
        """True when every NET connection uses GPUDirect RDMA, False when none or some don't, None without NET."""
        net = self._of("NET")
        if not net:
            return None
        return all("GDRDMA" in c.flags for c in net)

    @property
    def mnnvl(self) -> bool:
        return any(c.kind == "MNNVL" for c in self.connections) or any(
            bool(c.get("mnnvl")) for c in self.comms
        )

    @property
    def p2p_level(self) -> str | None:
        """``NCCL_P2P_LEVEL`` as NCCL echoed it: always a path name (``PXB``, ``SYS``), also when set as a number."""
        return self.env_overrides.get("NCCL_P2P_LEVEL")

    @property
    def transport(self) -> str:
        """The dominant label: ``P2P/CUMEM``, ``SHM``, ``NET/IB/GDRDMA``, ``mixed: A (n) + B (m)`` or ``none``."""
        counts = Counter(c.label for c in self.connections)
        if not counts:
            return "none"
        if len(counts) == 1:
            return next(iter(counts))
        parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return "mixed: " + " + ".join(f"{label} ({n})" for label, n in parts)

    # -- checking against an arm -----------------------------------------------------------
    def satisfies(self, expect: str) -> tuple[bool, str]:
        """Does the proof meet an arm's expectation (``P2P``, ``P2P/CUMEM``, ``SHM``, ``NET/IB``, ``P2P+NET``)?

        A part matches a connection label segment by segment, case-insensitively, so
        ``P2P`` matches ``P2P/IPC`` and ``NET/IB`` matches ``NET/IB/GDRDMA``. Every
        connection must match a part and every part must be seen: a "P2P off" arm with a
        single P2P channel fails. The message cites the offending log lines.
        """
        parts = [p.strip() for p in expect.split("+") if p.strip()]
        if not parts:
            return False, f"{self.source}: empty transport expectation {expect!r}"
        if not self.has_info:
            return False, f"{self.source}: cannot prove {expect}: {self.problem or NO_INFO_PROBLEM}"
        if not self.connections:
            return False, f"{self.source}: cannot prove {expect}: {self.problem or 'no channel connection lines'}"
        wrong = [c for c in self.connections if not any(_label_matches(c.label, p) for p in parts)]
        unseen = [p for p in parts if not any(_label_matches(c.label, p) for c in self.connections)]
        if not wrong and not unseen:
            n = len(self.connections)
            return True, f"{self.source}: {n} connection(s) all {expect} (transport {self.transport})"
        msgs = []
        if wrong:
            shown = "; ".join(f"line {c.line}: {c.label}" for c in wrong[:3])
            more = f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""
            msgs.append(
                f"expected {expect} but {len(wrong)} of {len(self.connections)} connection(s) are not "
                f"({self.transport}): {shown}{more}"
            )
        if unseen:
            msgs.append(f"expected {' and '.join(unseen)} but no connection used it (transport {self.transport})")
        prefixes = ("NCCL_P2P", "NCCL_SHM", "NCCL_NET", "NCCL_IB", "NCCL_CUMEM")
        hints = [f"{k}={v}" for k, v in self.env_overrides.items() if k.startswith(prefixes)]
        hint = f"; NCCL echoed {', '.join(hints)}" if hints else ""
        return False, f"{self.source}: " + "; ".join(msgs) + hint

    def evidence_lines(self, claim: str) -> list[tuple[int, str]]:
        """The ``(line_number, text)`` pairs that prove ``claim`` (see :attr:`claims` for the names)."""
        try:
            return list(self.claims[claim].lines)
        except KeyError:
            known = ", ".join(sorted(self.claims)) or "none (no NCCL INFO lines)"
            raise KeyError(f"{self.source}: no claim {claim!r} in this transport proof; known: {known}") from None

    # -- persistence -----------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        return {
            "used_p2p": self.used_p2p, "used_shm": self.used_shm, "used_net": self.used_net,
            "used_nvls": self.used_nvls, "used_collnet": self.used_collnet, "p2p_kinds": self.p2p_kinds,
            "p2p_read": self.p2p_read, "p2p_ce": self.p2p_ce, "shm_modes": self.shm_modes,
            "net_plugin": self.net_plugin, "net_devices": list(self.net_devices), "net_gdrdma": self.net_gdrdma,
            "nvls_channels": self.nvls_channels, "nvls_supported": self.nvls_supported, "mnnvl": self.mnnvl,
            "p2p_level": self.p2p_level,
            "n_connections": len(self.connections),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": PROOF_SCHEMA, "version": PROOF_VERSION, "source": self.source,
            "has_info": self.has_info, "problem": self.problem, "nccl_version": self.nccl_version,
            "transport": self.transport, "summary": self.summary(),
            "env_overrides": dict(self.env_overrides), "p2p_type": self.p2p_type,
            "comms": [dict(c) for c in self.comms], "gdr_support": [dict(g) for g in self.gdr_support],
            "device_id_format": self.device_id_format,
            "connections": [c.to_dict() for c in self.connections],
            "claims": {name: c.to_dict() for name, c in self.claims.items()},
            "warnings": list(self.warnings), "stats": dict(self.stats),
        }


def _label_matches(label: str, expect: str) -> bool:
    have = [s.lower() for s in label.split("/")]
    want = [s.lower() for s in expect.strip().strip("/").split("/")]
    return len(want) <= len(have) and have[: len(want)] == want


def proof_from_dict(d: Any, source: str = "transport_proof.json") -> TransportProof:
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
        summary = d.get("summary") or {}
        claims = {
            name: Claim(
                name, c.get("value"), tuple((int(n), str(t)) for n, t in c.get("lines", [])), int(c.get("count", 0))
            )
            for name, c in (d.get("claims") or {}).items()
        }
        return TransportProof(
            source=str(d.get("source", source)), has_info=bool(d["has_info"]), problem=d.get("problem"),
            nccl_version=d.get("nccl_version"),
            connections=[Connection.from_dict(c) for c in d.get("connections", [])], claims=claims,
            env_overrides={str(k): str(v) for k, v in (d.get("env_overrides") or {}).items()},
            p2p_type=d.get("p2p_type"), comms=[dict(c) for c in d.get("comms", [])],
            net_plugin=summary.get("net_plugin"), net_devices=list(summary.get("net_devices") or []),
            gdr_support=[dict(g) for g in d.get("gdr_support", [])], nvls_channels=summary.get("nvls_channels"),
            nvls_supported=summary.get("nvls_supported"), used_nvls=bool(summary.get("used_nvls")),
            used_collnet=bool(summary.get("used_collnet")), device_id_format=d.get("device_id_format"),
            warnings=list(d.get("warnings", [])), stats=dict(d.get("stats", {})),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProbeError(f"{source}: malformed transport proof ({type(exc).__name__}: {exc})") from None


# -- parsing ---------------------------------------------------------------------------------


@dataclass
class _Msg:
    line: int
    text: str  # the message after "NCCL INFO "
    raw: str  # the cleaned physical line (evidence)
    pid: int | None
    level: str


def iter_nccl_messages(text: str) -> Iterable[_Msg]:
    """Every ``NCCL INFO``/``NCCL WARN`` message with its 1-based physical line number.

    A physical line may hold several messages when processes wrote into the same line
    (interleaving); each is split at the next ``host:pid:tid [dev] NCCL`` prefix. When a
    message was glued to the next prefix without a separator (``...P2P/CUMEMnode1:12:12``)
    the split point is found from the host names seen at the start of other lines.
    """
    lines = [(n, _clean(p)) for n, p in enumerate(text.splitlines(), start=1) if "NCCL " in p]
    known: set[str] = set()
    for _, line in lines:
        for m in _MARK_RE.finditer(line):
            if m.group("host") and (m.start() == 0 or line[m.start() - 1] in " \t)]"):
                known.add(m.group("host"))
    for number, line in lines:
        marks = list(_MARK_RE.finditer(line))
        starts = [_split_point(m, known) for m in marks]
        for i, m in enumerate(marks):
            end = starts[i + 1] if i + 1 < len(marks) else len(line)
            msg = line[m.end():end].strip()
            pid = int(m.group("pid")) if m.group("pid") else None
            yield _Msg(number, msg, _short(line.strip()), pid, m.group("level"))


def _split_point(m: re.Match[str], known: set[str]) -> int:
    host = m.group("host")
    if host and host not in known:
        for k in sorted(known, key=len, reverse=True):
            if host.endswith(k):
                return m.start() + len(host) - len(k)
    return m.start()


class _Builder:
    def __init__(self) -> None:
        self.evidence: dict[str, list[tuple[int, str]]] = {}
        self.counts: Counter[str] = Counter()

    def add(self, claim: str, msg: _Msg) -> None:
        self.counts[claim] += 1
        lines = self.evidence.setdefault(claim, [])
        if len(lines) < MAX_EVIDENCE and (not lines or lines[-1][0] != msg.line):
            lines.append((msg.line, msg.raw))


def _parse_connection(msg: _Msg) -> Connection | None:
    t = msg.text
    if not t.startswith(("Channel ", "CollNet ")):
        return None
    m = _P2P_RE.match(t)
    if m:
        flags = tuple(f for f in m.group("flags").split("/") if f)
        kind = m.group("kind") or "indirect"
        return Connection(
            channel=int(m.group("chan")), conn_index=_int(m.group("conn")), src_rank=int(m.group("src")),
            src_dev=m.group("src_dev"), dst_rank=int(m.group("dst")), dst_dev=m.group("dst_dev"), transport="P2P",
            kind=kind, flags=flags, via_rank=_int(m.group("via")), line=msg.line, pid=msg.pid,
        )
    m = _SHM_RE.match(t)
    if m:
        recv = f"/{m.group('recv')}" if m.group("recv") else ""
        kind = "legacy" if m.group("legacy") else m.group("send") + recv
        flags = ("CE",) if "CE" in kind else ()
        return Connection(
            channel=int(m.group("chan")), conn_index=_int(m.group("conn")), src_rank=int(m.group("src")),
            src_dev=m.group("src_dev"), dst_rank=int(m.group("dst")), dst_dev=m.group("dst_dev"), transport="SHM",
            kind=kind, flags=flags, line=msg.line, pid=msg.pid,
        )
    m = _NET_RE.match(t)
    if m:
        raw = m.group("flags")
        flags = tuple(f for f in ("GDRDMA", "PCI", "Shared") if f in raw)
        return Connection(
            channel=int(m.group("chan")), conn_index=_int(m.group("conn")), src_rank=int(m.group("src")),
            src_dev=m.group("src_dev"), dst_rank=int(m.group("dst")), dst_dev=m.group("dst_dev"), transport="NET",
            kind=m.group("plugin"), flags=flags, direction=m.group("dir"), net_dev=int(m.group("netdev")),
            proxy_rank=_int(m.group("proxy")), line=msg.line, pid=msg.pid,
        )
    m = _COLLNET_RE.match(t)
    if m:
        raw = m.group("flags")
        flags = tuple(f for f in ("GDRDMA", "PCI", "Shared") if f in raw)
        rank = int(m.group("rank"))
        return Connection(
            channel=int(m.group("chan")), conn_index=_int(m.group("conn")), src_rank=rank, src_dev="",
            dst_rank=rank, dst_dev="", transport="COLLNET", kind=m.group("plugin"), flags=flags,
            direction=m.group("dir"), net_dev=int(m.group("netdev")), line=msg.line, pid=msg.pid,
        )
    return None


def _int(s: str | None) -> int | None:
    return int(s) if s is not None else None


def parse_nccl_log(text: str, source: str = "<log>") -> TransportProof:
    """Parse ``NCCL_DEBUG=INFO`` output into a :class:`TransportProof`; never raises on any text."""
    proof = TransportProof(source=source)
    ev = _Builder()
    versions: list[str] = []
    info = warn = 0
    unparsed = 0
    if not isinstance(text, str):  # defensive: bytes from a careless caller
        text = text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else str(text)

    for msg in iter_nccl_messages(text):
        if msg.level == "WARN":
            warn += 1
            continue
        info += 1
        t = msg.text
        conn = _parse_connection(msg)
        if conn is not None:
            proof.connections.append(conn)
            ev.add(f"used_{conn.transport.lower()}", msg)
            if conn.transport == "P2P":
                ev.add("p2p_kind", msg)
                if "read" in conn.flags:
                    ev.add("p2p_read", msg)
                if "CE" in conn.flags:
                    ev.add("p2p_ce", msg)
            if conn.transport == "NET":
                ev.add("net_gdrdma", msg)
            if conn.transport == "SHM":
                ev.add("shm_mode", msg)
            continue
        if _CHANNEL_LIKE_RE.match(t):
            unparsed += 1
            if unparsed <= 3:
                proof.warnings.append(
                    f"line {msg.line}: looks like a channel connection but does not match any NCCL format "
                    f"(truncated?): {_short(t)!r}"
                )
            continue
        m = _VERSION_RE.match(t)
        if m:
            versions.append(m.group("v"))
            ev.add("nccl_version", msg)
            continue
        m = _ENV_RE.match(t)
        if m:
            proof.env_overrides[m.group("var")] = m.group("val").strip()
            ev.add(f"env:{m.group('var')}", msg)
            continue
        m = _P2P_TYPE_RE.match(t)
        if m:
            proof.p2p_type = {
                "isAllDirectP2p": int(m.group("a")), "directMode": int(m.group("b")), "isAllCudaP2p": int(m.group("c"))
            }
            ev.add("p2p_type", msg)
            continue
        m = _COMM_RE.match(t)
        if m:
            proof.comms.append({
                "comm": m.group("comm"), "rank": int(m.group("rank")), "nRanks": int(m.group("nranks")),
                "nNodes": int(m.group("nnodes")), "localRanks": int(m.group("lranks")),
                "localRank": int(m.group("lrank")), "mnnvl": _int(m.group("mnnvl")), "pid": msg.pid, "line": msg.line,
            })
            ev.add("comm", msg)
            continue
        m = _INIT_DONE_RE.search(t)
        if m:
            ev.add("init_complete", msg)
            continue
        m = _CHANNELS_RE.match(t)
        if m:
            if m.group("nvls") is not None:
                n = int(m.group("nvls"))
                proof.nvls_channels = max(proof.nvls_channels or 0, n)
                if n > 0:
                    proof.used_nvls = True
                    ev.add("nvls", msg)
            ev.add("channel_counts", msg)
            continue
        m = _NVLS_SUPPORT_RE.match(t)
        if m:
            supported = not m.group("not")
            proof.nvls_supported = supported if proof.nvls_supported is None else (proof.nvls_supported or supported)
            ev.add("nvls_support", msg)  # support is not use: never feeds the "nvls" claim
            continue
        if _NVLS_USE_RE.match(t):
            proof.used_nvls = True
            ev.add("nvls", msg)
            continue
        if _COLLNET_USE_RE.match(t):
            proof.used_collnet = True
            ev.add("collnet", msg)
            continue
        m = _GDR_HCA_RE.match(t)
        if m:
            proof.gdr_support.append({
                "scope": "hca", "plugin": m.group("plugin"), "hca": m.group("hca"), "name": m.group("name"),
                "enabled": m.group("state") == "Enabled", "line": msg.line,
            })
            ev.add("gdr_support", msg)
            continue
        m = _GDR_GPU_RE.match(t)
        if m:
            proof.gdr_support.append({
                "scope": "gpu", "gpu": m.group("gpu"), "hca": m.group("hca"), "enabled": m.group("state") == "Enabled",
                "distance": int(m.group("dist")), "level": int(m.group("level")), "read": _int(m.group("read")),
                "mode": m.group("mode"), "line": msg.line,
            })
            ev.add("gdr_support", msg)
            continue
        m = _USING_NET_RE.match(t)
        if m:
            proof.net_plugin = m.group("plugin")
            ev.add("net_plugin", msg)
            continue
        m = _NET_DEVS_RE.match(t)
        if m:
            found = [f"{m.group('plugin')}:{d.group('name')}" for d in _NET_DEV_ITEM_RE.finditer(m.group("devs"))]
            proof.net_devices.extend(n for n in found if n not in proof.net_devices)
            if found:  # "NET/IB : Using [RO]; OOB eth0" names no device
                ev.add("net_devices", msg)
            continue

    if any(c.transport == "COLLNET" for c in proof.connections):
        proof.used_collnet = True
    proof.stats = {"lines": len(text.splitlines()), "info_lines": info, "warn_lines": warn,
                   "unparsed_connection_lines": unparsed}
    proof.has_info = info > 0
    if versions:
        proof.nccl_version = versions[0]
        if len(set(versions)) > 1:
            proof.warnings.append(f"several NCCL versions in one log: {', '.join(sorted(set(versions)))}")
    proof.device_id_format = _device_id_format(proof)
    if not proof.has_info:
        proof.problem = NO_INFO_PROBLEM if not warn else (
            f"{NO_INFO_PROBLEM} (only {warn} NCCL WARN line(s): NCCL_DEBUG=WARN hides the transport)"
        )
        return proof
    if not proof.connections:
        proof.problem = (
            "NCCL INFO lines but no channel connection lines: no communicator connected a peer "
            "(single rank, no collective ran, or NCCL_DEBUG_SUBSYS excludes INIT)"
        )
    proof.claims = _claims(proof, ev)
    return proof


def _device_id_format(proof: TransportProof) -> str | None:
    devs = [d for c in proof.connections for d in (c.src_dev, c.dst_dev) if d]
    if not devs:
        return None
    v = _version_tuple(proof.nccl_version)
    if v is not None:
        # 2.18.1's P2P/CUMEM line already printed "%x" of the bus id; only 2.18.3 switched to nvmlDev.
        return "bus_id" if v < (2, 18, 3) else "device_index"
    if any(len(d) >= 4 or any(ch in "abcdefABCDEF" for ch in d) for d in devs):
        return "bus_id"
    return "device_index"


def _claims(proof: TransportProof, ev: _Builder) -> dict[str, Claim]:
    values: dict[str, Any] = {
        "nccl_version": proof.nccl_version,
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
        "comm": [{k: c[k] for k in ("rank", "nRanks", "nNodes", "localRanks")} for c in proof.comms],
        "channel_counts": proof.nvls_channels,
        "init_complete": ev.counts.get("init_complete", 0),
        "transport": proof.transport,
    }
    for var, val in proof.env_overrides.items():
        values[f"env:{var}"] = val
    # "used_collnet" is proven by COLLNET connection lines; the "collnet" claim by "Connected CollNet" lines.
    transport_lines: list[tuple[int, str]] = []
    for name in ("used_p2p", "used_shm", "used_net", "used_collnet"):
        transport_lines.extend(ev.evidence.get(name, [])[:2])
    ev.evidence["transport"] = sorted(transport_lines)[:MAX_EVIDENCE]
    ev.counts["transport"] = len(proof.connections)
    claims = {}
    for name, value in values.items():
        lines = ev.evidence.get(name, [])
        if value is False and name.startswith("used_"):
            lines = ev.evidence["transport"]  # absence is proven by what was used instead
        claims[name] = Claim(name, value, tuple(lines), ev.counts.get(name, len(lines)))
    return claims
