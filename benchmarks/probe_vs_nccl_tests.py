"""Speed goal of the all-reduce probe: measure the link, not Python.

Runs our probe (one process per GPU, direct NCCL calls captured in a CUDA graph) and nccl-tests' ``all_reduce_perf``
side by side on a GPU pair, per arm, and prints our time/busbw against theirs per size.
Goal: time within 10 % of nccl-tests at 8-512 KiB, busbw within 5 % from 1 MiB up.

Run on the GPU machine (results go into docs/performance.md)::

    python benchmarks/probe_vs_nccl_tests.py --pair 0,1 --arms p2p_on,p2p_off --mpi --out /tmp/pvn

``--mpi`` runs nccl-tests one process per GPU under ``mpirun`` (as the reference numbers
were taken); without it, or without mpirun, nccl-tests runs single-process ``-g 2``
("direct pointer" transport: a different path, said so in the table). When
``all_reduce_perf`` is not found (``NCCL_TESTS_BIN`` or PATH) the table compares with the
reference numbers from the issue instead, labelled as such. ``--graph`` adds the torch
CUDA-graph timing and ``--eager`` the plain torch loop, to show what each method costs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_p2p.probes.allreduce import Row, run_allreduce
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.probes.config import ProbeConfig
from pytest_p2p.probes.nccltests_runner import run_nccl_tests
from pytest_p2p.util import atomic_write_json, format_size, parse_size

KiB, MiB = 1024, 1024**2
# The reference: nccl-tests 2.19.6 all_reduce_perf, MPI, one process per GPU, float sum, 2x H200 NVLink.
REFERENCE = {
    "p2p_on": {8 * KiB: (10.2, None), 128 * KiB: (11.4, None), 128 * MiB: (None, 286.0)},
    "p2p_off": {8 * KiB: (11.5, None), 128 * KiB: (23.0, None), 128 * MiB: (None, 26.7)},
}
LATENCY_BAND = (8 * KiB, 512 * KiB)  # goal: time within 10 %
BANDWIDTH_FROM = 1 * MiB  # goal: busbw within 5 %


def theirs_from_nccl_tests(parsed: dict[str, Any]) -> dict[int, tuple[float | None, float | None]]:
    """size -> (time_us, busbw) from the in-place half (our probe all-reduces in place)."""
    out = {}
    for row in parsed.get("rows", []):
        half = row.get("ip") or row.get("oop") or {}
        out[int(row["size_bytes"])] = (half.get("time_us"), half.get("busbw"))
    return out


def verdict(size: int, ours: Row, t_theirs: float | None, bw_theirs: float | None) -> str:
    if LATENCY_BAND[0] <= size <= LATENCY_BAND[1] and t_theirs:
        return "ok" if ours.time_us <= 1.10 * t_theirs else "SLOW"
    if size >= BANDWIDTH_FROM and bw_theirs:
        return "ok" if ours.busbw_gbs >= 0.95 * bw_theirs else "SLOW"
    return ""


def table(arm: str, label: str, ours: list[Row], theirs: dict[int, tuple[float | None, float | None]],
          extra: dict[str, dict[int, Row]] | None = None) -> list[str]:
    extra = extra or {}
    head = f"{'size':>8} {'ours us':>9} {'their us':>9} {'t ratio':>7} {'ours GB/s':>9} {'their GB/s':>10} " \
           f"{'bw ratio':>8} {'goal':>5}"
    for name in extra:
        head += f" {name + ' us':>9}"
    lines = [f"== arm {arm}: ours vs {label}", head]
    for r in ours:
        t, bw = theirs.get(r.bytes, (None, None))
        tr = f"{r.time_us / t:7.2f}" if t else f"{'-':>7}"
        br = f"{r.busbw_gbs / bw:8.2f}" if bw else f"{'-':>8}"
        line = (f"{format_size(r.bytes):>8} {r.time_us:9.2f} {t if t else '-':>9} {tr} {r.busbw_gbs:9.2f} "
                f"{bw if bw else '-':>10} {br} {verdict(r.bytes, r, t, bw):>5}")
        for rows in extra.values():
            line += f" {rows[r.bytes].time_us:9.2f}" if r.bytes in rows else f" {'-':>9}"
        lines.append(line)
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="0,1", help="NVML indices, e.g. 0,1")
    ap.add_argument("--arms", default="p2p_on,p2p_off", help=f"presets: {', '.join(PRESETS)}")
    ap.add_argument("--min", default="4", help="smallest size (nccl-tests -b)")
    ap.add_argument("--max", default="256M", help="largest size (nccl-tests -e)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--launches", type=int, default=5, help="timed graph replays per size")
    ap.add_argument("--mpi", action="store_true", help="nccl-tests under mpirun, one process per GPU")
    ap.add_argument("--graph", action="store_true", help="also time torch all-reduces captured in a CUDA graph")
    ap.add_argument("--uncaptured", action="store_true", help="also time the direct NCCL calls without a graph")
    ap.add_argument("--eager", action="store_true", help="also time the plain torch loop (no graph)")
    ap.add_argument("--out", default="probe-vs-nccl-tests", help="directory for logs and results.json")
    ns = ap.parse_args(argv)
    a, b = (int(x) for x in ns.pair.split(","))
    lo, hi = parse_size(ns.min), parse_size(ns.max)
    sizes, s = [], lo
    while s <= hi:  # nccl-tests -f 2
        sizes.append(s)
        s *= 2
    cfg = ProbeConfig(sizes=tuple(sizes), decode_sizes=(), iters=ns.iters, graph_launches=ns.launches,
                      timeout_s=600.0)
    out = Path(ns.out)
    report: dict[str, Any] = {"pair": [a, b], "sizes": sizes, "arms": {}}
    nt_args = ("-b", str(lo), "-e", str(hi), "-f", "2", "-n", str(ns.iters), "-w", "5")
    for arm_name in ns.arms.split(","):
        arm = PRESETS[arm_name]
        from dataclasses import replace

        ours = run_allreduce((a, b), arm, cfg, None, out / arm_name / "probe")
        extra: dict[str, dict[int, Row]] = {}
        for flag, name, variant in ((ns.uncaptured, "direct", replace(cfg, graph=False)),
                                    (ns.graph, "graph", replace(cfg, direct=False)),
                                    (ns.eager, "eager", replace(cfg, direct=False, graph=False))):
            if flag:
                res = run_allreduce((a, b), arm, variant, None, out / arm_name / name)
                extra[name] = {r.bytes: r for r in res.rows}
        nt = run_nccl_tests((a, b), arm, None, out / arm_name / "nccl-tests", 600.0, args=nt_args, mpi=ns.mpi)
        if nt is not None:
            theirs, label = theirs_from_nccl_tests(nt["parsed"]), f"nccl-tests ({nt['transport_note']})"
        else:
            theirs, label = REFERENCE.get(arm_name, {}), "the issue's reference numbers (nccl-tests not run here)"
        print(f"probe transport: {getattr(ours.proof, 'transport', '?')}; correct: {ours.correct}; "
              f"timing: {ours.meta.get('timing')}")
        print("\n".join(table(arm_name, label, ours.rows, theirs, extra)), flush=True)
        report["arms"][arm_name] = {"ours": ours.to_dict(), "theirs_label": label,
                                    "theirs": {str(k): v for k, v in theirs.items()},
                                    **{name: [vars(r) for r in rows.values()] for name, rows in extra.items()}}
    atomic_write_json(out / "results.json", report)
    print(f"results: {out / 'results.json'}")
    print(json.dumps({k: v["theirs_label"] for k, v in report["arms"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
