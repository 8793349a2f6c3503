"""How much of a sharded run's wall time is not load, with its client processes spawned per run and from a pool.

``generate_load`` over 2 client processes spawns both per run (``loadclients.run_sharded``): an interpreter
each, our imports, the job pickled to it; a campaign window's clock holds all of it (on the GPU machine a c64
window ran ~0.9 s beyond its load against ~0.37 s at c16, one in-process loop). Inside
``loadclients.client_pool()`` the processes are spawned once (here by ``ensure(2)``, before the first timed run)
and reused. This starts the stand-in, makes the prompts once (``loadgen.prepare``, as the campaign does before a
window's clock), then runs the same load alternately in a pool and without one, and prints per variant the wall
time of each ``generate_load`` call minus the load's own ``duration``: median, min-max, and the saving.

    python benchmarks/client_pool.py [--runs 10] [--concurrency 64] [--prompts 256] [--tpot-ms 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs of each variant, interleaved")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=256, help="measured requests a run")
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--tpot-ms", type=float, default=2.0, help="the stand-in's time per token")
    args = ap.parse_args()
    os.environ.setdefault("PYTEST_P2P_NVML", "off")

    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.serve.config import parse_server
    from pytest_p2p.serve.loadclients import client_pool
    from pytest_p2p.serve.loadgen import generate_load, make_spec, prepare
    from pytest_p2p.serve.server import launch

    tmp = Path(tempfile.mkdtemp(prefix="client_pool_"))
    server = parse_server({"command": [sys.executable, "-m", "pytest_p2p.serve.standin"], "model": "tiny",
                           "args": {"ttft-ms": 2, "tpot-ms": args.tpot_ms, "jitter": 0}, "startup_timeout_s": 60,
                           "teardown_timeout_s": 2}, "client-pool.yaml")
    spec = make_spec(concurrency=args.concurrency, num_prompts=args.prompts, input_len=args.input_len,
                     output_len=args.output_len, warmup=args.concurrency, seed=1, client_processes=2)
    outside: dict[str, list[float]] = {"pool": [], "no pool": []}
    loads: dict[str, list[float]] = {"pool": [], "no pool": []}
    with launch(server, PRESETS["p2p_on"], (0, 1), None, tmp / "server.log") as srv, client_pool() as pool:
        prepare(srv.base_url, srv.api_key, srv.model, spec)  # prompts made before the clock, both variants alike
        t = time.perf_counter()
        pool.ensure(2)
        print(f"pool.ensure(2): {time.perf_counter() - t:.3f} s (the spawn the pooled runs no longer pay)")
        for i in range(2 * args.runs):
            variant = "pool" if i % 2 == 0 else "no pool"
            t = time.perf_counter()
            if variant == "pool":
                r = generate_load(srv.base_url, srv.api_key, srv.model, spec)
            else:
                with _no_pool():
                    r = generate_load(srv.base_url, srv.api_key, srv.model, spec)
            wall = time.perf_counter() - t
            if r.completed != args.prompts or r.client_processes != 2:
                print(f"run {i} ({variant}): {r.completed}/{args.prompts} completed over {r.client_processes} "
                      "client processes: not a comparable run", file=sys.stderr)
                return 1
            outside[variant].append(wall - r.duration)
            loads[variant].append(r.duration)
            print(f"run {i:2d} {variant:8s} wall {wall:6.3f} s  load {r.duration:6.3f} s  "
                  f"outside {wall - r.duration:6.3f} s")
        print(f"pool processes spawned over the session: {pool.spawned} (pids {pool.pids(2)})")
    print(f"\nc{args.concurrency}, {args.prompts} prompts, 2 client processes, {args.runs} runs each, interleaved")
    print(f"{'variant':8s} {'outside median':>15s} {'min':>7s} {'max':>7s} {'load median':>12s}")
    for variant, xs in outside.items():
        print(f"{variant:8s} {statistics.median(xs):13.3f} s {min(xs):7.3f} {max(xs):7.3f} "
              f"{statistics.median(loads[variant]):10.3f} s")
    saving = statistics.median(outside["no pool"]) - statistics.median(outside["pool"])
    print(f"saving: {saving:.3f} s a run (median outside the load, no pool - pool)")
    return 0


@contextlib.contextmanager
def _no_pool() -> Iterator[None]:
    """The open pool hidden for one run: ``run_sharded`` then spawns per run, exactly as with none open."""
    from pytest_p2p.serve import loadclients

    with loadclients._POOL_LOCK:
        saved, loadclients._POOL = loadclients._POOL, None
    try:
        yield
    finally:
        with loadclients._POOL_LOCK:
            loadclients._POOL = saved


if __name__ == "__main__":
    sys.exit(main())
