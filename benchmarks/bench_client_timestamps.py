"""Whose chunk timestamps are late: ours or ``vllm bench serve``'s? Both against the stand-in's send clock.

Why: against a real vLLM server our p99 ITL came out 6-11 % *below* bench's at C = 16 and
64 while the mean ITL agreed within 1 % (docs/performance.md). A lower tail means one of
the two clients stamps chunks later than they arrive in bursts. The server's own send
times settle it: the SIMULATED stand-in logs when it writes each chunk
(``--timestamp-log``, ``time.perf_counter`` on both sides, one clock), so each client's
error per chunk is measurable. Our side is :func:`~pytest_p2p.serve.loadgen.generate_load`
(in one process unless ``--client-processes`` says otherwise); bench's side is vLLM's own
request function (``vllm/benchmarks/lib/endpoint_request_func.py``, loaded from the
installed vLLM, or ``--vllm-root``, without importing the rest of vLLM) driven as ``vllm
bench serve`` drives it: one event loop, one aiohttp session with bench's connector
settings, a semaphore of C, every request a task from the start. The two alternate,
``--rounds`` times per C.

    PYTHONPATH=. python benchmarks/bench_client_timestamps.py [--concurrency 16 64] [--rounds 3]
        [--vllm-root DIR] [--tpot-ms 2] [--lockstep] [--json out.json]

``--lockstep`` makes the stand-in send like vLLM: every running stream's token at one
shared step, in a burst (at C = 64, 64 chunks within microseconds every step). The table
then also gives the p99 ITL each client reports against the p99 ITL the stand-in sent.

Needs aiohttp, regex and tqdm (bench's imports); vLLM's file, not vLLM's runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

from benchmarks.harness_ceiling import read_sends, standin_config, timestamp_errors
from pytest_p2p.probes.arms import Arm
from pytest_p2p.serve.loadgen import generate_load, make_spec
from pytest_p2p.serve.metrics import RequestRecord
from pytest_p2p.serve.server import RunningServer, launch
from pytest_p2p.serve.workload import STANDIN_TOKENIZER, load_tokenizer, token_prompts


def bench_request_module(root: str | None) -> types.ModuleType:
    """vLLM's ``endpoint_request_func`` module, loaded from its file alone (vLLM's package pulls in torch)."""
    if root is None:
        spec = importlib.util.find_spec("vllm")  # finds the package without running its __init__
        if spec is None or not spec.submodule_search_locations:
            sys.exit("bench_client_timestamps: no vLLM found; pass --vllm-root (a directory holding vllm/)")
        root = str(Path(next(iter(spec.submodule_search_locations))).parent)
    path = Path(root) / "vllm" / "benchmarks" / "lib" / "endpoint_request_func.py"
    if not path.is_file():
        sys.exit(f"bench_client_timestamps: {path} does not exist (--vllm-root must hold vllm/benchmarks/lib/)")
    loader = importlib.util.spec_from_file_location("bench_endpoint_request_func", path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    sys.modules[loader.name] = module  # its dataclasses look themselves up there
    loader.loader.exec_module(module)
    return module


async def _bench_run(mod: types.ModuleType, srv: RunningServer, prompts: list[str], c: int, warm: int,
                     output_len: int, input_len: int) -> tuple[list[RequestRecord], float, float]:
    """Warm-ups, then every measured request as bench runs them; records with absolute chunk times."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=c, limit_per_host=c, ttl_dns_cache=300, use_dns_cache=True,
                                     keepalive_timeout=60, enable_cleanup_closed=True, force_close=False, ssl=False)
    url = srv.base_url + "/v1/completions"
    os.environ["OPENAI_API_KEY"] = srv.api_key  # bench reads the key from there

    def job(i: int, rid: str) -> Any:
        return mod.RequestFuncInput(prompt=prompts[i], api_url=url, prompt_len=input_len, output_len=output_len,
                                    model=srv.model, ignore_eos=True, request_id=rid)

    async with aiohttp.ClientSession(connector=connector, trust_env=True,
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        sem = asyncio.Semaphore(c)

        async def limited(i: int, rid: str) -> Any:
            async with sem:
                return await mod.async_request_openai_completions(job(i, rid), session)

        await asyncio.gather(*(limited(i, f"warm-{i}") for i in range(warm)))
        cpu0, t0 = time.process_time(), time.perf_counter()
        outs = await asyncio.gather(*(limited(warm + i, f"req-{i}") for i in range(len(prompts) - warm)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    records = []
    for i, out in enumerate(outs):
        times = [out.start_time + out.ttft]
        for gap in out.itl:
            times.append(times[-1] + gap)
        records.append(RequestRecord(success=bool(out.success), request_id=f"req-{i}", chunk_times=times,
                                     output_tokens=len(times)))
    tokens = sum(len(r.chunk_times or []) for r in records)
    return records, tokens / wall, cpu / wall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tpot-ms", type=float, default=2.0)
    p.add_argument("--lockstep", action="store_true",
                   help="the stand-in sends every stream's token at one shared step, in a burst, as vLLM does")
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--requests-per-stream", type=int, default=3)
    p.add_argument("--client-processes", type=int, default=1, help="ours: 1 (as bench), 0 (the planner) or n")
    p.add_argument("--vllm-root", help="a directory holding vllm/ (default: the installed vLLM)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    mod = bench_request_module(args.vllm_root)
    tmp = Path(tempfile.mkdtemp(prefix="bench-client-ts-"))
    log = tmp / "sends.log"
    cfg = standin_config(log, 5.0, args.tpot_ms, args.lockstep)
    tok = load_tokenizer(STANDIN_TOKENIZER)
    rows: list[dict[str, Any]] = []
    with launch(cfg, Arm(name="bench"), (0,), None, tmp / "server.log") as srv:
        for c in args.concurrency:
            n, warm = c * args.requests_per_stream, min(c, 8)
            for rnd in range(args.rounds):
                order = ("ours", "bench") if rnd % 2 == 0 else ("bench", "ours")
                prompts = token_prompts(tok, warm + n, args.input_len, seed=100 * c + rnd)
                for who in order:
                    log.write_text("")
                    if who == "ours":
                        records: list[RequestRecord] = []
                        spec = make_spec(concurrency=c, num_prompts=n, input_len=args.input_len,
                                         output_len=args.output_len, warmup=warm, keep_chunk_times=True,
                                         seed=100 * c + rnd, client_processes=args.client_processes,
                                         tokenizer=STANDIN_TOKENIZER, request_timeout_s=120.0)
                        res = generate_load(srv.base_url, srv.api_key, srv.model, spec, records_out=records)
                        rate, cpu = res.output_throughput, res.client_cpu_util_max
                    else:
                        records, rate, cpu = asyncio.run(_bench_run(mod, srv, prompts, c, warm, args.output_len,
                                                                    args.input_len))
                    time.sleep(0.2)  # the stand-in flushes its send log at the end of each request
                    row = {"concurrency": c, "round": rnd, "who": who, "tok_s": rate, "client_cpu": cpu,
                           **timestamp_errors(records, read_sends(log))}
                    rows.append(row)
                    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}),
                          flush=True)
    print("\n| C | client | rounds | tok/s | client CPU | TTFT err p99 ms (median, max) "
          "| ITL err p99 ms (median, max) | p99 ITL ms reported / sent (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for c in args.concurrency:
        for who in ("ours", "bench"):
            mine = [r for r in rows if r["concurrency"] == c and r["who"] == who]
            ttft = [r["ttft_err_p99_ms"] for r in mine]
            itl = [r["itl_err_p99_ms"] for r in mine]
            print(f"| {c} | {who} | {len(mine)} | {statistics.median(r['tok_s'] for r in mine):.0f} | "
                  f"{statistics.median(r['client_cpu'] for r in mine) * 100:.0f} % | "
                  f"{statistics.median(ttft):.3f} ({max(ttft):.3f}) | {statistics.median(itl):.3f} ({max(itl):.3f}) | "
                  f"{statistics.median(r['itl_p99_reported_ms'] for r in mine):.3f} / "
                  f"{statistics.median(r['itl_p99_sent_ms'] for r in mine):.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "cpus": len(os.sched_getaffinity(0)),
                                         "loadavg": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
