"""Speed of the NCCL log parser: a 50 MB log, a 50 MB worst case, 16 KB hostile lines (issue 11: < 5 s).

    python benchmarks/probe_parse_speed.py

Reports CPU time (what the parser costs) and wall time (what a shared box adds) plus the peak
resident memory. Results go to docs/transport.md ("Totality and speed").
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

from pytest_p2p.probes.transport import parse_nccl_log

ROOT = Path(__file__).resolve().parent.parent
MB = 1_000_000


def timed(label: str, text: str) -> None:
    w, c = time.perf_counter(), time.process_time()
    proof = parse_nccl_log(text, label)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    print(f"{label:<48} {len(text) / MB:7.2f} MB  cpu {cpu:6.2f} s  wall {wall:6.2f} s  "
          f"{len(proof.connections)} connections, state {proof.state}")


def main() -> None:
    real = (ROOT / "fixtures" / "logs" / "h200x2_nccl-2.28.9_p2p_on.log").read_text()
    timed("50 MB: real 2x H200 capture, repeated", real * (50 * MB // len(real) + 1))
    line = "host-name-01:123456:123456 [0] NCCL INFO Channel 07/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    timed("50 MB: every line a connection line", line * (50 * MB // len(line) + 1))
    for name, hostile in (("16 KB line of 'NCCL '", "NCCL " * 3300),
                          ("16 KB line of 'x] NCCL INFO '", "x] NCCL INFO " * 1300),
                          ("16 KB line of 'Channel 0 : ' ... via", "NCCL INFO " + "Channel 0 : " * 1360 + " via "),
                          ("16 KB line of 'comm ' ... Init COMPLETE", "NCCL INFO " + "comm " * 3300 + "Init COMPLETE"),
                          ("5000-digit channel number", "h:1:1 [0] NCCL INFO Channel " + "9" * 5000 + " : 0[0] -> "
                                                        "1[1] via P2P/IPC")):
        timed(name, hostile)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB (includes the inputs)")


if __name__ == "__main__":
    main()
