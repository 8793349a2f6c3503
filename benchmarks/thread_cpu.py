"""Which threads are busy right now, and whose they are: one line per thread over a short interval.

Why: in a resident campaign both arms' vLLM servers live on the pair while only one is measured.
vLLM's workers poll their shared-memory queue with ``sched_yield`` (``SpinTimer``) unless
``VLLM_SLEEP_WHEN_IDLE`` is set, so the idle arm may hold CPU threads at 100 % beside the
measured one. This samples ``/proc/*/task/*/stat`` twice and names each busy thread's process,
its CPU (``psr``) and the arm its process runs for (``NCCL_P2P_DISABLE`` in its environment),
so a poll on the GPU machine records the fact instead of a guess.

    python3 benchmarks/thread_cpu.py [--interval 1.0] [--min 10] >> threads.log
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: Path) -> tuple[str, int, int] | None:
    """(comm, utime + stime ticks, last CPU) of one task, or None when it went away."""
    try:
        raw = path.read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2:].split()
    # fields after comm start at state (field 3): utime 14, stime 15, processor 39
    return comm, int(rest[11]) + int(rest[12]), int(rest[36])


def _tasks() -> dict[tuple[int, int], tuple[str, int, int]]:
    out = {}
    for p in PROC.iterdir():
        if not p.name.isdigit():
            continue
        try:
            tids = list((p / "task").iterdir())
        except OSError:
            continue
        for t in tids:
            s = _stat(t / "stat")
            if s is not None:
                out[(int(p.name), int(t.name))] = s
    return out


def _arm(pid: int) -> str:
    """The arm a process serves, from its environment (the campaign sets NCCL_P2P_DISABLE per arm)."""
    try:
        env = (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return "?"
    for kv in env:
        if kv.startswith(b"NCCL_P2P_DISABLE="):
            return "p2p_off" if kv.split(b"=", 1)[1] not in (b"", b"0") else "p2p_on"
    return "-"


def _title(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:60]
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--min", type=float, default=10.0, help="show threads at or above this CPU %%")
    a = ap.parse_args()
    t0, first = time.monotonic(), _tasks()
    time.sleep(a.interval)
    dt, second = time.monotonic() - t0, _tasks()
    rows = []
    for key, (comm, ticks, cpu) in second.items():
        if key in first:
            pct = 100.0 * (ticks - first[key][1]) / TICK / dt
            if pct >= a.min:
                rows.append((pct, key[0], key[1], comm, cpu))
    rows.sort(reverse=True)
    stamp = time.strftime("%H:%M:%S", time.gmtime())
    print(f"== {stamp} threads at >= {a.min:g} % CPU over {dt:.2f} s: {len(rows)}; "
          f"busy CPUs {sum(r[0] for r in rows) / 100:.1f}")
    for pct, pid, tid, comm, cpu in rows:
        print(f"  {pct:5.0f} %  cpu {cpu:3d}  pid {pid:7d} tid {tid:7d}  {comm:<16} {_arm(pid):8} {_title(pid)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
