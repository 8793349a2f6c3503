"""How much of a campaign window's clock is not load, on the stand-in with a real 7B tokenizer (issue 24).

A window's clock (``meta.window_s``) should hold its load (``duration``) and little else: what it holds besides
counts as "measured" in the share under load, and its energy goes into the window's tokens per joule. This runs
a resident campaign on the stand-in (no GPU) with the prompts a 7B-shape rig sends (128 tokens, a Llama
tokenizer written by ``pytest_p2p.serve.tinymodel``) and prints, per window, its clock, its load, the difference,
and the gap before it; then how often and how long the prompts were made (``token_prompts``).

    python benchmarks/window_overhead.py [--prompts-per-concurrency 9] [--windows 4] [--tpot-ms 6]

On the 2-core box (2026-11-27, eighth session), c64 and 576 prompts a window: 0.52-0.65 s of clock beyond the load
before ``Backend.prepare``, 0.20-0.26 s after (docs/performance.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts-per-concurrency", type=int, default=9)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tpot-ms", type=float, default=6.0, help="the stand-in's time per token (keep the client idle)")
    args = ap.parse_args()
    os.environ.setdefault("PYTEST_P2P_NVML", "off")

    from pytest_p2p.campaign.backends import ModelBackend
    from pytest_p2p.campaign.config import parse_campaign
    from pytest_p2p.campaign.runner import CampaignRunner
    from pytest_p2p.lease import GpuLease
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.serve import loadgen
    from pytest_p2p.serve.config import parse_server

    tmp = Path(tempfile.mkdtemp(prefix="window_overhead_"))
    tok = tmp / "tok"
    subprocess.run([sys.executable, "-m", "pytest_p2p.serve.tinymodel", str(tok), "--hidden", "4096", "--layers",
                    "32", "--heads", "32", "--kv-heads", "8"], check=True, stdout=subprocess.DEVNULL)
    made: list[float] = []
    real = loadgen.token_prompts

    @functools.wraps(real)
    def timed(*a: Any, **k: Any) -> list[str]:
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            made.append(time.perf_counter() - t)

    loadgen.token_prompts = timed  # type: ignore[assignment]
    server = parse_server({"command": [sys.executable, "-m", "pytest_p2p.serve.standin"], "model": str(tok),
                           "env": {"PYTEST_P2P_STANDIN_TTFT_MS": "2", "PYTEST_P2P_STANDIN_TPOT_MS": str(args.tpot_ms),
                                   "PYTEST_P2P_STANDIN_JITTER": "0"},
                           "startup_timeout_s": 60,
                           "load": {"input_len": 128, "output_len": 128, "warmup": 0, "tokenizer": str(tok)}},
                          "window-overhead.yaml")
    cfg = parse_campaign({"kind": "model", "concurrency": [args.concurrency], "starts": 1, "windows": args.windows,
                          "window_s": None, "smoke": False, "warmup": args.concurrency,
                          "prompts_per_concurrency": args.prompts_per_concurrency, "cooldown_s": 0,
                          "idle_baseline_s": 0, "telemetry_hz": 2, "min_uplift": "0%", "residency": "resident"},
                         "window-overhead.yaml")
    runner = CampaignRunner(pair=(0, 1), config=cfg, kind="model", arms=PRESETS,
                            backend=ModelBackend(server=server, campaign=cfg, pair=(0, 1), rig_env={}),
                            results_root=tmp / "results", rig_name="window-overhead", simulated=True,
                            lease=GpuLease(tmp / "locks"))
    t0 = time.monotonic()
    res = runner.run()
    print(f"campaign {res.status} in {time.monotonic() - t0:.1f} s{': ' + '; '.join(res.errors) if res.errors else ''}")
    reps = []
    for by_rep in res.rep_data.values():
        for d in by_rep.values():
            m = d["meta"]
            reps.append((dt.datetime.fromisoformat(str(m["started_at"])).timestamp(), float(m["window_s"]),
                         float(d["duration"]), str(m["arm"])))
    reps.sort()
    prev = None
    print(f"{'arm':8s} {'clock s':>8s} {'load s':>7s} {'not load':>9s} {'gap before':>11s}")
    for start, clock, load, arm in reps:
        print(f"{arm:8s} {clock:8.2f} {load:7.2f} {clock - load:9.2f} {start - prev if prev else 0:11.2f}")
        prev = start + clock
    over = [c - load for _, c, load, _ in reps]
    print(f"not load inside the clock: mean {sum(over) / len(over):.2f} s over {len(over)} windows")
    print(f"prompts made {len(made)} times, {sum(made) / max(1, len(made)):.2f} s each "
          f"(warm-up and windows: {json.dumps([round(x, 2) for x in made])})")
    return 0 if res.status == "complete" else 1


if __name__ == "__main__":
    sys.exit(main())
