"""How fast can the load generator ingest streamed tokens, and how exact are its timestamps?

Why: a P2P on/off difference of 8-14 % is only meaningful if the client is not the
bottleneck and its TTFT/ITL timestamps are far below the effects measured. This runs
the load generator (pinned to one core) against the SIMULATED stand-in (pinned to
another core when there is one) at concurrency 1...256 and reports:

* ``output_tok_s``: streamed tokens/s actually ingested;
* ``client_cpu_s`` / ``client_ceiling_tok_s``: the load generator's own CPU time and the
  rate one core could sustain at that cost (tokens / CPU-seconds) -- the ceiling;
* ``ttft_err_*`` / ``itl_err_*``: receive time minus the stand-in's send time per token
  (``--timestamp-log``; both sides use ``time.perf_counter``, i.e. CLOCK_MONOTONIC on
  Linux, so the clocks are the same clock), p50/p99/max in ms; ``client_timestamps`` says
  whether the receive times are the kernel's stamps or the event loop's. ITL error is the error of
  each inter-chunk gap: (recv_k - recv_k-1) - (send_k - send_k-1).

With ``--client-processes 0`` (automatic sharding, as in campaigns) the client processes
pin themselves to the highest cores and the stand-in is pinned to core 0;
``--transports raw openai aiohttp`` with ``--client-processes 1`` compares what one client
core ingests per transport (the measurement behind the default transport).

Usage: ``python benchmarks/harness_ceiling.py [--concurrency 1 4 16 64 256] [--tpot-ms 2]
[--output-len 128] [--client-processes 0] [--transports raw] [--json out.json]``.
Results and method: docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from pytest_p2p.probes.arms import Arm
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.loadgen import generate_load, make_spec
from pytest_p2p.serve.metrics import RequestRecord, percentile
from pytest_p2p.serve.server import launch


def _cpu_s(pid: int) -> float:
    rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def _client_cpu_s() -> float:
    """This process plus reaped children (the client processes of a sharded run)."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _pin(pid: int, cpu: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(pid, {cpus[cpu % len(cpus)]})


def standin_config(send_log: Path, ttft_ms: float, tpot_ms: float, lockstep: bool = False) -> object:
    """The stand-in at a fixed pace that logs when it writes each chunk (``--timestamp-log``).

    ``lockstep``: every stream's token at one shared step, in a burst, as vLLM sends them.
    """
    return parse_server({"command": ["python", "-m", "pytest_p2p.serve.standin"], "model": "bench",
                         "args": {"ttft-ms": ttft_ms, "tpot-ms": tpot_ms, "jitter": 0, "batch-coef": 0,
                                  "timestamp-log": str(send_log), "lockstep": lockstep},  # false: no flag
                         "startup_timeout_s": 30, "request_timeout_s": 120, "teardown_timeout_s": 5}, "bench")


def read_sends(send_log: Path) -> dict[str, list[float]]:
    """The stand-in's send times per request id (its log: ``rid chunk perf_counter`` a line)."""
    sends: dict[str, list[float]] = defaultdict(list)
    for line in send_log.read_text().splitlines():
        rid, _, t = line.split()[:3]  # a fourth field: the step number of a --lockstep run
        sends[rid].append(float(t))
    return sends


def timestamp_errors(records: list[RequestRecord], sends: dict[str, list[float]]) -> dict[str, float]:
    """Receive time minus the stand-in's send time: first chunk (TTFT error) and every gap (ITL error), in ms."""
    first: list[float] = []
    got_itl: list[float] = []
    sent_itl: list[float] = []
    for rec in records:
        sent = sends.get(rec.request_id)  # a late run's re-run sends under new ids: only the kept run is matched
        got = rec.chunk_times or []
        if not rec.success or not sent or len(sent) != len(got):
            continue
        first.append(got[0] - sent[0])
        got_itl.extend(got[k] - got[k - 1] for k in range(1, len(got)))
        sent_itl.extend(sent[k] - sent[k - 1] for k in range(1, len(sent)))
    gaps = [g - s for g, s in zip(got_itl, sent_itl, strict=True)]
    abs_gaps = [abs(g) for g in gaps]
    return {
        # the p99 ITL the client reports against the one the server sent: what a late stamp does to a tail
        "itl_p99_reported_ms": percentile(got_itl, 99) * 1e3, "itl_p99_sent_ms": percentile(sent_itl, 99) * 1e3,
        "ttft_err_p50_ms": percentile(first, 50) * 1e3, "ttft_err_p99_ms": percentile(first, 99) * 1e3,
        "ttft_err_max_ms": max(first, default=0.0) * 1e3,
        "itl_err_p50_ms": percentile(abs_gaps, 50) * 1e3, "itl_err_p99_ms": percentile(abs_gaps, 99) * 1e3,
        "itl_err_max_ms": max(abs_gaps, default=0.0) * 1e3,
    }


def _marked(row: dict[str, object]) -> str:
    """Whether the result said its timestamps may be late, and whether it had to (ITL error p99 > 1 ms)."""
    late, needed = bool(row["client_lateness"]), float(row["itl_err_p99_ms"]) > 1.0  # type: ignore[arg-type]
    return {(True, True): "yes (needed)", (True, False): "yes", (False, True): "NO: silently wrong",
            (False, False): "no"}[(late, needed)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    p.add_argument("--tpot-ms", type=float, default=2.0)
    p.add_argument("--lockstep", action="store_true",
                   help="the stand-in sends every stream's token at one shared step, in a burst, as vLLM does")
    p.add_argument("--ttft-ms", type=float, default=5.0)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--requests-per-stream", type=int, default=3)
    p.add_argument("--json", type=Path)
    p.add_argument("--client-processes", type=int, default=0,
                   help="0: the planner's choice (one process, more after a late run); 1: the one-core ceiling")
    p.add_argument("--transports", nargs="+", default=["raw"])
    p.add_argument("--no-pin", action="store_true", help="do not pin client and stand-in to separate cores")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="harness-ceiling-"))
    ts_log = tmp / "sends.log"
    cfg = standin_config(ts_log, args.ttft_ms, args.tpot_ms, args.lockstep)
    import httpx  # noqa: F401 - import cost is paid once per process, not per token: keep it out of the numbers
    import openai  # noqa: F401

    rows = []
    cpus = len(os.sched_getaffinity(0))
    one_core = args.client_processes == 1
    if not args.no_pin and one_core:
        _pin(0, 0)  # this process is the client; sharded clients pin themselves to the highest cores
    with launch(cfg, Arm(name="bench"), (0,), None, tmp / "server.log") as srv:
        if not args.no_pin:
            _pin(srv.pid, 1 if one_core else 0)
        for transport in args.transports:
            for c in args.concurrency:
                ts_log.write_text("")
                records: list[RequestRecord] = []
                warm = min(c, 8)
                spec = make_spec(concurrency=c, num_prompts=c * args.requests_per_stream, input_len=args.input_len,
                                 output_len=args.output_len, warmup=warm, keep_chunk_times=True,
                                 request_timeout_s=120.0, client_processes=args.client_processes,
                                 transport=transport, tokenizer="standin-words")
                cpu0, srv0, wall0 = _client_cpu_s(), _cpu_s(srv.pid), time.perf_counter()
                res = generate_load(srv.base_url, srv.api_key, srv.model, spec, records_out=records)
                cpu = _client_cpu_s() - cpu0
                srv_cpu = _cpu_s(srv.pid) - srv0
                wall = time.perf_counter() - wall0
                time.sleep(0.2)  # the stand-in flushes its send log at the end of each request
                sends = read_sends(ts_log)
                tokens = res.total_output_tokens
                row = {
                    "transport": transport, "concurrency": c, "client_processes": res.client_processes,
                    "completed": res.completed, "failed": res.failed, "output_tok_s": res.output_throughput,
                    "offered_tok_s": c * 1000.0 / args.tpot_ms if args.tpot_ms else float("inf"),
                    "client_cpu_s": cpu, "client_cpu_util": cpu / wall,
                    "client_cpu_util_max": res.client_cpu_util_max,
                    "client_loop_lag_p99_ms": res.client_loop_lag_p99_ms,
                    "client_saturated": res.client_saturated, "client_reshards": len(res.reshards),
                    "client_timestamps": res.client_timestamps,
                    # what the lateness check saw: a run whose ITL error p99 is > 1 ms must be marked here
                    "client_lateness": res.client_lateness, "client_merged_chunk_share": res.client_merged_share,
                    "client_read_lag_p99_ms": res.client_read_lag_p99_ms,
                    "client_run_queue_share": res.client_run_queue_share,
                    # warm-up tokens cost client CPU too, so they count towards the ceiling
                    "client_ceiling_tok_s": (tokens + (warm - res.warmup_failed) * args.output_len) / cpu
                    if cpu else float("inf"),
                    "standin_cpu_util": srv_cpu / wall,
                    "mean_itl_ms": res.latency_stats["mean_itl_ms"], "p99_itl_ms": res.latency_stats["p99_itl_ms"],
                    **timestamp_errors(records, sends),
                }
                rows.append(row)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    head = ("| transport | C | client processes | tok/s ingested | client CPU (busiest process) | "
            "client ceiling tok/s per CPU-s | stand-in CPU | TTFT err p99 ms | ITL err p99 ms | ITL err max ms | "
            "merged chunks | marked late |")
    print("\n" + head + "\n|" + "---|" * 12)
    for row in rows:
        late = f" (after {row['client_reshards']} late)" if row["client_reshards"] else ""
        print(f"| {row['transport']} | {row['concurrency']} | {row['client_processes']}{late} | "
              f"{row['output_tok_s']:.0f} | "
              f"{row['client_cpu_util_max'] * 100:.0f} % | "
              f"{row['client_ceiling_tok_s']:.0f} | {row['standin_cpu_util'] * 100:.0f} % | "
              f"{row['ttft_err_p99_ms']:.3f} | {row['itl_err_p99_ms']:.3f} | {row['itl_err_max_ms']:.3f} | "
              f"{row['client_merged_chunk_share']:.2%} | {_marked(row)} |")
    silent = [r for r in rows if r["itl_err_p99_ms"] > 1.0 and not r["client_lateness"]]
    print(f"\nruns with ITL error p99 > 1 ms not marked late: {len(silent)} of {len(rows)}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                                         "cpus": cpus, "loadavg": os.getloadavg(), "python": sys.version}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
