"""Attestation of a vLLM server log: which all-reduce path the server really used for an arm.

The NCCL transport proof alone cannot vouch for a vLLM arm. vLLM dispatches tensor-parallel
all-reduce to its own backends first (custom all-reduce, torch symmetric memory, quick
reduce, FlashInfer) and those move data over CUDA P2P / NVLink *whatever*
``NCCL_P2P_DISABLE`` says; NCCL (``PYNCCL``) only gets what they decline. A "P2P off"
arm whose server log shows such a backend in use is measuring P2P, so
:meth:`Attestation.problems` reports it rather than letting the comparison be trusted.

The lines come from vLLM's ``cuda_communicator.py`` (``Using [...] all-reduce backends
(in dispatch order) for group 'tp:0' out of potential backends: [...]``), ``pynccl.py``
(``vLLM is using nccl==X``), ``custom_all_reduce.py`` (``Custom allreduce is disabled
...``), ``symm_mem.py`` (``SymmMemCommunicator: ...``), the API-server banner and the
engine config line; the NCCL lines interleaved in the same log feed the embedded
:class:`~pytest_p2p.probes.transport.TransportProof`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from ..probes.transport import TransportProof, parse_nccl_log

# Backends that move all-reduce data over CUDA P2P/NVLink themselves, outside NCCL's transport choice.
P2P_BYPASS_BACKENDS = frozenset({
    "CUSTOM", "SYMM_MEM", "QUICK_REDUCE", "FLASHINFER", "FLASHINFER_PCIE_IPC", "AITER_CUSTOM",
})
# Backends whose transport NCCL chooses, so the NCCL transport proof covers them.
NCCL_BACKENDS = frozenset({"PYNCCL", "NCCL_SYMM_MEM"})

_PREFIX_RE = re.compile(r"^\((?P<proc>[A-Za-z_][\w]*) pid=(?P<pid>\d+)\)\s*")
_BANNER_RE = re.compile(r"[█▀▄]\s+version\s+(?P<v>\d+\.\d+\.\d+\S*)")
_API_VERSION_RE = re.compile(r"vLLM API server version (?P<v>\d+\.\d+\.\d+\S*)")
_ENGINE_RE = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[^)\s]+)\)")
_NCCL_RE = re.compile(r"vLLM is using nccl==(?P<v>\S+)")
_DISPATCH_RE = re.compile(
    r"Using \[(?P<used>[^\]]*)\] all-reduce backends \(in dispatch order\) for (?:group )?'(?P<group>[^']+)'"
    r"(?: out of potential backends: \[(?P<potential>[^\]]*)\])?"
)
_CUSTOM_DISABLED_RE = re.compile(r"Custom allreduce is disabled (?P<why>.*?)\s*$")
_DISABLE_FLAG_RE = re.compile(r"['\"]?disable_custom_all_reduce['\"]?\s*[=:]\s*(?P<v>True|False)")
_TP_RE = re.compile(r"['\"]?tensor_parallel_size['\"]?\s*[=:]\s*(?P<v>\d+)")
_SYMM_RE = re.compile(r"SymmMem|symm_mem|symmetric memory", re.IGNORECASE)


def _names(listing: str | None) -> list[str]:
    if not listing:
        return []
    try:
        value = ast.literal_eval(f"[{listing}]")
        return [str(v) for v in value]
    except (ValueError, SyntaxError):
        return [x.strip().strip("'\"") for x in listing.split(",") if x.strip()]


@dataclass(frozen=True)
class Dispatch:
    """One ``Using [...] all-reduce backends`` line: the backends a process group dispatches to."""

    group: str
    backends: tuple[str, ...]
    potential: tuple[str, ...]
    line: int
    pid: int | None = None

    def to_dict(self) -> dict[str, Any]:
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
        embedded NCCL transport proof must satisfy the expectation.
        """
        out: list[str] = []
        if self.tensor_parallel_size == 1 and not self.dispatch:
            out.append(
                f"{self.source}: tensor_parallel_size is 1: no all-reduce crosses GPUs, so this server "
                f"cannot exercise {expect_transport}"
            )
        p2p_off = expect_transport.strip().upper().startswith(("SHM", "NET"))
        if p2p_off:
            for d in self.dispatch:
                bypass = [b for b in d.backends if b in P2P_BYPASS_BACKENDS]
                unknown = [b for b in d.backends if b not in P2P_BYPASS_BACKENDS and b not in NCCL_BACKENDS]
                if bypass:
                    out.append(
                        f"{self.source}: line {d.line}: group {d.group!r} dispatches all-reduce to "
                        f"{', '.join(bypass)}, which move data over P2P whatever NCCL_P2P_DISABLE says; this arm "
                        f"expects {expect_transport}: run it with --disable-custom-all-reduce (and without "
                        f"symmetric memory / quick reduce / FlashInfer all-reduce)"
                    )
                if unknown:
                    out.append(
                        f"{self.source}: line {d.line}: group {d.group!r} uses unknown all-reduce backend(s) "
                        f"{', '.join(unknown)}; cannot tell whether they bypass NCCL's transport"
                    )
            if not self.dispatch and self.disable_custom_all_reduce is not True:
                out.append(
                    f"{self.source}: no all-reduce dispatch line and disable_custom_all_reduce is not True: "
                    f"cannot rule out vLLM's custom all-reduce moving data over P2P in an arm expecting "
                    f"{expect_transport}"
                )
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

    def to_dict(self) -> dict[str, Any]:
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


def parse_server_log(text: str, source: str = "<server log>") -> Attestation:
    """Read a vLLM server log (API server, engine core and workers interleaved); never raises on text."""
    att = Attestation(source=source)

    def note(key: str, number: int, line: str) -> None:
        lines = att.evidence.setdefault(key, [])
        if len(lines) < 8:
            lines.append((number, line[:400]))

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r").strip()
        if not line or "NCCL INFO" in line or "NCCL WARN" in line:
            continue
        m = _PREFIX_RE.match(line)
        pid = int(m.group("pid")) if m else None
        if att.vllm_version is None:
            m = _BANNER_RE.search(line) or _API_VERSION_RE.search(line) or _ENGINE_RE.search(line)
            if m:
                att.vllm_version = m.group("v")
                note("vllm_version", number, line)
        m = _NCCL_RE.search(line)
        if m:
            att.nccl_version = att.nccl_version or m.group("v")
            note("nccl_version", number, line)
        m = _DISPATCH_RE.search(line)
        if m:
            att.dispatch.append(Dispatch(m.group("group"), tuple(_names(m.group("used"))),
                                         tuple(_names(m.group("potential"))), number, pid))
            note("dispatch", number, line)
            continue
        m = _CUSTOM_DISABLED_RE.search(line)
        if m:
            att.custom_ar_disabled.append((number, m.group("why")))
            note("custom_ar_disabled", number, line)
        if "disable_custom_all_reduce" in line:
            m = _DISABLE_FLAG_RE.search(line)
            if m:
                value = m.group("v") == "True"
                # An explicit True anywhere (CLI args or engine config) wins over a later default print.
                att.disable_custom_all_reduce = value or bool(att.disable_custom_all_reduce)
                note("disable_custom_all_reduce", number, line)
        if att.tensor_parallel_size is None:
            m = _TP_RE.search(line)
            if m:
                att.tensor_parallel_size = int(m.group("v"))
                note("tensor_parallel_size", number, line)
        if _SYMM_RE.search(line):
            att.symm_mem.append((number, line[:400]))
            note("symm_mem", number, line)
    att.transport = parse_nccl_log(text, source=source)
    return att
