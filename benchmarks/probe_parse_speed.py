"""Speed of the NCCL log parser: 50 MB logs, 50 MB worst cases, 16 KB hostile lines (issue 11: < 5 s).

    python benchmarks/probe_parse_speed.py

Reports CPU time (what the parser costs), wall time (what a shared box adds) and, for each
50 MB input, the peak resident memory of a forked child that holds the input and parses it
(so building one input, or parsing another, does not hide what a parse costs). Results go
to docs/transport.md ("Totality and speed").
"""

from __future__ import annotations

import multiprocessing
import resource
import time
from collections.abc import Callable
from pathlib import Path

from pytest_p2p.probes.transport import parse_nccl_log

ROOT = Path(__file__).resolve().parent.parent
MB = 1_000_000


def timed(label: str, text: str) -> None:
    w, c = time.perf_counter(), time.process_time()
    proof = parse_nccl_log(text, label)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    print(f"{label:<52} {len(text) / MB:6.2f} MB  cpu {cpu:6.2f} s  wall {wall:6.2f} s  "
          f"{proof.n_connections} connections ({len(proof.connections)} kept), state {proof.state}", flush=True)


def real_log() -> str:
    real = (ROOT / "fixtures" / "logs" / "h200x2_nccl-2.28.9_p2p_on.log").read_text()
    return real * (50 * MB // len(real) + 1)


def same_line() -> str:
    line = "host-name-01:123456:123456 [0] NCCL INFO Channel 07/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    return line * (50 * MB // len(line) + 1)


def many_gpus() -> str:
    """64 channels x 2 connections x 56 rank pairs of 8 GPUs x P2P/SHM/NET: what a big job repeats."""
    vias = ("via P2P/CUMEM/read", "via SHM/direct/direct", "[send] via NET/IB/0/GDRDMA")
    block = "".join(f"node-{s // 4}:{1000 + s}:{1000 + s} [{s % 4}] NCCL INFO Channel {ch:02d}/{ci} : "
                    f"{s}[{s % 4}] -> {d}[{d % 4}] {vias[(s + d + ch) % 3]}\n"
                    for ch in range(64) for ci in range(2) for s in range(8) for d in range(8) if s != d)
    return block * (50 * MB // len(block) + 1)


def big_job() -> str:
    """A 4096-GPU job's ring (512 nodes x 8): every line of one init differs (channel, ranks); inits repeat."""
    lines = []
    for ch in range(32):
        for r in range(4096):
            d = (r + 1) % 4096
            prefix = f"node-{r // 8:03d}:{2000 + r % 8}:{2000 + r % 8} [{r % 8}] NCCL INFO Channel {ch:02d}/0 : "
            if r // 8 == d // 8:
                lines.append(f"{prefix}{r}[{r % 8}] -> {d}[{d % 8}] via P2P/CUMEM/read\n")
            else:
                lines.append(f"{prefix}{r}[{r % 8}] -> {d}[{d % 8}] [send] via NET/IB/{r % 8}/GDRDMA\n")
                rprefix = prefix.replace(f"node-{r // 8:03d}:{2000 + r % 8}:{2000 + r % 8} [{r % 8}]",
                                         f"node-{d // 8:03d}:{2000 + d % 8}:{2000 + d % 8} [{d % 8}]")
                lines.append(f"{rprefix}{r}[{r % 8}] -> {d}[{d % 8}] [receive] via NET/IB/{d % 8}/GDRDMA\n")
    block = "".join(lines)
    return block * (50 * MB // len(block) + 1)


def all_distinct() -> str:
    """Adversarial: no two connection lines alike (ranks counting up), so nothing is parsed once for many."""
    out, size, i = [], 0, 0
    while size < 50 * MB:
        line = f"h:1:1 [0] NCCL INFO Channel {i % 64:02d}/0 : {i}[0] -> {i + 1}[1] via P2P/CUMEM/read\n"
        out.append(line)
        size += len(line)
        i += 1
    return "".join(out)


def in_child(label: str, make: Callable[[], str]) -> None:
    """Build the input here, parse it in a forked child: the child's peak RSS is the text plus the parse."""
    text = make()

    def run() -> None:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        timed(label, text)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{'':<52} peak RSS {peak:.0f} MB ({before:.0f} MB at the start, with the input)", flush=True)
    p = multiprocessing.get_context("fork").Process(target=run)
    p.start()
    p.join()


def main() -> None:
    in_child("50 MB: real 2x H200 capture, repeated", real_log)
    in_child("50 MB: every line the same connection line", same_line)
    in_child("50 MB: every line a connection, 8 GPUs x 64 ch x 3 kinds", many_gpus)
    in_child("50 MB: every line a connection, 4096-GPU ring x 32 ch", big_job)
    in_child("50 MB: no two connection lines alike (ranks count up)", all_distinct)
    for name, hostile in (("16 KB line of 'NCCL '", "NCCL " * 3300),
                          ("16 KB line of 'x] NCCL INFO '", "x] NCCL INFO " * 1300),
                          ("16 KB line of 'Channel 0 : ' ... via", "NCCL INFO " + "Channel 0 : " * 1360 + " via "),
                          ("16 KB line of 'comm ' ... Init COMPLETE", "NCCL INFO " + "comm " * 3300 + "Init COMPLETE"),
                          ("5000-digit channel number", "h:1:1 [0] NCCL INFO Channel " + "9" * 5000 + " : 0[0] -> "
                                                        "1[1] via P2P/IPC")):
        timed(name, hostile)


if __name__ == "__main__":
    main()
