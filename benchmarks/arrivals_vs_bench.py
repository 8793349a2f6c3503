"""Our Poisson/gamma arrival schedule against ``vllm bench serve``'s own, for the same seed, rate, burstiness.

Why: a P2P on/off comparison made with our load generator must offer the load a bench
command with the same ``--seed --request-rate --burstiness`` offers; the old schedule
(Python's RNG, first request at t = 0, no rescaling) sent 6.6-9.8 req/s for 8 req/s at
N = 64 depending on the seed (issue 26).

With vLLM importable (``PYTHONPATH=/tmp/site`` on the GPU machine) every case is drawn
by bench's ``vllm.benchmarks.serve.get_request`` itself, after ``np.random.seed(seed)``
as ``vllm bench serve`` does (its ``main_async``); its delays are read from the
generator's precomputed schedule. Without vLLM the cases are compared with the recorded
schedules in ``benchmarks/results/arrivals_bench_0.24.json`` (``--record`` writes that
file from bench's function). Passes when every offset agrees within 1 us; the output
says which reference it used and the largest difference.

Usage: ``python benchmarks/arrivals_vs_bench.py [--record] [--json OUT]``; exit 0 when identical.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import types
from pathlib import Path

from pytest_p2p.serve.workload import arrival_offsets

FIXTURE = Path(__file__).resolve().parent / "results" / "arrivals_bench_0.24.json"
#: (n, request_rate, burstiness, seed): Poisson and gamma, few and many requests, the issue's N = 64 at 8 req/s
CASES = [(64, 8.0, 1.0, s) for s in range(5)] + [(1, 2.0, 1.0, 0), (500, 50.0, 1.0, 7), (200, 4.0, 0.5, 3),
                                                 (200, 4.0, 3.0, 11), (1000, 1000.0, 1.0, 123)]
TOLERANCE_S = 1e-6


def bench_schedule(n: int, rate: float, burstiness: float, seed: int) -> list[float] | None:
    """bench's offsets from its own ``get_request`` (None without vLLM): the send times it sleeps until."""
    try:
        import numpy as np
        from vllm.benchmarks import serve
    except ImportError:
        return None
    np.random.seed(seed)
    requests = list(range(n))  # get_request only counts and yields them
    sent: list[float] = []
    clock = [0.0]  # a fake clock from 0: no waiting, and no precision lost to an epoch-sized time

    async def fake_sleep(seconds: float) -> None:
        clock[0] += seconds

    async def record() -> None:
        real_time, real_asyncio = serve.time, serve.asyncio  # type: ignore[attr-defined]
        serve.time = types.SimpleNamespace(time=lambda: clock[0], perf_counter=time.perf_counter)  # type: ignore[attr-defined]
        serve.asyncio = types.SimpleNamespace(sleep=fake_sleep)  # type: ignore[attr-defined]
        try:
            async for _ in serve.get_request(requests, rate, burstiness):  # type: ignore[arg-type]
                sent.append(clock[0])
        finally:
            serve.time, serve.asyncio = real_time, real_asyncio  # type: ignore[attr-defined]

    asyncio.run(record())
    return sent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--record", action="store_true", help="write the fixture from bench's function (needs vLLM)")
    p.add_argument("--json", type=Path, default=Path(os.environ["OUT"]) / "arrivals_vs_bench.json"
                   if os.environ.get("OUT") else None)
    args = p.parse_args(argv)
    fixture = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
    rows, worst, reference = [], 0.0, set()
    recorded: dict[str, list[float]] = {}
    for n, rate, burst, seed in CASES:
        key = f"{n}/{rate:g}/{burst:g}/{seed}"
        ref = bench_schedule(n, rate, burst, seed)
        source = "vllm.benchmarks.serve.get_request"
        if ref is None:
            ref, source = fixture.get("cases", {}).get(key), f"recorded fixture {FIXTURE.name}"
        if ref is None:
            print(f"{key}: no reference (no vLLM, no fixture entry)")
            return 2
        recorded[key] = ref
        ours = arrival_offsets(n, rate, burst, seed)
        diff = max((abs(a - b) for a, b in zip(ours, ref, strict=True)), default=0.0) if len(ours) == len(ref) \
            else float("inf")
        worst = max(worst, diff)
        reference.add(source)
        rows.append({"case": key, "n": n, "rate": rate, "burstiness": burst, "seed": seed, "max_abs_diff_s": diff,
                     "achieved_rate": n / ref[-1] if ref[-1] else float("inf"), "reference": source})
        print(f"{key:>22}: max |ours - bench| = {diff:.3g} s, bench's last send at {ref[-1]:.6f} s ({source})")
    if args.record:
        if reference != {"vllm.benchmarks.serve.get_request"}:
            print("--record needs vLLM importable")
            return 2
        import vllm

        FIXTURE.write_text(json.dumps({"vllm": vllm.__version__, "cases": recorded}, indent=1) + "\n")
        print(f"recorded {FIXTURE}")
    ok = worst <= TOLERANCE_S
    print(f"\n{'IDENTICAL' if ok else 'DIFFERENT'}: largest difference {worst:.3g} s over {len(CASES)} cases "
          f"(tolerance {TOLERANCE_S:g} s); reference: {', '.join(sorted(reference))}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"identical": ok, "worst_s": worst, "rows": rows}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
