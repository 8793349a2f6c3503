"""Parser for cuda-samples ``p2pBandwidthLatencyTest`` output.

Rig owners often have this output from a vendor acceptance run or a forum post; parsing
it lets those numbers sit next to our own probes (and the seeds' evidence). The format
(``Samples/5_Domain_Specific/p2pBandwidthLatencyTest``): ``Device: i, name, pciBusID: x,
pciDeviceID: x, pciDomainID:x`` lines, ``Device=i CAN|CANNOT Access Peer Device=j`` lines,
a ``P2P Connectivity Matrix``, then square matrices under headings such as
``Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)`` (header ``D\\D``) and
latency headings whose GPU matrix (header ``GPU``) is followed by a CPU matrix (``CPU``).
Older samples print ``... Bandwidth Matrix`` / ``Latency Matrix`` without ``(P2P Writes)``.
Quoted excerpts may collapse the spacing or drop rows; ``strict=False`` keeps such partial
matrices (missing cells are ``None``), ``strict=True`` (the default) calls them truncated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import ProbeError
from ..jsontypes import JSONObject

_HEADINGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Unidirectional P2P=Disabled Bandwidth.*Matrix"), "unidirectional_bw_disabled"),
    (re.compile(r"Unidirectional P2P=Enabled Bandwidth \(P2P Reads\) Matrix"), "unidirectional_bw_enabled_read"),
    (re.compile(r"Unidirectional P2P=Enabled Bandwidth.*Matrix"), "unidirectional_bw_enabled"),
    (re.compile(r"Bidirectional P2P=Disabled Bandwidth.*Matrix"), "bidirectional_bw_disabled"),
    (re.compile(r"Bidirectional P2P=Enabled Bandwidth.*Matrix"), "bidirectional_bw_enabled"),
    (re.compile(r"P2P=Disabled Latency.*Matrix"), "latency_disabled"),
    (re.compile(r"P2P=Enabled Latency \(P2P Reads\) Matrix"), "latency_enabled_read"),
    (re.compile(r"P2P=Enabled Latency.*Matrix"), "latency_enabled"),
)
_DEVICE_RE = re.compile(
    r"^Device: (?P<i>\d{1,6}), (?P<name>.*?), pciBusID: (?P<bus>[0-9a-fA-F]{1,8}), "
    r"pciDeviceID: (?P<dev>[0-9a-fA-F]{1,8}), pciDomainID:\s*(?P<dom>[0-9a-fA-F]{1,8})"
)
_ACCESS_RE = re.compile(r"^Device=(?P<i>\d{1,6}) (?P<can>CAN|CANNOT) Access Peer Device=(?P<j>\d{1,6})")
_HEADER_RE = re.compile(r"^\s*(?P<kind>D\\D|GPU|CPU)(?P<cols>(?:\s+\d{1,6})+)\s*$")
_ROW_RE = re.compile(r"^\s*(?P<i>\d{1,6})\s+(?P<vals>.*?)\s*$")
MAX_DEVICES = 1024  # no node has more GPUs; a header naming more is not this tool's output
_NUM_RE = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^(?:-?inf|nan)$", re.IGNORECASE)


@dataclass
class P2PMatrixResult:
    """Devices, peer access and every matrix, indexed ``[row][col]`` in the header's device order."""

    devices: list[JSONObject] = field(default_factory=list)  # index, name, PCI ids as the output gives them
    can_access: dict[tuple[int, int], bool] = field(default_factory=dict)
    matrices: dict[str, list[list[float | None]]] = field(default_factory=dict)
    labels: dict[str, list[int]] = field(default_factory=dict)  # device index of each row/column
    partial: list[str] = field(default_factory=list)  # matrices with missing rows (strict=False only)

    def value(self, matrix: str, src: int, dst: int) -> float | None:
        """``matrix[src][dst]`` by device index (not position), e.g. ``value("latency_gpu_enabled", 1, 2)``."""
        labels = self.labels[matrix]
        return self.matrices[matrix][labels.index(src)][labels.index(dst)]

    def to_dict(self) -> JSONObject:
        return {
            "devices": [dict(d) for d in self.devices],
            "can_access": {f"{i},{j}": v for (i, j), v in sorted(self.can_access.items())},
            "matrices": {k: [list(r) for r in v] for k, v in self.matrices.items()},
            "labels": {k: list(v) for k, v in self.labels.items()},
            "partial": list(self.partial),
        }


def parse_p2p_bandwidth_latency(text: str, source: str = "<p2pBandwidthLatencyTest output>", *,
                                strict: bool = True) -> P2PMatrixResult:
    """Parse ``p2pBandwidthLatencyTest`` stdout; :class:`ProbeError` names the line of anything truncated.

    Total: any text gives a result or a :class:`ProbeError` (never another exception).
    """
    try:
        return _parse(text, source, strict)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError) as exc:
        raise ProbeError(f"{source}: unreadable p2pBandwidthLatencyTest output ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None


def _parse(text: str, source: str, strict: bool) -> P2PMatrixResult:
    res = P2PMatrixResult()
    lines = text.splitlines()
    heading: str | None = None  # the matrix family announced by the last heading
    current: str | None = None  # the matrix whose rows are being read
    cols: list[int] = []
    rows: dict[int, list[float | None]] = {}
    opened_at = 0
    announced = 0  # line of a heading whose matrix has not started yet (0: none pending)

    def announce(name: str, number: int) -> None:
        nonlocal heading, announced
        if announced and strict:
            raise ProbeError(
                f"{source}: line {number}: truncated p2pBandwidthLatencyTest output: the heading on line "
                f"{announced} ({heading}) has no matrix under it before the next heading"
            )
        heading, announced = name, number

    def close(number: int) -> None:
        nonlocal current, rows
        if current is None:
            return
        missing = [c for c in cols if c not in rows]
        if missing and (strict or not rows):
            raise ProbeError(
                f"{source}: line {number}: truncated p2pBandwidthLatencyTest output: matrix {current!r} "
                f"(from line {opened_at}) has no row for device(s) {missing} of {cols}"
            )
        if missing:
            res.partial.append(current)
        if current == "connectivity":
            for i, vals in rows.items():
                for j, v in zip(cols, vals, strict=True):
                    if i != j and v is not None:
                        res.can_access.setdefault((i, j), bool(v))
        else:
            res.matrices[current] = [rows.get(i, [None] * len(cols)) for i in cols]
            res.labels[current] = list(cols)
        current, rows = None, {}

    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        s = line.strip()
        if current is not None:
            m = _ROW_RE.match(line)
            if m and int(m.group("i")) in cols and int(m.group("i")) not in rows:
                vals = m.group("vals").split()
                if all(_NUM_RE.match(v) for v in vals):
                    if len(vals) != len(cols):
                        raise ProbeError(
                            f"{source}: line {number}: truncated matrix row for device {m.group('i')} in "
                            f"{current!r}: {len(vals)} value(s) for {len(cols)} column(s): {s!r}"
                        )
                    rows[int(m.group("i"))] = [float(v) for v in vals]
                    if len(rows) == len(cols):
                        close(number)
                    continue
            if s == "" and not rows:
                continue
            close(number)
        if not s:
            continue
        if m := _DEVICE_RE.match(s):
            res.devices.append({
                "index": int(m.group("i")), "name": m.group("name"), "pci_bus_id": int(m.group("bus"), 16),
                "pci_device_id": int(m.group("dev"), 16), "pci_domain_id": int(m.group("dom"), 16),
                "bus_id": "{:04X}:{:02X}:{:02X}.0".format(*(int(m.group(k), 16) for k in ("dom", "bus", "dev"))),
            })
            continue
        if m := _ACCESS_RE.match(s):
            res.can_access[(int(m.group("i")), int(m.group("j")))] = m.group("can") == "CAN"
            continue
        if s.startswith("P2P Connectivity Matrix"):
            announce("connectivity", number)
            continue
        for pattern, name in _HEADINGS:
            if pattern.search(s):
                announce(name, number)
                break
        else:
            m = _HEADER_RE.match(line)
            if m and heading is not None:
                cols = [int(c) for c in m.group("cols").split()]
                if len(cols) > MAX_DEVICES or len(set(cols)) != len(cols):
                    raise ProbeError(f"{source}: line {number}: a matrix header with {len(cols)} column(s) "
                                     f"({len(set(cols))} distinct) is not p2pBandwidthLatencyTest output")
                kind = m.group("kind")
                if heading.startswith("latency_"):
                    suffix = heading[len("latency_"):]
                    current = f"latency_{'cpu' if kind == 'CPU' else 'gpu'}_{suffix}"
                else:
                    current = heading
                opened_at, announced = number, 0
                rows = {}
            continue
        # a heading line: its matrix follows (announce() and _check_complete() catch one left without)
    close(len(lines) + 1)
    _check_complete(res, heading, source, strict, len(lines))
    if not res.devices:  # excerpts without the "Device: i, ..." lines: the matrices still name the devices
        indices = sorted({i for labels in res.labels.values() for i in labels} | {i for p in res.can_access for i in p})
        res.devices = [{"index": i} for i in indices]
    return res


def _check_complete(res: P2PMatrixResult, heading: str | None, source: str, strict: bool, n_lines: int) -> None:
    if not res.matrices and not res.can_access:
        raise ProbeError(
            f"{source}: no p2pBandwidthLatencyTest matrices found (expected headings like "
            f"'Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)')"
        )
    if heading is None or heading == "connectivity":
        return
    if heading.startswith("latency_"):
        suffix = heading[len("latency_"):]
        wanted = [f"latency_gpu_{suffix}", f"latency_cpu_{suffix}"] if strict else [f"latency_gpu_{suffix}"]
    else:
        wanted = [heading]
    missing = [w for w in wanted if w not in res.matrices]
    if missing:
        raise ProbeError(
            f"{source}: line {n_lines}: truncated p2pBandwidthLatencyTest output: the last heading announces "
            f"{', '.join(missing)} but the output ends before it"
        )
