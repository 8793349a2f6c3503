"""Reading ``NCCL_DEBUG=INFO`` text: messages out of physical lines, connection lines out of messages.

This is the lexical half of the transport proof (:mod:`.transport` builds the proof). It
is written to be *total and linear*: any text, however hostile, yields messages in time
proportional to its length — no regular expression here can backtrack over more than a
bounded window, every number is at most 9 digits before ``int()`` sees it (a 5000-digit
"rank" is not a rank), and a physical line is cut at :data:`MAX_PHYSICAL_LINE` characters.

Formats are those of NVIDIA/nccl's ``INFO(...)`` calls from 2.4 to 2.30 (``Ring NN :`` lines
of 2.4-2.6, ``Channel NN[/C] :`` after, the ``comm 0x.. nRanks N`` suffix some builds
append); docs/transport.md lists them by version.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

# A physical line longer than this is parsed only up to here (a warning says so).
MAX_PHYSICAL_LINE = 65536
# Evidence keeps at most this much of a line.
MAX_LINE_CHARS = 400
# Host names remembered for splitting glued lines (bounded: a hostile log may invent millions).
MAX_KNOWN_HOSTS = 256
# How far back from "NCCL INFO" a ``host:pid:tid [dev] `` prefix may start.
_PREFIX_WINDOW = 160

_ANSI_RE = re.compile(r"\x1b\[[0-?]{0,32}[ -/]{0,8}[@-~]|\x1b[@-Z\\-_]")
# splitlines() semantics (line numbers must match what an editor and str.splitlines show).
_LINE_RE = re.compile(r"[^\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]*(?:\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029])?")
_HOST_STOP = frozenset(" \t:[]()/")
_MARKS = ("NCCL INFO ", "NCCL WARN ")

_N = r"\d{1,9}"
_HEX = r"[0-9a-fA-F]{1,16}"


def _dev(name: str) -> str:
    return r"(?P<" + name + ">" + _N + r")(?:\[(?P<" + name + "_dev>" + _HEX + r")\])?"


_CHAN = r"^(?P<kw>Channel|Ring) (?P<chan>\d{1,4})(?:/(?P<conn>\d{1,4}))? : " + _dev("src") + " -> " + _dev("dst") + " "
# Some builds (RCCL, vendor NCCLs) append the communicator: "... via P2P/IPC comm 0x7f.. nRanks 32 [busId 1a000]".
_TAIL = r"(?:\s+comm (?:0x)?[0-9a-fA-F]{1,16} nRanks \d{1,9}(?: busId [0-9a-fA-F]{1,16})?)?\s*$"
_P2P_RE = re.compile(
    _CHAN + r"via P2P/(?:(?P<kind>CUMEM|IPC|MNNVL|direct pointer)|indirect/(?P<via>" + _N + r")(?:\[" + _HEX + r"\])?)"
    r"(?P<flags>(?:/read|/CE){0,2})" + _TAIL
)
_SHM_RE = re.compile(
    _CHAN + r"via (?:SHM/(?P<send>direct|CE)(?:/(?P<recv>direct|CE))?|(?P<legacy>direct shared memory))" + _TAIL
)
_NET_RE = re.compile(
    _CHAN + r"\[(?P<dir>send|receive)\] via NET/(?P<plugin>[^/\s][^/]{0,63}?)/(?P<netdev>\d{1,4})"
    r"(?:\((?P<proxy>" + _N + r")\))?(?P<flags>(?:/GDRDMA|\(PCI\)|/Shared){0,3})" + _TAIL
)
_COLLNET_RE = re.compile(
    r"^CollNet (?P<chan>\d{1,4})(?:/(?P<conn>\d{1,4}))? : (?P<rank>" + _N + r") \[(?P<dir>send|receive)\] via "
    r"COLLNET/(?P<plugin>[^/\s][^/]{0,63}?)/(?P<netdev>\d{1,4})(?P<flags>(?:/GDRDMA|\(PCI\)|/Shared){0,3})" + _TAIL
)
# Two connection lines glued into one message by spaces: split before the second keyword.
_GLUED_RE = re.compile(r"\s+(?=(?:Channel|Ring|CollNet) \d{1,4}(?:/\d{1,4})? : )")


@dataclass(frozen=True)
class NcclMessage:
    """One ``NCCL INFO``/``NCCL WARN`` message (or a bare banner) and where it was."""

    line: int  # 1-based physical line number in the original text
    text: str  # the message after "NCCL INFO " (the whole line for a banner)
    raw: str  # the cleaned physical line, shortened (evidence)
    pid: int | None
    level: str  # "INFO" | "WARN" | "BANNER"


@dataclass(frozen=True)
class ParsedConnection:
    """The fields of one connection line (the proof adds line and pid)."""

    channel: int
    src_rank: int
    src_dev: str
    dst_rank: int
    dst_dev: str
    transport: str  # "P2P" | "SHM" | "NET" | "COLLNET"
    kind: str
    conn_index: int | None = None
    flags: tuple[str, ...] = ()
    direction: str | None = None
    net_dev: int | None = None
    proxy_rank: int | None = None
    via_rank: int | None = None
    ring_era: bool = False  # printed as "Ring NN :" (NCCL 2.4-2.6)

    @property
    def printed_by(self) -> int:
        """The rank whose process printed the line: the receiver of a ``[receive]`` line, else the sender."""
        return self.dst_rank if self.direction == "receive" else self.src_rank


def clean(line: str) -> str:
    """Drop ANSI colour codes, NUL bytes and line ends."""
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    return line.replace("\x00", "").rstrip("\r\n")


def short(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 3] + "..."


def physical_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(number, line)`` as ``str.splitlines`` numbers them, without building the list."""
    number = 0
    for m in _LINE_RE.finditer(text):
        if m.start() == m.end():
            break
        number += 1
        yield number, m.group()


def _interesting(line: str) -> bool:
    return "NCCL" in line or "nccl==" in line


@dataclass(frozen=True)
class _Mark:
    start: int  # where the prefix (or "NCCL") starts
    end: int  # just after "NCCL INFO "
    host: str | None
    pid: int | None
    level: str


def _prefix_before(line: str, p: int) -> tuple[int, str | None, int | None]:
    """The ``host:pid:tid [dev] `` prefix ending at ``p``: (start, host, pid), or (p, None, None).

    Parsed backwards by hand over at most :data:`_PREFIX_WINDOW` characters, so a line of
    nothing but "NCCL INFO" costs a constant per mark.
    """
    if p < 2 or line[p - 2:p] != "] ":
        return p, None, None
    b = line.rfind("[", max(0, p - 12), p - 2)
    if b < 1 or not line[b + 1:p - 2].isdigit() or line[b - 1] != " ":
        return p, None, None
    q = b - 1  # the space before "["
    lo = max(0, q - _PREFIX_WINDOW)
    i = q
    colons: list[int] = []
    while i > lo:
        ch = line[i - 1]
        if ch == ":":
            if len(colons) == 2:
                break
            colons.append(i - 1)
        elif ch in _HOST_STOP or ch.isspace():
            break
        i -= 1
    if len(colons) != 2:
        return p, None, None
    tid, pid = line[colons[0] + 1:q], line[colons[1] + 1:colons[0]]
    host = line[i:colons[1]]
    if not (host and pid.isdigit() and tid.isdigit() and len(pid) <= 9 and len(tid) <= 12):
        return p, None, None
    return i, host, int(pid)


def _marks(line: str) -> list[_Mark]:
    out: list[_Mark] = []
    pos = 0
    while True:
        p = line.find("NCCL ", pos)
        if p < 0:
            return out
        level = line[p + 5:p + 10]
        if level in ("INFO ", "WARN "):
            start, host, pid = _prefix_before(line, p)
            out.append(_Mark(start, p + 10, host, pid, level.strip()))
            pos = p + 10
        else:
            pos = p + 5


def known_hosts(text: str) -> set[str]:
    """Host names seen where a prefix clearly starts (line start, or after a space, ``)`` or ``]``)."""
    known: set[str] = set()
    for _, raw in physical_lines(text):
        if len(known) >= MAX_KNOWN_HOSTS:
            break
        if "NCCL " not in raw:
            continue
        line = clean(raw[:MAX_PHYSICAL_LINE])
        for m in _marks(line):
            if m.host and (m.start == 0 or line[m.start - 1] in " \t)]>"):
                known.add(m.host)
    return known


def _split_point(m: _Mark, known: set[str]) -> int:
    """Where a mark really starts: ``...P2P/CUMEMnode1:12:12`` glued without a separator starts at ``node1``."""
    host = m.host
    if host and host not in known:
        best = max((k for k in known if host.endswith(k)), key=len, default=None)
        if best is not None:
            return m.start + len(host) - len(best)
    return m.start


def iter_nccl_messages(text: str, known: set[str] | None = None,
                       long_lines: list[int] | None = None) -> Iterator[NcclMessage]:
    """Every NCCL message with its physical line number; linear in ``len(text)``.

    A physical line may hold several messages when processes wrote into the same line;
    each is split at the next ``host:pid:tid [dev] NCCL`` prefix (a glued one is found from
    the host names of :func:`known_hosts`). A line without any ``NCCL INFO/WARN`` but with
    ``NCCL version X`` (the unprefixed banner of older NCCLs) or ``nccl==X`` (vLLM) is
    yielded as a ``BANNER``. Line numbers of lines longer than :data:`MAX_PHYSICAL_LINE`
    are appended to ``long_lines``.
    """
    hosts = known_hosts(text) if known is None else known
    for number, raw in physical_lines(text):
        if not _interesting(raw):
            continue
        if len(raw) > MAX_PHYSICAL_LINE:
            raw = raw[:MAX_PHYSICAL_LINE]
            if long_lines is not None and len(long_lines) < 100:
                long_lines.append(number)
        line = clean(raw)
        marks = _marks(line)
        if not marks:
            if "NCCL version " in line or "nccl==" in line:
                yield NcclMessage(number, line.strip(), short(line.strip()), None, "BANNER")
            continue
        starts = [_split_point(m, hosts) for m in marks]
        evidence = short(line.strip())
        for i, m in enumerate(marks):
            end = starts[i + 1] if i + 1 < len(marks) else len(line)
            msg = line[m.end:max(end, m.end)].strip()
            if msg.startswith(("Channel ", "Ring ", "CollNet ")) and " via " in msg:
                parts = _GLUED_RE.split(msg)
                for part in parts:
                    yield NcclMessage(number, part.strip(), evidence, m.pid, m.level)
            else:
                yield NcclMessage(number, msg, evidence, m.pid, m.level)


def _int(s: str | None) -> int | None:
    return int(s) if s is not None else None


def looks_like_connection(text: str) -> bool:
    """Starts like a connection line (``Channel 03 ... via``): a miss here is an unrecognised format."""
    return text.startswith(("Channel ", "Ring ", "CollNet ")) and " via " in text


def parse_connection(text: str) -> ParsedConnection | None:
    """The connection a message describes, or None (not a connection line, or a format we do not know)."""
    if not looks_like_connection(text):
        return None
    m = _P2P_RE.match(text)
    if m:
        return ParsedConnection(
            channel=int(m["chan"]), conn_index=_int(m["conn"]), src_rank=int(m["src"]), src_dev=m["src_dev"] or "",
            dst_rank=int(m["dst"]), dst_dev=m["dst_dev"] or "", transport="P2P", kind=m["kind"] or "indirect",
            flags=tuple(f for f in m["flags"].split("/") if f), via_rank=_int(m["via"]), ring_era=m["kw"] == "Ring",
        )
    m = _SHM_RE.match(text)
    if m:
        kind = "legacy" if m["legacy"] else m["send"] + (f"/{m['recv']}" if m["recv"] else "")
        return ParsedConnection(
            channel=int(m["chan"]), conn_index=_int(m["conn"]), src_rank=int(m["src"]), src_dev=m["src_dev"] or "",
            dst_rank=int(m["dst"]), dst_dev=m["dst_dev"] or "", transport="SHM", kind=kind,
            flags=("CE",) if "CE" in kind else (), ring_era=m["kw"] == "Ring",
        )
    m = _NET_RE.match(text)
    if m:
        return ParsedConnection(
            channel=int(m["chan"]), conn_index=_int(m["conn"]), src_rank=int(m["src"]), src_dev=m["src_dev"] or "",
            dst_rank=int(m["dst"]), dst_dev=m["dst_dev"] or "", transport="NET", kind=m["plugin"].strip(),
            flags=tuple(f for f in ("GDRDMA", "PCI", "Shared") if f in m["flags"]), direction=m["dir"],
            net_dev=int(m["netdev"]), proxy_rank=_int(m["proxy"]), ring_era=m["kw"] == "Ring",
        )
    m = _COLLNET_RE.match(text)
    if m:
        rank = int(m["rank"])
        return ParsedConnection(
            channel=int(m["chan"]), conn_index=_int(m["conn"]), src_rank=rank, src_dev="", dst_rank=rank, dst_dev="",
            transport="COLLNET", kind=m["plugin"].strip(),
            flags=tuple(f for f in ("GDRDMA", "PCI", "Shared") if f in m["flags"]), direction=m["dir"],
            net_dev=int(m["netdev"]),
        )
    return None
