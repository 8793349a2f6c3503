"""Speed goal of the all-reduce probe: its time per all-reduce within 10 % of nccl-tests at 8-512 KiB.

Runs our probe and nccl-tests' ``all_reduce_perf`` **interleaved** on one GPU pair, per arm
(ours, theirs, ours, theirs ... ``--rounds`` times), and prints per size the geometric mean of
the per-round ratios ours/theirs with its 95 % t interval. A goal is called **met** only when
the interval's upper bound is within it (time: ours <= 1.10 x theirs at 8-512 KiB; busbw:
ours >= 0.95 x theirs from 1 MiB), **not met** when the lower bound is past it, and
**inconclusive** otherwise — never a median called "met" that its interval does not support.

Run on the GPU machine (results go into docs/performance.md)::

    python benchmarks/probe_vs_nccl_tests.py --nccl-tests-src /path/to/nccl-tests --rounds 4 --out $OUT/pvn

``--nccl-tests-src DIR`` builds ``all_reduce_perf`` from that source tree first (``make`` with
``NCCL_HOME`` = the NCCL of the torch wheel, sm_90; ``MPI=1`` when ``mpicc`` is found, so that it
runs one process per GPU under ``mpirun`` like our probe; otherwise single-process ``-g 2``,
a different transport path, labelled so). ``--nccl-tests-bin DIR`` uses a built one.
``--variants direct,direct-graph`` also times our graph-captured method each round;
``--build-only`` stops after the build (then pass ``--nccl-tests-bin OUT/nccl-tests/build``).
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from pytest_p2p.jsontypes import JSONObject
from pytest_p2p.probes.allreduce import Row, run_allreduce
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.probes.config import ProbeConfig
from pytest_p2p.probes.nccltests_runner import mpirun_prefix, run_nccl_tests
from pytest_p2p.stats.tdist import t_quantile
from pytest_p2p.util import atomic_write_json, format_size, parse_size

KiB, MiB = 1024, 1024**2
LATENCY_BAND = (8 * KiB, 512 * KiB)  # goal: time ratio <= 1.10
BANDWIDTH_FROM = 1 * MiB  # goal: busbw ratio >= 0.95
VARIANTS = {"direct": {"graph": False}, "direct-graph": {"graph": True}}


def nccl_home() -> str | None:
    """The NCCL of the torch wheel (``nvidia/nccl`` with ``include/`` and ``lib/``), where nccl-tests links."""
    try:
        import nvidia.nccl as pkg
    except ImportError:
        return None
    for base in pkg.__path__:
        if os.path.isdir(os.path.join(base, "include")):
            return str(base)
    return None


def mpi_home(mpicc: str) -> Path:
    """The MPI prefix nccl-tests' Makefile wants (``$MPI_HOME/include/mpi.h``): Debian's OpenMPI keeps it under
    ``/usr/lib/<triplet>/openmpi``, not beside ``/usr/bin/mpicc``, so ask the wrapper (``-showme:incdirs``)."""
    try:
        out = subprocess.run([mpicc, "-showme:incdirs"], capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        out = []
    for inc in map(Path, out):
        if (inc / "mpi.h").is_file():
            return inc.parent
    return Path(mpicc).resolve().parent.parent


def build(src: Path, out: Path) -> tuple[Path, bool]:
    """Build ``all_reduce_perf`` from an nccl-tests tree into ``out``; (the binary's directory, built with MPI)."""
    home = nccl_home()
    if home is None:
        raise SystemExit("no NCCL headers: torch's nvidia-nccl wheel has no include/ directory")
    lib = Path(home) / "lib"
    if not (lib / "libnccl.so").exists():  # the wheel ships only libnccl.so.2; the linker wants libnccl.so
        links = out / "ncclib"
        links.mkdir(parents=True, exist_ok=True)
        target = sorted(glob.glob(str(lib / "libnccl.so*")))[0]
        if not (links / "libnccl.so").exists():
            (links / "libnccl.so").symlink_to(target)
        lib = links
    mpicc = shutil.which("mpicc")
    mpi = mpicc is not None and shutil.which("mpirun") is not None
    args = ["make", "-C", str(src / "src"), f"BUILDDIR={out / 'build'}", f"NCCL_HOME={home}",
            "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90", f"-j{os.cpu_count() or 4}",
            f"{out / 'build'}/all_reduce_perf"]
    if mpi and mpicc is not None:
        args += ["MPI=1", f"MPI_HOME={mpi_home(mpicc)}"]
    env = dict(os.environ, LIBRARY_PATH=f"{lib}:{os.environ.get('LIBRARY_PATH', '')}")
    t0 = time.monotonic()
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        raise SystemExit(f"building all_reduce_perf failed (status {proc.returncode})")
    print(f"built all_reduce_perf (MPI={int(mpi)}) in {time.monotonic() - t0:.0f} s against {home}", flush=True)
    return out / "build", mpi


def ratio_interval(ratios: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of per-round ratios and its two-sided t interval (nan bounds below 2 rounds)."""
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    m = math.fsum(logs) / n
    if n < 2:
        return math.exp(m), math.nan, math.nan
    s = math.sqrt(math.fsum((x - m) ** 2 for x in logs) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * s / math.sqrt(n)
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def goal(size: int, lo: float, hi: float, kind: str) -> str:
    """met / not met / inconclusive from the interval of ours/theirs (time) or ours/theirs (busbw)."""
    if math.isnan(lo):
        return "n<2"
    if kind == "time":
        return "met" if hi <= 1.10 else ("not met" if lo > 1.10 else "inconclusive")
    return "met" if lo >= 0.95 else ("not met" if hi < 0.95 else "inconclusive")


def theirs_rows(nt: JSONObject) -> dict[int, float]:
    """size -> in-place time (us) of one nccl-tests run (our probe all-reduces in place)."""
    parsed = nt.get("parsed")
    rows = parsed.get("rows", []) if isinstance(parsed, dict) else []
    out: dict[int, float] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        half = row.get("ip") or row.get("oop")
        t = half.get("time_us") if isinstance(half, dict) else None
        size = row.get("size_bytes")
        if isinstance(t, (int, float)) and t > 0 and isinstance(size, int):
            out[size] = float(t)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pair", default="0,1", help="NVML indices, e.g. 0,1")
    ap.add_argument("--arms", default="p2p_on,p2p_off", help=f"presets: {', '.join(PRESETS)}")
    ap.add_argument("--min", default="8K", help="smallest size (nccl-tests -b)")
    ap.add_argument("--max", default="64M", help="largest size (nccl-tests -e)")
    ap.add_argument("--rounds", type=int, default=4, help="ours/theirs alternations per arm")
    ap.add_argument("--trials", type=int, default=10, help="our trials per size")
    ap.add_argument("--variants", default="direct", help=f"our timing methods each round: {', '.join(VARIANTS)}")
    ap.add_argument("--nccl-tests-src", help="nccl-tests source tree to build all_reduce_perf from")
    ap.add_argument("--nccl-tests-bin", help="directory holding a built all_reduce_perf")
    ap.add_argument("--build-only", action="store_true", help="build all_reduce_perf, print its directory, stop")
    ap.add_argument("--out", default=os.environ.get("OUT", "probe-vs-nccl-tests"), help="logs and results.json")
    ns = ap.parse_args(argv)
    home = nccl_home()
    if home is not None:  # all_reduce_perf finds the wheel's libnccl.so.2 (mpirun forwards LD_LIBRARY_PATH)
        os.environ["LD_LIBRARY_PATH"] = f"{home}/lib:{os.environ.get('LD_LIBRARY_PATH', '')}"
    out = Path(ns.out).resolve()
    a, b = (int(x) for x in ns.pair.split(","))
    mpi = shutil.which("mpirun") is not None
    if ns.nccl_tests_src:
        bindir, mpi = build(Path(ns.nccl_tests_src).resolve(), out / "nccl-tests")
        if ns.build_only:
            print(f"all_reduce_perf: {bindir / 'all_reduce_perf'} (MPI={int(mpi)})")
            return 0
    elif ns.nccl_tests_bin:
        bindir = Path(ns.nccl_tests_bin)
    else:
        raise SystemExit("give --nccl-tests-src DIR (built here) or --nccl-tests-bin DIR: this benchmark compares")
    binary = str(bindir / "all_reduce_perf")
    lo_b, hi_b = parse_size(ns.min), parse_size(ns.max)
    sizes, s = [], lo_b
    while s <= hi_b:  # nccl-tests -f 2
        sizes.append(s)
        s *= 2
    base = ProbeConfig(sizes=tuple(sizes), decode_sizes=(), trials=ns.trials, timeout_s=300.0, nccl_tests=False)
    nt_args = ("-b", str(lo_b), "-e", str(hi_b), "-f", "2", "-n", "20", "-w", "5")
    variants = [v for v in ns.variants.split(",") if v]
    report: JSONObject = {"pair": [a, b], "sizes": sizes, "rounds": ns.rounds, "mpi": mpi, "arms": {}}
    t_start = time.monotonic()
    for arm_name in ns.arms.split(","):
        arm = PRESETS[arm_name]
        ours: dict[str, list[dict[int, Row]]] = {v: [] for v in variants}
        theirs: list[dict[int, float]] = []
        note = ""
        for r in range(ns.rounds):
            for v in variants:
                cfg = replace(base, graph=bool(VARIANTS[v]["graph"]))
                res = run_allreduce((a, b), arm, cfg, None, out / arm_name / f"r{r}" / v)
                if not res.correct:
                    raise SystemExit(f"arm {arm_name}: our all-reduce gave wrong values: {res.checks}")
                ours[v].append({row.bytes: row for row in res.rows})
            nt = run_nccl_tests((a, b), arm, None, out / arm_name / f"r{r}" / "nccl-tests", 300.0, args=nt_args,
                                binary=binary, mpi=mpi and mpirun_prefix(dict(os.environ)) is not None)
            if nt is None:
                raise SystemExit(f"all_reduce_perf did not run ({binary})")
            note = str(nt.get("transport_note"))
            theirs.append(theirs_rows(nt))
            print(f"[{time.monotonic() - t_start:5.0f} s] arm {arm_name} round {r + 1}/{ns.rounds} done", flush=True)
        print(f"\n== arm {arm_name}: ours / nccl-tests ({note}), {ns.rounds} interleaved rounds, geometric mean of "
              f"per-round ratios, 95 % t interval")
        print(f"{'size':>8} {'variant':>13} {'ours us':>9} {'their us':>9} {'t ratio':>7} {'95 % CI':>15} "
              f"{'goal':>12}")
        table: list[JSONObject] = []
        for size in sizes:
            for v in variants:
                pairs = [(o[size].time_us, t[size]) for o, t in zip(ours[v], theirs, strict=True)
                         if size in o and size in t]
                if not pairs:
                    continue
                ratios = [x / y for x, y in pairs]
                gm, lo, hi = ratio_interval(ratios)
                if LATENCY_BAND[0] <= size <= LATENCY_BAND[1]:
                    verdict = goal(size, lo, hi, "time")
                elif size >= BANDWIDTH_FROM:  # busbw ratio = inverse time ratio (same bytes, same factor)
                    verdict = "bw " + goal(size, 1 / hi, 1 / lo, "busbw")
                else:
                    verdict = ""
                ours_gm = math.exp(math.fsum(math.log(x) for x, _ in pairs) / len(pairs))
                theirs_gm = math.exp(math.fsum(math.log(y) for _, y in pairs) / len(pairs))
                print(f"{format_size(size):>8} {v:>13} {ours_gm:9.2f} {theirs_gm:9.2f} {gm:7.3f} "
                      f"{lo:7.3f}..{hi:<7.3f} {verdict:>12}")
                table.append({"size": size, "variant": v, "ratio": gm, "ci95": [lo, hi], "goal": verdict,
                              "ratios": ratios, "ours_us": [x for x, _ in pairs], "theirs_us": [y for _, y in pairs]})
        arms = report["arms"]
        assert isinstance(arms, dict)
        arms[arm_name] = {"theirs": note, "table": table}
    atomic_write_json(out / "results.json", report)
    print(f"\nresults: {out / 'results.json'} ({time.monotonic() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
