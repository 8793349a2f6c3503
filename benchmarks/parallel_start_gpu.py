"""GPU check of parallel starts (issue 24, item 1): both arms' resident vLLM servers started at once.

    python3 benchmarks/parallel_start_gpu.py [--mode quick|full] [--model /tmp/m7b] [--out DIR]

Runs the 7B-shape rig (``fixtures/rigs/nvlink-pair-vllm-7b.yaml``, ``residency: resident``) as a rig owner
does (``pytest -m p2p --pyargs pytest_p2p.checks.test_campaign --p2p-live``), one point (c16), one window
pair per start, and reads back how each start launched its servers (``run.json`` ``server_starts``) and what
each server's log says about its KV cache:

* ``quick`` (~3 min on 2x H100): the rig sets ``kv-cache-memory-bytes`` (``--kv-gib``, 16 GiB), so start 1
  is parallel: both servers spawned before either was ready, both with the same KV cache (vLLM's
  ``GPU KV cache size: N tokens`` equal), launch to all ready compared with one vLLM start (115-130 s).
* ``full`` (~7 min): the campaign's default path: start 1 sequential (vLLM profiles; the campaign learns
  0.95 x the smallest ``Available KV cache memory``), start 2 parallel with that size.

Why a script: the servers' start times and memory are only real on GPUs; CI runs the same path with the
stand-in (tests/test_parallel_start.py). Each check prints PASS or FAIL; the summary goes to
``$OUT/parallel_start.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RIG = ROOT / "fixtures" / "rigs" / "nvlink-pair-vllm-7b.yaml"
KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
RESERVED = re.compile(r"reserved (\d+(?:\.\d+)?) GiB memory for KV Cache")


def write_rig(out: Path, model: str, mode: str, kv_gib: float, standin: bool) -> Path:
    import yaml  # the project's own dependency (rig files are YAML)

    rig = yaml.safe_load(RIG.read_text())
    rig["rig"] = f"parallel-start-{mode}"
    rig["server"]["model"] = model
    if standin:  # a dry run of this script on a CPU box: the SIMULATED stand-in, started the same way
        rig["server"]["command"] = [sys.executable, "-m", "pytest_p2p.serve.standin"]
        rig["server"]["startup_timeout_s"] = 60
    rig["server"].setdefault("env", {})["VLLM_CACHE_ROOT"] = str(Path("/tmp/vllm-cache-parallel"))
    if mode == "quick":
        rig["server"]["args"]["kv-cache-memory-bytes"] = int(kv_gib * 2**30)
    rig["campaign"].update({"residency": "resident", "start_mode": "auto", "starts": 1 if mode == "quick" else 2,
                            "windows": 1, "window_s": 5, "concurrency": [16], "warmup": 16, "smoke": False,
                            "max_starts": None, "max_time_s": None})
    path = out / f"rig_{mode}.yaml"
    path.write_text(yaml.safe_dump(rig, sort_keys=False))
    return path


def check(results: list[dict[str, object]], name: str, ok: bool, detail: str) -> None:
    results.append({"check": name, "ok": ok, "detail": detail})
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("quick", "full"), default="quick")
    ap.add_argument("--model", default="/tmp/m7b")
    ap.add_argument("--kv-gib", type=float, default=16.0, help="quick: the rig's KV cache size per server")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/parallel_start")
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--standin", action="store_true", help="dry run on a CPU box: stand-in server, demo snapshot")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if not args.standin and not (Path(args.model) / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "pytest_p2p.serve.tinymodel", args.model, "--hidden", "4096",
                        "--layers", "32", "--heads", "32", "--kv-heads", "8"], check=True)
    rig = write_rig(out, args.model, args.mode, args.kv_gib, args.standin)
    res_dir = out / f"res_{args.mode}"
    demo = ROOT / "pytest_p2p" / "demo" / "h200x2-nvlink.snapshot.json"
    evidence = ["--p2p-snapshot", str(demo)] if args.standin else ["--p2p-live"]
    cmd = [sys.executable, "-m", "pytest", "-m", "p2p", "--pyargs", "pytest_p2p.checks.test_campaign", *evidence,
           "--p2p-rig", str(rig), "--p2p-results", str(res_dir), "-rs", "-q", "-p", "no:cacheprovider"]
    print("running:", " ".join(cmd), flush=True)
    with open(out / f"pytest_{args.mode}.txt", "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=args.timeout_s, check=False)
    print((out / f"pytest_{args.mode}.txt").read_text()[-1500:], flush=True)
    checks: list[dict[str, object]] = []
    runs = sorted(res_dir.glob("*/run.json"))
    if not runs:
        check(checks, "campaign ran", False, f"no run.json under {res_dir} (pytest exit {proc.returncode})")
        return 1
    run_dir = runs[-1].parent
    meta = json.loads(runs[-1].read_text())
    starts = meta.get("server_starts") or []
    check(checks, "campaign finished", meta.get("status") == "complete",
          f"status {meta.get('status')}, errors {meta.get('errors')}, transport {meta.get('transport')}")
    for rec in starts:
        servers = rec.get("servers", {})
        spawned = {a: s["spawned_s"] for a, s in servers.items()}
        ready = {a: s["ready_s"] for a, s in servers.items()}
        print(f"start {rec['start']} attempt {rec['attempt']}: {rec['start_mode']}, launch to all ready "
              f"{rec['start_s']:.1f} s, spawned {spawned}, ready {ready}, --kv-cache-memory-bytes "
              f"{rec.get('kv_cache_memory_bytes')} ({rec.get('kv_source')}); learned "
              f"{rec.get('kv_learned_bytes')} from {rec.get('kv_cache_gib')}", flush=True)
        tokens: dict[str, list[str]] = {}
        reserved: dict[str, list[str]] = {}
        for arm in servers:
            log = run_dir / "scenarios" / f"{arm}-c16" / f"server_start{rec['start']}.log"
            text = log.read_text(errors="replace") if log.is_file() else ""
            tokens[arm] = KV_TOKENS.findall(text)
            reserved[arm] = RESERVED.findall(text)
        print(f"  KV cache tokens {tokens}; reserved GiB {reserved}", flush=True)
        if rec["start_mode"] == "parallel":
            check(checks, f"start {rec['start']} parallel", max(spawned.values()) < min(ready.values()),
                  f"both spawned (at {spawned}) before either was ready (at {ready}); all ready in "
                  f"{rec['start_s']:.1f} s (one vLLM start took 115-130 s on 4x H100, two sequential ~250 s)")
            same = len({tuple(v) for v in tokens.values()}) == 1 and (all(tokens.values()) or args.standin)
            check(checks, f"start {rec['start']} same KV cache", same and all(reserved.values()),
                  f"every server skipped profiling (reserved {reserved}) and got the same cache ({tokens})")
    want = ["parallel"] if args.mode == "quick" else ["sequential", "parallel"]
    got = [r["start_mode"] for r in starts]
    check(checks, "start modes", got[-len(want):] == want and len(got) >= len(want), f"{got} (expected {want})")
    summary = {"mode": args.mode, "run_dir": str(run_dir), "server_starts": starts, "checks": checks,
               "notes": meta.get("notes"), "wall_s": round(time.monotonic() - t0, 1)}
    (out / "parallel_start.json").write_text(json.dumps(summary, indent=1))
    print(f"wall {summary['wall_s']} s; summary in {out / 'parallel_start.json'}", flush=True)
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
