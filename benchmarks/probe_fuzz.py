"""Fuzz the probes' text parsers with inputs mutated from real ones, and count crashes.

    python benchmarks/probe_fuzz.py [--examples 10000] [--parser nccl_log|nccl_tests|p2p_matrix|vllm_log]

A *crash* is any exception other than the project's own :class:`~pytest_p2p.errors.ProbeError`
(and for the NCCL log parser and the vLLM attestation, which are total, any exception at all).
Seeds are the recorded logs and tool outputs under fixtures/logs (real captures, public
excerpts, synthesised formats); mutations are the hostile shapes issue 11 measured: 5000-digit
numbers, ``1e400``/``nan``/``inf``, cut and glued lines, 16 KB lines, random tokens of the
format, and for ``-J`` JSON, values of the wrong type at any path. The strategies are shared
with ``tests/test_transport_fuzz.py`` (modest example counts in CI, ``P2P_FUZZ_EXAMPLES`` more).
Results go to docs/transport.md ("Totality").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"

_HOSTILE_NUMBERS = ("9" * 5000, "0", "-1", "1e400", "-1e400", "nan", "inf", "-inf", "", "1" * 25, "0x1f", "N/A")
_TOKENS = ("NCCL", "INFO", "WARN", "NCCL INFO ", "Channel", "Ring", "CollNet", "via", "P2P/IPC", "P2P/CUMEM",
           "SHM/direct/direct", "NET/IB/0/GDRDMA", "[send]", "[receive]", "->", "0[0]", "1[1]", ":", "comm", "0x1",
           "nRanks", "nranks", "rank", "Init COMPLETE", "NCCL version", "set by environment to", "nvls channels",
           "Connected CollNet", "Cannot initialize CollNet", "{", "}", "[", "]", "size", "count", "type", "redop",
           "root", "#wrong", "D\\D", "GPU", "CPU", "Matrix", "Device=0 CAN Access Peer Device=1", "Avg bus bandwidth",
           "Out of bounds values", "vLLM is using nccl==", "all-reduce backends", "disable_custom_all_reduce=True",
           "h:1:1 [0] ", " ", "  ", "\t", "\r", "\x1b[31m", "\x00", "é", "9" * 40)


def _seeds(patterns: tuple[str, ...]) -> list[str]:
    out = []
    for pattern in patterns:
        for p in sorted(LOGS.rglob(pattern)):
            out.append(p.read_text(encoding="utf-8", errors="replace"))
    return out


SEEDS = {
    "nccl_log": _seeds(("*.log",)),
    "nccl_tests": _seeds(("synth_nccl-tests-*",)),
    "p2p_matrix": _seeds(("*p2p*latency*.txt", "*p2pBandwidthLatencyTest*.txt")),
    "vllm_log": _seeds(("*vllm*.log",)),
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats(allow_nan=True)
    | st.text(max_size=12) | st.sampled_from(["nan", "inf", "1e400", "9" * 5000]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def _mutate_json(draw: st.DrawFn, text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    for _ in range(draw(st.integers(1, 4))):
        node = doc
        path: list[object] = []
        while isinstance(node, (dict, list)) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
            path.append(key)
            node = node[key]  # type: ignore[index]
        value = draw(json_values)
        if not path:
            if isinstance(doc, dict) and doc:
                doc[draw(st.sampled_from(sorted(doc)))] = value
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]  # type: ignore[index]
        parent[path[-1]] = value  # type: ignore[index]
    out = json.dumps(doc)
    return out.replace('"1e400"', "1e400") if draw(st.booleans()) else out  # a bare 1e400 is valid JSON too


@st.composite
def mutated(draw: st.DrawFn, kind: str) -> str:
    """A real input of ``kind``, windowed and mutated; sometimes plain random text."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=300))
    text = draw(st.sampled_from(SEEDS[kind]))
    if text.lstrip().startswith("{") and draw(st.booleans()):
        return draw(_mutate_json(text))
    lines = text.splitlines(keepends=True)
    start = draw(st.integers(0, max(0, len(lines) - 1)))
    lines = lines[start:start + draw(st.integers(1, 120))]
    for _ in range(draw(st.integers(0, 8))):
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(("number", "cut", "glue", "insert", "dup", "tokens", "long", "drop")))
        line = lines[i]
        if op == "number":
            digits = [j for j, ch in enumerate(line) if ch.isdigit()]
            if digits:
                j = draw(st.sampled_from(digits))
                k = j
                while k < len(line) and line[k].isdigit():
                    k += 1
                lines[i] = line[:j] + draw(st.sampled_from(_HOSTILE_NUMBERS)) + line[k:]
        elif op == "cut":
            lines[i] = line[: draw(st.integers(0, len(line)))]
        elif op == "glue" and i + 1 < len(lines):
            lines[i:i + 2] = [line.rstrip("\r\n") + draw(st.sampled_from(("", " ", "    "))) + lines[i + 1]]
        elif op == "insert":
            j = draw(st.integers(0, len(line)))
            lines[i] = line[:j] + draw(st.text(max_size=30)) + line[j:]
        elif op == "dup":
            lines[i:i + 1] = [line] * draw(st.integers(2, 50))
        elif op == "tokens":
            lines[i] = " ".join(draw(st.lists(st.sampled_from(_TOKENS), max_size=30))) + "\n"
        elif op == "long":
            lines[i] = draw(st.sampled_from(_TOKENS)) * draw(st.integers(100, 3300)) + line
        elif op == "drop":
            del lines[i]
    return "".join(lines)


def parsers() -> dict[str, Callable[[str], object]]:
    from pytest_p2p.probes.nccltests import parse_all_reduce_perf
    from pytest_p2p.probes.p2pmatrix import parse_p2p_bandwidth_latency
    from pytest_p2p.probes.transport import parse_nccl_log, proof_from_dict
    from pytest_p2p.probes.vllm_log import parse_server_log

    def nccl_log(text: str) -> object:
        proof = parse_nccl_log(text, "fuzz.log")
        doc = json.loads(json.dumps(proof.to_dict()))
        assert proof_from_dict(doc).to_dict() == doc
        return proof

    def vllm_log(text: str) -> object:
        return json.dumps(parse_server_log(text, "fuzz.log").to_dict())

    return {
        "nccl_log": nccl_log,
        "nccl_tests": lambda text: parse_all_reduce_perf(text, "fuzz.txt"),
        "p2p_matrix": lambda text: parse_p2p_bandwidth_latency(text, "fuzz.txt", strict=bool(len(text) % 2)),
        "vllm_log": vllm_log,
    }


TOTAL = ("nccl_log", "vllm_log")  # these never raise at all


def crash_of(kind: str, text: str) -> str | None:
    """None, or what the parser raised that it must not have."""
    from pytest_p2p.errors import ProbeError

    try:
        parsers()[kind](text)
    except ProbeError as exc:
        if kind in TOTAL:
            return f"ProbeError from a total parser: {exc}"
        return None
    except Exception as exc:  # noqa: BLE001 - counting exactly these is the point
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return None


def run(kind: str, examples: int) -> tuple[int, Counter[str], float]:
    crashes: Counter[str] = Counter()
    count = 0

    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(mutated(kind))
    def body(text: str) -> None:
        nonlocal count
        count += 1
        crash = crash_of(kind, text)
        if crash is not None:
            crashes[crash.split(":")[0] + ": " + crash[:80]] += 1

    t0 = time.perf_counter()
    body()
    return count, crashes, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=10_000)
    ap.add_argument("--parser", choices=sorted(SEEDS), action="append")
    args = ap.parse_args(argv)
    bad = 0
    for kind in args.parser or sorted(SEEDS):
        n, crashes, secs = run(kind, args.examples)
        total = sum(crashes.values())
        bad += total
        print(f"{kind}: {n} examples, {total} crash(es), {secs:.0f} s")
        for what, k in crashes.most_common(10):
            print(f"    {k:5d} x {what}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
