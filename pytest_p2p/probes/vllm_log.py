"""Attestation of a vLLM server log: which all-reduce path the server really used for an arm.

The NCCL transport proof alone cannot vouch for a vLLM arm. vLLM dispatches tensor-parallel
all-reduce to its own backends first (custom all-reduce, torch symmetric memory, quick
reduce, FlashInfer) and those move data over CUDA P2P / NVLink *whatever*
``NCCL_P2P_DISABLE`` says; NCCL (``PYNCCL``) only gets what they decline. A "P2P off"
arm whose server log shows such a backend in use is measuring P2P, so
:meth:`Attestation.problems` reports it rather than letting the comparison be trusted.

It lives with the probes (not in ``serve/``) because it only *reads text*: the
``transport`` command (a probes tool) runs it on any log it is given, and the server stage
imports it from here. The lines come from vLLM's ``cuda_communicator.py``
(``Using [...] all-reduce backends (in dispatch order) for group 'tp:0' ...``),
``pynccl.py`` (``vLLM is using nccl==X``), ``custom_all_reduce.py`` (``Custom allreduce is
disabled ...``), ``symm_mem.py``, the API-server banner and the engine config line; the NCCL
lines interleaved in the same log feed the embedded :class:`~.transport_model.TransportProof`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from .nccl_lines import MAX_LINE_CHARS, physical_lines
from .transport import parse_nccl_log
from .transport_model import TransportProof

# Backends that move all-reduce data over CUDA P2P/NVLink themselves, outside NCCL's transport choice.
P2P_BYPASS_BACKENDS = frozenset({
    "CUSTOM", "SYMM_MEM", "QUICK_REDUCE", "FLASHINFER", "FLASHINFER_PCIE_IPC", "AITER_CUSTOM",
})
# Backends whose transport NCCL chooses, so the NCCL transport proof covers them.
NCCL_BACKENDS = frozenset({"PYNCCL", "NCCL_SYMM_MEM"})

_PREFIX_RE = re.compile(r"^\((?P<proc>[A-Za-z_]\w{0,63}) pid=(?P<pid>\d{1,9})\)\s*")
_BANNER_RE = re.compile(r"[█▀▄]\s{1,8}version\s{1,8}(?P<v>\d{1,4}\.\d{1,4}\.\d{1,6}\S{0,40})")
_API_VERSION_RE = re.compile(r"vLLM API server version (?P<v>\d{1,4}\.\d{1,4}\.\d{1,6}\S{0,40})")
_ENGINE_RE = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[^)\s]{1,60})\)")
_NCCL_RE = re.compile(r"vLLM is using nccl==(?P<v>\S{1,40})")
_DISPATCH_RE = re.compile(
    r"Using \[(?P<used>[^\]]{0,2000})\] all-reduce backends \(in dispatch order\) for (?:group )?"
    r"'(?P<group>[^']{1,200})'(?: out of potential backends: \[(?P<potential>[^\]]{0,2000})\])?"
)
_CUSTOM_DISABLED_RE = re.compile(r"Custom allreduce is disabled (?P<why>.{0,600}?)\s*$")
_DISABLE_FLAG_RE = re.compile(r"['\"]?disable_custom_all_reduce['\"]?\s{0,3}[=:]\s{0,3}(?P<v>True|False)")
_TP_RE = re.compile(r"['\"]?tensor_parallel_size['\"]?\s{0,3}[=:]\s{0,3}(?P<v>\d{1,6})\b")
_SYMM_RE = re.compile(r"SymmMem|symm_mem|symmetric memory", re.IGNORECASE)
# Advice such as "specify disable_custom_all_reduce=True explicitly" names a value nobody set.
_ADVICE_RE = re.compile(r"specify|explicitly|consider|you (?:can|may|should)|to silence", re.IGNORECASE)
_KEYWORDS = ("version", "nccl==", "all-reduce backends", "Custom allreduce", "disable_custom_all_reduce",
             "tensor_parallel_size", "SymmMem", "symm_mem", "ymmetric memory")

# Where a disable_custom_all_reduce value comes from, most authoritative last: the engine config line is what
# the engine runs with; the non-default args what the user passed; anything else (a print of the defaults).
_FLAG_OTHER, _FLAG_ARGS, _FLAG_ENGINE = 1, 2, 3


def _names(listing: str | None) -> list[str]:
    if not listing:
        return []
    try:
        value = ast.literal_eval(f"[{listing}]")
        if isinstance(value, list):
            return [str(v) for v in value]
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pass
    return [x.strip().strip("'\"") for x in listing.split(",") if x.strip()]


@dataclass(frozen=True)
class Dispatch:
    """One ``Using [...] all-reduce backends`` line: the backends a process group dispatches to."""

    group: str
    backends: tuple[str, ...]
    potential: tuple[str, ...]
    line: int
    pid: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {"group": self.group, "backends": list(self.backends), "potential": list(self.potential),
                "line": self.line, "pid": self.pid}


@dataclass
class Attestation:
    """What a vLLM server log says about the all-reduce path; see the module docstring."""

    source: str
    vllm_version: str | None = None
    nccl_version: str | None = None
    tensor_parallel_size: int | None = None
    disable_custom_all_reduce: bool | None = None
    dispatch: list[Dispatch] = field(default_factory=list)
    custom_ar_disabled: list[tuple[int, str]] = field(default_factory=list)
    symm_mem: list[tuple[int, str]] = field(default_factory=list)
    evidence: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    transport: TransportProof = field(default_factory=TransportProof)

    @property
    def proof(self) -> TransportProof:
        """The embedded NCCL transport proof (alias of :attr:`transport`)."""
        return self.transport

    @property
    def is_vllm(self) -> bool:
        """Does this log come from vLLM at all (so the all-reduce checks apply)?"""
        return bool(self.vllm_version or self.dispatch or self.nccl_version or self.custom_ar_disabled
                    or self.disable_custom_all_reduce is not None)

    @property
    def backends_in_use(self) -> list[str]:
        """Every backend any group dispatches to, in first-seen order."""
        seen: list[str] = []
        for d in self.dispatch:
            seen.extend(b for b in d.backends if b not in seen)
        return seen

    @property
    def p2p_bypass_backends(self) -> list[str]:
        """Backends in use that move data over P2P regardless of NCCL's settings."""
        return [b for b in self.backends_in_use if b in P2P_BYPASS_BACKENDS]

    def problems(self, expect_transport: str) -> list[str]:
        """Why this log cannot vouch for an arm expecting ``expect_transport`` (empty when it can).

        For an arm that means "P2P off" (expects SHM or NET) any P2P-bypassing backend in
        use, or no way to tell which backends were used, is a problem; for every arm the
        embedded NCCL transport proof must prove the expectation.
        """
        out: list[str] = []
        if self.tensor_parallel_size == 1 and not self.dispatch:
            out.append(
                f"{self.source}: tensor_parallel_size is 1: no all-reduce crosses GPUs, so this server "
                f"cannot exercise {expect_transport}"
            )
        if expect_transport.strip().upper().startswith(("SHM", "NET")):
            out.extend(self._bypass_problems(expect_transport))
        if not self.transport.has_info:
            out.append(
                f"{self.source}: the server log has no NCCL INFO lines, so the NCCL transport is unproven: "
                f"set NCCL_DEBUG=INFO in the arm environment"
            )
        else:
            ok, why = self.transport.satisfies(expect_transport)
            if not ok:
                out.append(why)
        reported, logged = self.nccl_version, self.transport.nccl_version
        if reported and logged and reported.split("+")[0] != logged:
            out.append(
                f"{self.source}: vLLM reports nccl=={reported} but the NCCL log says {logged}: "
                f"two NCCL libraries are in play"
            )
        return out

    def _bypass_problems(self, expect: str) -> list[str]:
        out: list[str] = []
        for d in self.dispatch:
            bypass = [b for b in d.backends if b in P2P_BYPASS_BACKENDS]
            unknown = [b for b in d.backends if b not in P2P_BYPASS_BACKENDS and b not in NCCL_BACKENDS]
            if bypass:
                out.append(
                    f"{self.source}: line {d.line}: group {d.group!r} dispatches all-reduce to "
                    f"{', '.join(bypass)}, which move data over P2P whatever NCCL_P2P_DISABLE says; this arm "
                    f"expects {expect}: run it with --disable-custom-all-reduce (and without "
                    f"symmetric memory / quick reduce / FlashInfer all-reduce)"
                )
            if unknown:
                out.append(
                    f"{self.source}: line {d.line}: group {d.group!r} uses unknown all-reduce backend(s) "
                    f"{', '.join(unknown)}; cannot tell whether they bypass NCCL's transport"
                )
        if not self.dispatch and self.disable_custom_all_reduce is not True and not self.custom_ar_disabled:
            out.append(
                f"{self.source}: no all-reduce dispatch line and disable_custom_all_reduce is not True: "
                f"cannot rule out vLLM's custom all-reduce moving data over P2P in an arm expecting {expect}"
            )
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "vllm_version": self.vllm_version,
            "nccl_version": self.nccl_version,
            "tensor_parallel_size": self.tensor_parallel_size,
            "disable_custom_all_reduce": self.disable_custom_all_reduce,
            "dispatch": [d.to_dict() for d in self.dispatch],
            "backends_in_use": self.backends_in_use,
            "p2p_bypass_backends": self.p2p_bypass_backends,
            "custom_ar_disabled": [[n, t] for n, t in self.custom_ar_disabled],
            "symm_mem": [[n, t] for n, t in self.symm_mem],
            "evidence": {k: [[n, t] for n, t in v] for k, v in self.evidence.items()},
            "transport_proof": self.transport.to_dict(),
        }


def _flag_rank(line: str) -> int:
    if _ENGINE_RE.search(line) or "with config:" in line:
        return _FLAG_ENGINE
    if "non-default args" in line or "args:" in line:
        return _FLAG_ARGS
    return _FLAG_OTHER


def parse_server_log(text: str, source: str = "<server log>") -> Attestation:
    """Read a vLLM server log (API server, engine core and workers interleaved); total and linear on any text."""
    att = Attestation(source=source)
    flag_rank = 0

    def note(key: str, number: int, line: str) -> None:
        lines = att.evidence.setdefault(key, [])
        if len(lines) < 8:
            lines.append((number, line[:MAX_LINE_CHARS]))

    for number, raw in physical_lines(text):
        if "NCCL INFO" in raw or "NCCL WARN" in raw or not any(k in raw for k in _KEYWORDS):
            continue
        line = raw.rstrip("\r").strip()
        m = _PREFIX_RE.match(line)
        pid = int(m["pid"]) if m else None
        if att.vllm_version is None:
            m = _BANNER_RE.search(line) or _API_VERSION_RE.search(line) or _ENGINE_RE.search(line)
            if m:
                att.vllm_version = m["v"]
                note("vllm_version", number, line)
        m = _NCCL_RE.search(line)
        if m:
            att.nccl_version = att.nccl_version or m["v"]
            note("nccl_version", number, line)
        m = _DISPATCH_RE.search(line)
        if m:
            att.dispatch.append(Dispatch(m["group"], tuple(_names(m["used"])), tuple(_names(m["potential"])),
                                         number, pid))
            note("dispatch", number, line)
            continue
        m = _CUSTOM_DISABLED_RE.search(line)
        if m:
            att.custom_ar_disabled.append((number, m["why"]))
            note("custom_ar_disabled", number, line)
        if "disable_custom_all_reduce" in line:
            m = _DISABLE_FLAG_RE.search(line)
            advice = m is not None and _ADVICE_RE.search(line[max(0, m.start() - 60):m.end() + 20]) is not None
            if m and not advice:
                rank = _flag_rank(line)
                if rank >= flag_rank:  # the engine config line wins; among equals, the last one
                    att.disable_custom_all_reduce, flag_rank = m["v"] == "True", rank
                note("disable_custom_all_reduce", number, line)
        if att.tensor_parallel_size is None:
            m = _TP_RE.search(line)
            if m:
                att.tensor_parallel_size = int(m["v"])
                note("tensor_parallel_size", number, line)
        if _SYMM_RE.search(line):
            att.symm_mem.append((number, line[:MAX_LINE_CHARS]))
            note("symm_mem", number, line)
    att.transport = parse_nccl_log(text, source=source)
    return att
