"""Real-vLLM smoke run of the serve stage: p2p_on and p2p_off through the plugin's own code path.

For the GPU machine (2x H200, vLLM 0.24.0). For each arm it launches vLLM with
``serve.server.launch`` (same env builder, readiness checks and teardown as the
fixtures), runs the load generator at each concurrency, and prints one JSON line per
(arm, C) with the ``vllm bench serve`` metrics, then the arm's attestation and its
problems against the arm's expected transport. Finally it SIGKILLs an API server on
purpose (vLLM issue #55510: its EngineCore/Workers may survive, holding GPU memory),
prints which marked processes outlived it, and lets teardown kill them and prove with
NVML that nothing is left on the pair.

Run from the repository root (the interpreter needs vLLM's deps: openai, httpx, pynvml)::

    PYTHONPATH=/tmp/site:. /opt/torch/.venv/bin/python3 benchmarks/vllm_smoke.py --model-dir MODEL_DIR

Exit code 0 only if every request succeeded, every attestation matched its arm and the
SIGKILL teardown left no process and no memory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pytest_p2p.errors import P2PError
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.loadgen import run_load
from pytest_p2p.serve.server import find_leftovers, gpu_usage, launch
from pytest_p2p.util import atomic_write_json

KEYS = ("completed", "failed", "output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
        "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:100]
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="real-vLLM smoke run: p2p_on/p2p_off, metrics, attestation, teardown")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--python", default="/opt/torch/.venv/bin/python3")
    p.add_argument("--pair", type=int, nargs=2, default=[0, 1])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--arms", nargs="+", default=["p2p_on", "p2p_off"])
    p.add_argument("--results", type=Path, default=Path("vllm-smoke-results"))
    p.add_argument("--startup-timeout", type=float, default=600)
    p.add_argument("--client-processes", type=int, default=1)
    p.add_argument("--skip-sigkill", action="store_true")
    p.add_argument("--standin", action="store_true",
                   help="dry run on a CPU box: the SIMULATED stand-in instead of vLLM (same code path)")
    args = p.parse_args(argv)
    command = ([sys.executable, "-m", "pytest_p2p.serve.standin", "serve"] if args.standin
               else [args.python, "-m", "vllm.entrypoints.cli.main", "serve"])

    cfg = parse_server({
        "command": command,
        "model": args.model_dir, "served_model_name": "tiny",
        "args": {"load-format": "dummy", "attention-backend": "FLASH_ATTN", "tensor-parallel-size": 2,
                 "max-model-len": 2048, "gpu-memory-utilization": 0.3, "max-num-seqs": 64, "dtype": "bfloat16"},
        "env": {} if args.standin else {"PYTHONPATH": "/tmp/site", "VLLM_USE_FLASHINFER_SAMPLER": "0",
                                        "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
        "startup_timeout_s": args.startup_timeout, "request_timeout_s": 120, "teardown_timeout_s": 60,
    }, "vllm_smoke.py")
    ok = True
    summary: dict[str, dict[int, dict[str, Any]]] = {}
    for arm_name in args.arms:
        arm = PRESETS[arm_name]
        log = args.results / f"gpu{args.pair[0]}-gpu{args.pair[1]}-{arm_name}" / "server.log"
        t0 = time.monotonic()
        try:
            with launch(cfg, arm, args.pair, None, log) as srv:
                print(f"# {arm_name}: ready in {srv.ready_s:.1f} s, pid {srv.pid}, log {log}", flush=True)
                summary[arm_name] = {}
                for c in args.concurrency:
                    r = run_load(srv.base_url, srv.api_key, srv.model, concurrency=c, num_prompts=args.num_prompts,
                                 input_len=args.input_len, output_len=args.output_len, warmup=2,
                                 request_timeout_s=cfg.request_timeout_s,
                                 client_processes=args.client_processes)
                    atomic_write_json(log.parent / f"load-c{c}.json", r)
                    summary[arm_name][c] = r
                    ok &= r["failed"] == 0
                    print(json.dumps({"arm": arm_name, "concurrency": c, **{k: r[k] for k in KEYS}}), flush=True)
                att = srv.attestation()
                problems = att.problems(arm.expect_transport)
                ok &= not problems
                print(json.dumps({"arm": arm_name, "attestation": att.to_dict(), "problems": problems},
                                 default=str), flush=True)
            print(f"# {arm_name}: torn down, notes {srv.notes}, total {time.monotonic() - t0:.0f} s", flush=True)
        except P2PError as exc:
            ok = False
            print(f"# {arm_name}: FAILED: {exc}", flush=True)
    if "p2p_on" in summary and "p2p_off" in summary:
        for c in args.concurrency:
            on, off = summary["p2p_on"][c]["output_throughput"], summary["p2p_off"][c]["output_throughput"]
            print(f"# C={c}: output tok/s p2p_on {on:.0f} vs p2p_off {off:.0f}: uplift {100 * (on / off - 1):+.1f} %")

    if not args.skip_sigkill:
        log = args.results / "sigkill" / "server.log"
        try:
            with launch(cfg, PRESETS["p2p_on"], args.pair, None, log) as srv:
                marked = find_leftovers(srv.token)
                print(f"# sigkill: server tree before: {[(q, _cmdline(q)) for q in marked]}", flush=True)
                print(f"# sigkill: NVML before: {gpu_usage(args.pair)}", flush=True)
                os.kill(srv.pid, signal.SIGKILL)
                srv.process.wait(30)
                time.sleep(3)
                survivors = find_leftovers(srv.token)
                print(f"# sigkill: API server {srv.pid} SIGKILLed; marked processes still alive: "
                      f"{[(q, _cmdline(q)) for q in survivors]}", flush=True)
            after = find_leftovers(srv.token)
            print(f"# sigkill: after teardown: leftovers {after}, NVML {gpu_usage(args.pair)}, notes {srv.notes}",
                  flush=True)
            ok &= not after
        except P2PError as exc:
            ok = False
            print(f"# sigkill: FAILED: {exc}", flush=True)
    print("# RESULT:", "OK" if ok else "PROBLEMS (see above)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
