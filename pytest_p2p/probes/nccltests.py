"""Parser for nccl-tests ``all_reduce_perf`` output: the text table or the ``-J`` JSON file.

Rig owners already run nccl-tests; reading its output lets a bus-bandwidth table from
another machine (or from before a driver update) become a baseline without re-running
it. Formats (from nccl-tests ``src/common.cu``/``src/util.cu`` at each tag):

* up to 2.11: columns ``size count type redop | time algbw busbw error`` x2, where
  ``error`` is the max deviation (``%5.0le``, or ``N/A``);
* 2.13 on: a ``root`` column and ``#wrong`` (wrong element count ``%6g``, or ``N/A``);
  ``-C`` prints ``cputime`` instead of ``time``; ``-T`` appends a timestamp;
* 2.19 per-iteration mode adds ``i_min i_max i_p99 i_cv%`` after each ``#wrong``;
* rows of trace replay carry only the in-place half;
* ``-J file.json``: ``{"version", "nccl_version", "config": {..., "devices": [...]},
  "results": [{"size", "count", "type", "redop", "root", "out_of_place": {"time" |
  "cpu_time", "alg_bw", "bus_bw", "nwrong"}, "in_place": {...}}], "out_of_bounds",
  "average_bus_bandwidth"}`` with ``"nan"`` for non-finite doubles.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from ..errors import ProbeError
from ..jsontypes import JSONObject
from ._jsonneed import to_float

_VERSION_RE = re.compile(
    r"^#\s*nccl-tests version (?P<v>\S+)(?: nccl-headers=(?P<h>\d+))?(?: nccl-library=(?P<lib>\d+))?"
)
_PROGRAM_RE = re.compile(r"^#\s*Collective test (?:starting|concluded): (?P<p>\S+)")
_DEVICE_RE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d{1,9})(?: Group\s+(?P<group>\d{1,9}))?(?: Pid\s+(?P<pid>\d{1,9}))? on\s+(?P<host>\S+) "
    r"device\s+(?P<dev>\d{1,9}) \[(?P<bus>[^\]]+)\] (?P<name>.*?)\s*$"
)
_OOB_RE = re.compile(r"^#?\s*Out of bounds values\s*:\s*(?P<n>\d{1,18})\b")
_AVG_RE = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(?P<bw>[-+0-9.eE]+|nan|inf)")
_ROW_RE = re.compile(r"^\s*\d+\s+\d+\s+\S+")


@dataclass(frozen=True)
class Measurement:
    """One half of a row (out-of-place or in-place). ``wrong`` is None for ``N/A`` or old versions."""

    time_us: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None = None
    error: float | None = None  # nccl-tests <= 2.11: max deviation instead of a wrong count
    per_iter: dict[str, float] | None = None

    def to_dict(self) -> JSONObject:
        d: JSONObject = {"time_us": self.time_us, "algbw": self.algbw, "busbw": self.busbw, "wrong": self.wrong}
        if self.error is not None:
            d["error"] = self.error
        if self.per_iter:
            d["per_iter"] = dict(self.per_iter)
        return d


@dataclass(frozen=True)
class NcclTestsRow:
    size_bytes: int
    count: int
    type: str
    redop: str
    root: int | None
    oop: Measurement | None
    ip: Measurement | None
    line: int | None = None

    def to_dict(self) -> JSONObject:
        return {
            "size_bytes": self.size_bytes, "count": self.count, "type": self.type, "redop": self.redop,
            "root": self.root, "oop": self.oop.to_dict() if self.oop else None,
            "ip": self.ip.to_dict() if self.ip else None,
        }


@dataclass
class NcclTestsResult:
    rows: list[NcclTestsRow]
    format: str  # "text" | "json"
    program: str | None = None
    nccl_tests_version: str | None = None
    nccl_version: str | None = None
    devices: list[JSONObject] = field(default_factory=list)  # as the output names them
    avg_busbw: float | None = None
    out_of_bounds: int | None = None
    time_kind: str = "time"  # "time" (GPU) or "cputime" (-C)

    @property
    def wrong(self) -> int:
        """Total wrong elements over all rows (0 when validation was off)."""
        return sum((m.wrong or 0) for r in self.rows for m in (r.oop, r.ip) if m is not None)

    @property
    def max_busbw(self) -> float | None:
        values = [m.busbw for r in self.rows for m in (r.oop, r.ip) if m is not None and m.busbw is not None]
        return max(values) if values else None

    def to_dict(self) -> JSONObject:
        return {
            "format": self.format, "program": self.program, "nccl_tests_version": self.nccl_tests_version,
            "nccl_version": self.nccl_version, "devices": [dict(d) for d in self.devices],
            "avg_busbw": self.avg_busbw, "out_of_bounds": self.out_of_bounds, "time_kind": self.time_kind,
            "wrong": self.wrong, "rows": [r.to_dict() for r in self.rows],
        }


def _nccl_code(code: str | int | None) -> str | None:
    """``22809`` -> ``2.28.9`` (NCCL_VERSION_CODE is major*10000+minor*100+patch from 2.9; 1000-based before)."""
    if code is None:
        return None
    n = int(code)
    if n >= 10000:
        return f"{n // 10000}.{n // 100 % 100}.{n % 100}"
    return f"{n // 1000}.{n // 100 % 10}.{n % 100}"


def _num(tok: str, where: str) -> float | None:
    if tok.upper() == "N/A":
        return None
    try:
        x = float(tok)
    except ValueError:
        raise ProbeError(f"{where}: expected a number, got {tok[:40]!r}") from None
    return None if math.isnan(x) else x


# What a hostile or corrupt file can make Python's own conversions raise; each becomes a ProbeError.
_UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError)


def parse_all_reduce_perf(text: str, source: str = "<all_reduce_perf output>") -> NcclTestsResult:
    """Parse ``all_reduce_perf`` stdout or its ``-J`` JSON (auto-detected); :class:`ProbeError` if unreadable.

    Total: any text gives a result or a :class:`ProbeError` naming the source (the specific
    checks below name the line; anything they miss is still reported, never a traceback).
    """
    try:
        if text.lstrip().startswith("{"):
            return _parse_json(text, source)
        return _parse_text(text, source)
    except _UNREADABLE as exc:
        raise ProbeError(f"{source}: unreadable all_reduce_perf output ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None


def _parse_text(text: str, source: str) -> NcclTestsResult:
    res = NcclTestsResult(rows=[], format="text")
    half: int | None = None  # columns per half (4 or 8)
    has_root: bool | None = None
    names: list[str] = []
    saw_footer = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        where = f"{source}: line {number}"
        if line.lstrip().startswith("#") or "bus bandwidth" in line or "Out of bounds" in line:
            s = line.strip()
            if m := _VERSION_RE.match(s):
                res.nccl_tests_version = m.group("v")
                res.nccl_version = _nccl_code(m.group("lib"))
            elif m := _PROGRAM_RE.match(s):
                res.program = res.program or m.group("p")
            elif m := _DEVICE_RE.match(s):
                res.devices.append({
                    "rank": int(m.group("rank")), "host": m.group("host"), "device": int(m.group("dev")),
                    "bus_id": m.group("bus"), "name": m.group("name"),
                    "pid": int(m.group("pid")) if m.group("pid") else None,
                })
            elif m := _OOB_RE.match(s):
                res.out_of_bounds = int(m.group("n"))
            elif m := _AVG_RE.match(s):
                res.avg_busbw = float(m.group("bw"))
                saw_footer = True
            elif {"size", "count", "type"} <= set(s.lstrip("#").split()):
                names = s.lstrip("#").split()
                has_root = "root" in names
                body = names[5:] if has_root else names[4:]
                wrong_cols = [i for i, n in enumerate(body) if n in ("#wrong", "error")]
                half = wrong_cols[1] - wrong_cols[0] if len(wrong_cols) >= 2 else 4
                if half not in (4, 8):  # a header we do not know: guess from each row instead
                    half = None
                if "cputime" in body:
                    res.time_kind = "cputime"
            continue
        if not _ROW_RE.match(line):
            continue
        res.rows.append(_text_row(line, number, where, half, has_root))
    if not res.rows:
        raise ProbeError(
            f"{source}: no all_reduce_perf result rows (expected lines like '  8  2  float  sum  -1  36.5 ...'); "
            f"is this nccl-tests output?"
        )
    if not saw_footer:
        raise ProbeError(
            f"{source}: truncated all_reduce_perf output: {len(res.rows)} row(s) but no 'Avg bus bandwidth' footer "
            f"(the run was cut short; re-run it)"
        )
    return res


def _text_row(line: str, number: int, where: str, half: int | None, has_root: bool | None) -> NcclTestsRow:
    tokens = line.split()
    if has_root is None:  # no header seen: 2.13+ rows have an integer root in column 5
        has_root = len(tokens) > 4 and re.fullmatch(r"-?\d+", tokens[4]) is not None
    lead = 5 if has_root else 4
    rest = tokens[lead:]
    if len(tokens) < lead:
        raise ProbeError(f"{where}: malformed all_reduce_perf row: {line.strip()[:200]!r}")
    if half is None:
        half = 8 if len(rest) in (16, 18) else 4
    try:
        if any(len(t) > 20 for t in tokens[:5]):
            raise ValueError("a number too long to be a size, count or root")
        size, count = int(tokens[0]), int(tokens[1])
        root = int(tokens[4]) if has_root else None
    except (ValueError, IndexError):
        raise ProbeError(f"{where}: malformed all_reduce_perf row: {line.strip()[:200]!r}") from None
    if len(rest) < half:
        raise ProbeError(
            f"{where}: truncated all_reduce_perf row (expected {2 * half} values after the "
            f"{'root' if has_root else 'redop'} column, got {len(rest)}): {line.strip()!r}"
        )
    old = not has_root
    if len(rest) >= 2 * half:
        oop = _measure(rest[:half], where, old)
        ip = _measure(rest[half: 2 * half], where, old)
    else:  # trace replay prints only the in-place half
        oop, ip = None, _measure(rest[:half], where, old)
    return NcclTestsRow(size, count, tokens[2], tokens[3], root, oop, ip, number)


def _measure(vals: list[str], where: str, old: bool) -> Measurement:
    t, a, b, w = (_num(v, where) for v in vals[:4])
    per_iter = None
    if len(vals) >= 8:
        per_iter = {k: v for k, v in zip(("i_min_us", "i_max_us", "i_p99_us", "i_cv_pct"),
                                         (_num(x, where) for x in vals[4:8]), strict=True) if v is not None}
    if old:
        return Measurement(t, a, b, None, w, per_iter)
    if w is not None and not math.isfinite(w):
        raise ProbeError(f"{where}: #wrong is {w}, not a count")
    return Measurement(t, a, b, None if w is None else int(w), None, per_iter)


def _jnum(v: object) -> float | None:
    if v is None:
        return None
    x = to_float(v)  # nccl-tests writes non-finite doubles as the string "nan"
    return None if math.isnan(x) else x


def _parse_json(text: str, source: str) -> NcclTestsResult:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeError(
            f"{source}: unreadable nccl-tests JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
            f"a run killed before the end leaves the file unterminated"
        ) from None
    if not isinstance(doc, dict) or "results" not in doc or not isinstance(doc["results"], (list, type(None))):
        raise ProbeError(f"{source}: not nccl-tests -J output (no 'results' list)")
    config: JSONObject = doc["config"] if isinstance(doc.get("config"), dict) else {}
    res = NcclTestsResult(rows=[], format="json")
    code = doc.get("nccl_version")
    res.nccl_version = _nccl_code(code) if isinstance(code, int) and 0 <= code < 10**7 else None
    # doc["version"] is the JSON file format version, not the nccl-tests release: the JSON does not carry that.
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str):
        res.program = args[0].rsplit("/", 1)[-1]
    devices = config.get("devices") or doc.get("devices") or []
    for d in devices if isinstance(devices, list) else []:
        if not isinstance(d, dict):
            continue
        res.devices.append({"rank": d.get("rank"), "host": d.get("hostname"), "device": d.get("device"),
                            "bus_id": d.get("device_hex"), "name": d.get("device_info"), "pid": d.get("pid")})
    for i, r in enumerate(doc["results"] or []):
        where = f"{source}: results[{i}]"
        try:
            root_raw = r.get("root")
            root = int(str(root_raw).strip()) if root_raw is not None else None
            oop, ip = (_jmeasure(r.get(k), res) for k in ("out_of_place", "in_place"))
            res.rows.append(NcclTestsRow(int(r["size"]), int(r["count"]), str(r["type"]).strip(),
                                         str(r["redop"]).strip(), root, oop, ip, None))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise ProbeError(f"{where}: malformed result ({type(exc).__name__}: {exc})") from None
    if not res.rows:
        raise ProbeError(f"{source}: nccl-tests JSON has an empty 'results' list")
    bw = doc.get("average_bus_bandwidth")
    if isinstance(bw, dict):
        res.avg_busbw = _jnum(bw.get("bandwidth"))
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict) and oob.get("count") is not None:
        res.out_of_bounds = int(oob["count"])
    return res


def _jmeasure(m: object, res: NcclTestsResult) -> Measurement | None:
    if m is None:
        return None
    if not isinstance(m, dict):
        raise TypeError(f"a measurement is an object, got {type(m).__name__}")
    if "cpu_time" in m:
        res.time_kind = "cputime"
    w = _jnum(m.get("nwrong"))
    return Measurement(_jnum(m.get("time", m.get("cpu_time"))), _jnum(m.get("alg_bw")), _jnum(m.get("bus_bw")),
                       None if w is None else int(w))
