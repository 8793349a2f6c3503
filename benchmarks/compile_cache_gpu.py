"""Does a restarted server reuse vLLM's torch.compile cache? (issue 24: cheaper starts)

    python3 benchmarks/compile_cache_gpu.py [--starts 2] [--pair 0,1] [--model-dir DIR]

Why: vLLM hashes every ``VLLM_*`` variable it knows into its compile cache key, ``VLLM_API_KEY``
included. When the plugin gave each start a fresh API key, every start of a resident campaign compiled
again (about 20 s of a 7B start on H100) and left one more cache directory behind
(4x H100, 2026-11-26 evening: 8 server logs, 8 cache directories). The plugin now keeps one key per arm and pair.

This starts the ``p2p_on`` arm's server ``--starts`` times through the plugin's own launcher
(``serve.server.launch``, CUDA graphs and torch.compile on, a tiny Llama with dummy weights), each time
with the same private ``VLLM_CACHE_ROOT``, and prints per start: the seconds to ready, the cache
directory vLLM used, and whether it compiled or loaded. The last line is ``COMPILE_CACHE OK`` when every
start used one directory and every start after the first loaded from it, else ``COMPILE_CACHE FAIL: why``.
Runs in about 2 minutes on 2x H100; every process with the no-multicast variables of the caller.

Across pytest runs (a night's first start): the key now lasts beyond one process (a per-user secret), so a
second process that uses the same ``--cache-root`` and model directory must load at its *first* start::

    python3 benchmarks/compile_cache_gpu.py --starts 1 --cache-root C --model-dir M --out A
    python3 benchmarks/compile_cache_gpu.py --starts 1 --cache-root C --model-dir M --out B --expect-cached
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CACHE_DIR = re.compile(r"Using cache directory: (\S+) for vLLM's torch.compile")
LOADED = re.compile(r"Directly load")
COMPILED = re.compile(r"Compiling a graph for compile range")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--pair", default="0,1")
    ap.add_argument("--model-dir", type=Path)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "compile_cache")
    ap.add_argument("--cache-root", type=Path, help="VLLM_CACHE_ROOT to use (default: a new empty directory)")
    ap.add_argument("--expect-cached", action="store_true",
                    help="the first start must load too (an earlier process made the cache)")
    a = ap.parse_args(argv)
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.serve.config import parse_server
    from pytest_p2p.serve.server import launch

    a.out.mkdir(parents=True, exist_ok=True)
    pair = tuple(int(g) for g in a.pair.split(","))
    model = a.model_dir or Path(tempfile.mkdtemp(prefix="p2p-tiny-"))
    if not (model / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "pytest_p2p.serve.tinymodel", str(model)], check=True)
    cache = a.cache_root or Path(tempfile.mkdtemp(prefix="vllm-cache-"))
    cache.mkdir(parents=True, exist_ok=True)
    env = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_CACHE_ROOT": str(cache), "HF_HUB_OFFLINE": "1",
           **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {})}
    config = parse_server({"command": [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"],
                           "model": str(model), "env": env, "startup_timeout_s": 300,
                           "args": {"tensor-parallel-size": 2, "max-model-len": 512, "gpu-memory-utilization": 0.4,
                                    "load-format": "dummy", "attention-backend": "FLASH_ATTN"}},
                          "compile_cache_gpu")
    rows = []
    for k in range(1, a.starts + 1):
        log = a.out / f"start{k}.log"
        t0 = time.monotonic()
        with launch(config, PRESETS["p2p_on"], pair, {}, log):  # type: ignore[arg-type]
            ready = time.monotonic() - t0
        text = log.read_text(errors="replace")
        dirs = sorted(set(CACHE_DIR.findall(text)))
        rows.append({"start": k, "ready_s": round(ready, 1), "cache_dirs": dirs,
                     "loaded": bool(LOADED.search(text)), "compiled": bool(COMPILED.search(text))})
        print(f"start {k}: ready in {ready:.1f} s; cache {dirs}; "
              f"{'loaded from the cache' if rows[-1]['loaded'] else ''}"
              f"{' compiled' if rows[-1]['compiled'] else ''}", flush=True)
    (a.out / "compile_cache.json").write_text(json.dumps(rows, indent=1) + "\n")
    found = problems(rows, expect_cached=a.expect_cached)
    print("COMPILE_CACHE OK" if not found else f"COMPILE_CACHE FAIL: {'; '.join(found)}")
    return 0 if not found else 1


def problems(rows: list[dict[str, object]], *, expect_cached: bool = False) -> list[str]:
    """What is wrong with these starts: more than one cache key, or a start that compiled where it should have
    loaded (every start after the first; the first too with ``expect_cached``)."""
    hashes = {Path(str(d)).parts[-3] for r in rows for d in r["cache_dirs"]  # type: ignore[attr-defined]
              if len(Path(str(d)).parts) >= 3}
    out = []
    if len(hashes) != 1:
        out.append(f"{len(hashes)} cache keys over {len(rows)} starts: {sorted(hashes)}")
    must_load = rows if expect_cached else rows[1:]
    for r in must_load:
        if r["compiled"] or not r["loaded"]:
            out.append(f"start {r['start']} compiled again" if r is not rows[0] else
                       "start 1 compiled: an earlier process's cache was not found (another API key, cache root "
                       "or model directory)")
    return out


if __name__ == "__main__":
    sys.exit(main())
