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

import heapq
import re
from collections.abc import Iterator
from dataclasses import dataclass

from .transport_model import Connection

# A physical line longer than this is parsed only up to here (a warning says so).
MAX_PHYSICAL_LINE = 65536
# Evidence keeps at most this much of a line.
MAX_LINE_CHARS = 400
# Host names remembered for splitting glued lines (bounded: a hostile log may invent millions).
MAX_KNOWN_HOSTS = 256
# How far back from "NCCL INFO" a ``host:pid:tid [dev] `` prefix may start.
_PREFIX_WINDOW = 160

_ANSI_RE = re.compile(r"\x1b\[[0-?]{0,32}[ -/]{0,8}[@-~]|\x1b[@-Z\\-_]")
_PREFIX_RE = re.compile(r"(?P<host>[^\s:\[\]()/]{1,128}):(?P<pid>\d{1,9}):\d{1,12} \[\d{1,6}\] $")
_LEAD_RE = re.compile(
    r"(?P<host>[^\s:\[\]()/]{1,128}):(?P<pid>\d{1,9}):\d{1,12} \[\d{1,6}\] NCCL (?P<level>INFO|WARN) "
)
# Where a prefix clearly starts a line: after whitespace, "(Worker pid=1) " or "[1,0]<stdout>:" wrappers.
_HOST_AT_START_RE = re.compile(
    r"(?m)^(?:\s|\([^()]{0,80}\)|\[[^\]]{0,40}\](?:<\w{1,10}>)?:)*(?P<host>[^\s:\[\]()/]{1,128}):\d{1,9}:\d{1,12} "
    r"\[\d{1,6}\] NCCL "
)
# Every kind of line the proof reads contains one of these (see transport.py and nccl_lines.parse_connection).
RELEVANT_KEYWORDS = (
    " via ", "NCCL version", "nccl==", "set by environment", "Check P2P Type", "nRanks ", "Init COMPLETE",
    "coll channels", "NVLS", "CollNet", "Collnet", "GPU Direct RDMA", "Using network", "NET/", "NCCL WARN ",
)

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


@dataclass(slots=True)
class NcclMessage:
    """One ``NCCL INFO``/``NCCL WARN`` message (or a bare banner) and where it was."""

    line: int  # 1-based physical line number in the original text
    text: str  # the message after "NCCL INFO " (the whole line for a banner)
    physical: str  # the cleaned physical line
    pid: int | None
    level: str  # "INFO" | "WARN" | "BANNER"

    @property
    def raw(self) -> str:
        """The physical line as evidence: stripped and shortened (only cited lines pay for it)."""
        return short(self.physical.strip())


def clean(line: str) -> str:
    """Drop ANSI colour codes, NUL bytes and line ends."""
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    return line.replace("\x00", "").rstrip("\r\n")


def short(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 3] + "..."


def physical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Every ``(number, line)``, numbered by ``\\n`` as ``grep -n`` and editors do (a lone ``\\r`` is no break)."""
    pos, number, n = 0, 0, len(text)
    while pos < n:
        end = text.find("\n", pos)
        end = n if end < 0 else end
        number += 1
        yield number, text[pos:min(end, pos + MAX_PHYSICAL_LINE + 1)]
        pos = end + 1


def relevant_lines(text: str) -> Iterator[tuple[int, str, bool]]:
    """``(number, line, cut)`` of the lines that can hold something the proof reads, found at C speed.

    Each keyword of :data:`RELEVANT_KEYWORDS` is looked for with ``str.find`` (one pass of
    the text per keyword in all), and the scan jumps from the nearest hit to the next line,
    so the Python work is per *relevant* line, not per line: a 50 MB log of mostly ``Trees``
    / ``Channel NN/MM : 0 1`` lines costs little more than the scans. ``cut`` says the line
    was longer than :data:`MAX_PHYSICAL_LINE` and only its start is returned.
    """
    n = len(text)
    heap = [(p, i) for i, p in enumerate(text.find(kw) for kw in RELEVANT_KEYWORDS) if p >= 0]
    heapq.heapify(heap)
    counted_to, number = 0, 1
    while heap:
        hit = heap[0][0]
        start = text.rfind("\n", 0, hit) + 1
        end = text.find("\n", hit)
        end = n if end < 0 else end
        number += text.count("\n", counted_to, start)
        counted_to = start
        cut = end - start > MAX_PHYSICAL_LINE
        yield number, text[start:start + MAX_PHYSICAL_LINE] if cut else text[start:end], cut
        while heap and heap[0][0] <= end:  # every keyword found on this line: look again after it
            _, i = heapq.heappop(heap)
            p = text.find(RELEVANT_KEYWORDS[i], end + 1)
            if p >= 0:
                heapq.heappush(heap, (p, i))


@dataclass(slots=True)
class _Mark:
    start: int  # where the prefix (or "NCCL") starts
    end: int  # just after "NCCL INFO "
    host: str | None
    pid: int | None
    level: str


def _prefix_before(line: str, p: int) -> tuple[int, str | None, int | None]:
    """The ``host:pid:tid [dev] `` prefix ending at ``p``: (start, host, pid), or (p, None, None).

    Searched only in the :data:`_PREFIX_WINDOW` characters before ``p`` with a pattern whose
    every repetition is bounded, so a line of nothing but "NCCL INFO" costs a constant per mark.
    """
    if p < 2 or line[p - 2:p] != "] ":
        return p, None, None
    m = _PREFIX_RE.search(line, max(0, p - _PREFIX_WINDOW), p)
    if m is None:
        return p, None, None
    return m.start(), m["host"], int(m["pid"])


def _marks(line: str) -> list[_Mark]:
    out: list[_Mark] = []
    pos = 0
    lead = _LEAD_RE.match(line, 0, min(len(line), 512))
    if lead is not None:  # the common case: one prefixed message starting the line
        out.append(_Mark(lead.start("host"), lead.end(), lead["host"], int(lead["pid"]), lead["level"]))
        pos = lead.end()
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
    """Host names seen where a prefix clearly starts a line (for splitting glued lines; bounded)."""
    known: set[str] = set()
    for m in _HOST_AT_START_RE.finditer(text):
        known.add(m["host"])
        if len(known) >= MAX_KNOWN_HOSTS:
            break
    return known


class LazyHosts:
    """:func:`known_hosts`, computed on first need: only a line with glued prefixes needs it."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._hosts: set[str] | None = None

    def get(self) -> set[str]:
        if self._hosts is None:
            self._hosts = known_hosts(self._text)
        return self._hosts


def _split_point(m: _Mark, known: set[str]) -> int:
    """Where a mark really starts: ``...P2P/CUMEMnode1:12:12`` glued without a separator starts at ``node1``."""
    host = m.host
    if host and host not in known:
        best = max((k for k in known if host.endswith(k)), key=len, default=None)
        if best is not None:
            return m.start + len(host) - len(best)
    return m.start


def iter_nccl_messages(text: str, known: set[str] | None = None,
                       long_lines: list[int] | None = None, *, every_line: bool = False) -> Iterator[NcclMessage]:
    """Every NCCL message with its physical line number; linear in ``len(text)``.

    A physical line may hold several messages when processes wrote into the same line;
    each is split at the next ``host:pid:tid [dev] NCCL`` prefix (a glued one is found from
    the host names of :func:`known_hosts`). A line without any ``NCCL INFO/WARN`` but with
    ``NCCL version X`` (the unprefixed banner of older NCCLs) or ``nccl==X`` (vLLM) is
    yielded as a ``BANNER``. Line numbers of lines longer than :data:`MAX_PHYSICAL_LINE`
    are appended to ``long_lines``. Only :func:`relevant_lines` are read unless ``every_line``.
    """
    hosts = LazyHosts(text)
    if known is not None:
        hosts._hosts = known
    lines = ((n, ln, len(ln) > MAX_PHYSICAL_LINE) for n, ln in physical_lines(text)) if every_line \
        else relevant_lines(text)
    for number, raw, cut in lines:
        if "NCCL" not in raw and "nccl==" not in raw:
            continue
        if cut:
            raw = raw[:MAX_PHYSICAL_LINE]
            if long_lines is not None and len(long_lines) < 100:
                long_lines.append(number)
        line = clean(raw) if "\x1b" in raw or "\x00" in raw or raw.endswith("\r") else raw
        lead = _LEAD_RE.match(line, 0, 512)
        if lead is not None and line.find("NCCL ", lead.end()) < 0:  # the common case: one message, no split
            msg = line[lead.end():].strip()
            if msg.count(" via ") > 1:
                yield from _messages(number, msg, line, int(lead["pid"]), lead["level"])
            else:
                yield NcclMessage(number, msg, line, int(lead["pid"]), lead["level"])
            continue
        marks = _marks(line)
        if not marks:
            if "NCCL version " in line or "nccl==" in line:
                yield NcclMessage(number, line.strip(), line, None, "BANNER")
            continue
        starts = [_split_point(m, hosts.get()) for m in marks] if len(marks) > 1 else None
        for i, m in enumerate(marks):
            end = starts[i + 1] if starts is not None and i + 1 < len(marks) else len(line)
            yield from _messages(number, line[m.end:max(end, m.end)].strip(), line, m.pid, m.level)


def _messages(number: int, msg: str, physical: str, pid: int | None, level: str) -> Iterator[NcclMessage]:
    """One message, or the connection lines glued into it by spaces."""
    if msg.count(" via ") > 1 and msg.startswith(("Channel ", "Ring ", "CollNet ")):
        for part in _GLUED_RE.split(msg):
            yield NcclMessage(number, part.strip(), physical, pid, level)
    else:
        yield NcclMessage(number, msg, physical, pid, level)


def _int(s: str | None) -> int | None:
    return int(s) if s is not None else None


def looks_like_connection(text: str) -> bool:
    """Starts like a connection line (``Channel 03 ... via``): a miss here is an unrecognised format."""
    return text.startswith(("Channel ", "Ring ", "CollNet ")) and " via " in text


def parse_connection(text: str, line: int = 0, pid: int | None = None) -> Connection | None:
    """The connection a message describes, or None (not a connection line, or a format we do not know)."""
    if not looks_like_connection(text):
        return None
    m = _P2P_RE.match(text)
    if m:
        chan, conn, src, src_dev, dst, dst_dev, kind, via, flags = m.group(
            "chan", "conn", "src", "src_dev", "dst", "dst_dev", "kind", "via", "flags")
        return Connection(int(chan), int(src), src_dev or "", int(dst), dst_dev or "", "P2P", kind or "indirect",
                          line, None if conn is None else int(conn), tuple(f for f in flags.split("/") if f), None,
                          None, None, None if via is None else int(via), pid)
    m = _SHM_RE.match(text)
    if m:
        kind = "legacy" if m["legacy"] else m["send"] + (f"/{m['recv']}" if m["recv"] else "")
        return Connection(int(m["chan"]), int(m["src"]), m["src_dev"] or "", int(m["dst"]), m["dst_dev"] or "",
                          "SHM", kind, line, _int(m["conn"]), ("CE",) if "CE" in kind else (), pid=pid)
    m = _NET_RE.match(text)
    if m:
        return Connection(int(m["chan"]), int(m["src"]), m["src_dev"] or "", int(m["dst"]), m["dst_dev"] or "",
                          "NET", m["plugin"].strip(), line, _int(m["conn"]),
                          tuple(f for f in ("GDRDMA", "PCI", "Shared") if f in m["flags"]), m["dir"],
                          int(m["netdev"]), _int(m["proxy"]), pid=pid)
    m = _COLLNET_RE.match(text)
    if m:
        rank = int(m["rank"])
        return Connection(int(m["chan"]), rank, "", rank, "", "COLLNET", m["plugin"].strip(), line, _int(m["conn"]),
                          tuple(f for f in ("GDRDMA", "PCI", "Shared") if f in m["flags"]), m["dir"],
                          int(m["netdev"]), pid=pid)
    return None
