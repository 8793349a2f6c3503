"""Can a vLLM start be shorter? Starts one arm's server under each variant, alternated, and splits every start as
its log tells it (issue 24: cheaper starts, more of them in a nightly window).

    python3 benchmarks/start_phases_gpu.py [--rounds 2] [--variants default,fork,seqs64,fork_seqs64]
        [--model-dir DIR] [--pair 0,1] [--out DIR]
    python3 benchmarks/start_phases_gpu.py --standin        # the script's own check, without a GPU

Why: on 2x H200 (2026-11-27) about 62 s of a warm ~100 s start of the 7B rig was vLLM importing itself three
times, one process after the other: the API server, then the engine core and the workers, each a
``multiprocessing`` *spawn* (a fresh interpreter that imports vLLM again: 19-20 s each measured alone). vLLM's
CLI sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` unless the variable is set (``entrypoints/serve/utils/api_utils``
in 0.24, logged at debug level only); ``fork`` would inherit the parent's imports, and vLLM falls back to spawn
where CUDA is already initialised, saying so in its log. This measures whether ``fork`` holds on the rig and
what it saves: per start the seconds to ready (``serve.server.launch``, the plugin's own launcher), the split
of ``serve.start_phases`` (starting processes / on the GPU) and whether the log says spawn was forced.
``seqs64`` is the campaign's hint (``max-num-seqs`` at the top concurrency): CUDA graphs captured up to 128, not
512, which took 10-12 s of a start alone and ~60 s with 8 servers at once.

One warm-up start fills the compile cache first (not counted); then the variants alternate, ``--rounds``
times each, so a drift of the machine falls on all. A tiny Llama with dummy weights keeps the GPU part short:
the import part does not depend on the model. The last line: ``START_PHASES <variant>: ready median X s,
processes median Y s`` per variant, and ``<variant> saves Z s a start`` against the default.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: each variant's server env and args on top of the default's
VARIANTS: dict[str, tuple[dict[str, str], dict[str, object]]] = {
    "default": ({}, {}),
    "fork": ({"VLLM_WORKER_MULTIPROC_METHOD": "fork"}, {}),
    "seqs64": ({}, {"max-num-seqs": 64}),  # CUDA graphs up to 128, not 512 (the campaign's hint)
    "fork_seqs64": ({"VLLM_WORKER_MULTIPROC_METHOD": "fork"}, {"max-num-seqs": 64}),  # both
}
FORCED_SPAWN = "We must use the `spawn` multiprocessing start method"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="default,fork,seqs64")
    ap.add_argument("--pair", default="0,1")
    ap.add_argument("--model-dir", type=Path)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "start_phases")
    ap.add_argument("--standin", action="store_true", help="the stand-in server instead of vLLM (no GPU)")
    a = ap.parse_args(argv)
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.serve.config import parse_server
    from pytest_p2p.serve.server import launch
    from pytest_p2p.serve.start_phases import start_phases

    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown {unknown}; known: {', '.join(VARIANTS)}")
    a.out.mkdir(parents=True, exist_ok=True)
    pair = tuple(int(g) for g in a.pair.split(","))
    if a.standin:
        command = [sys.executable, "-m", "pytest_p2p.serve.standin"]
        args: dict[str, object] = {"tensor-parallel-size": 2}
        env: dict[str, str] = {"PYTEST_P2P_STANDIN_STARTUP_DELAY_S": "1"}
        model = "standin-model"
    else:
        model_dir = a.model_dir or Path(tempfile.mkdtemp(prefix="p2p-tiny-"))
        if not (model_dir / "config.json").is_file():
            subprocess.run([sys.executable, "-m", "pytest_p2p.serve.tinymodel", str(model_dir)], check=True)
        command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
        args = {"tensor-parallel-size": 2, "max-model-len": 512, "gpu-memory-utilization": 0.4,
                "load-format": "dummy", "attention-backend": "FLASH_ATTN"}
        env = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
               "VLLM_CACHE_ROOT": str(a.out / "vllm-cache")}
        model = str(model_dir)
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    order = ["warm-up"] + [v for _ in range(a.rounds) for v in variants]
    rows: list[dict[str, object]] = []
    for k, variant in enumerate(order):
        more_env, more_args = VARIANTS.get(variant, ({}, {}))
        config = parse_server({"command": command, "model": model, "args": {**args, **more_args},
                               "startup_timeout_s": 400, "env": {**env, **more_env}}, "start_phases_gpu")
        log = a.out / f"start{k}_{variant}.log"
        t0 = time.monotonic()
        row: dict[str, object] = {"start": k, "variant": variant}
        try:
            with launch(config, PRESETS["p2p_on"], pair, {}, log):
                row["ready_s"] = round(time.monotonic() - t0, 1)
        except Exception as exc:  # a variant that cannot start is a result, not the end of the run
            row["error"] = str(exc).splitlines()[0][:300]
        text = log.read_text(errors="replace") if log.is_file() else ""
        got = start_phases(text)
        row["phases"] = None if got is None else got.as_json()
        row["forced_spawn"] = FORCED_SPAWN in text
        rows.append(row)
        print(f"start {k} ({variant}): " + (f"ready in {row['ready_s']} s" if "ready_s" in row else
                                            f"FAILED: {row['error']}")
              + (f"; {got.text()}" if got is not None else "")
              + ("; vLLM forced spawn" if row["forced_spawn"] else ""), flush=True)
    (a.out / "start_phases.json").write_text(json.dumps(rows, indent=1) + "\n")
    medians: dict[str, tuple[float, float | None]] = {}
    for v in variants:
        ready = [r["ready_s"] for r in rows if r["variant"] == v and isinstance(r.get("ready_s"), float)]
        procs = [_processes(r) for r in rows if r["variant"] == v and isinstance(r.get("ready_s"), float)]
        if not ready:
            print(f"START_PHASES {v}: no start came up")
            continue
        known = [x for x in procs if x is not None]
        medians[v] = (statistics.median(float(x) for x in ready if isinstance(x, float)),
                      statistics.median(known) if known else None)
        print(f"START_PHASES {v}: ready median {medians[v][0]:.1f} s, processes median "
              + (f"{medians[v][1]:.0f} s" if medians[v][1] is not None else "unknown")
              + f" ({len(ready)} of {a.rounds} starts up)")
    for v in medians:
        if v != "default" and "default" in medians:
            print(f"START_PHASES {v} saves {medians['default'][0] - medians[v][0]:.1f} s a start")
    return 0


def _processes(row: dict[str, object]) -> float | None:
    phases = row.get("phases")
    value = phases.get("processes_s") if isinstance(phases, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


if __name__ == "__main__":
    sys.exit(main())
