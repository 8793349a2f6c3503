"""GPU-side faults on a real 2-GPU machine, 3 trials each (issue 30): one line per trial.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        python3 benchmarks/gpu_faults.py [--vllm] [--trials 3]

Why a script and not a pytest: the faults need real GPUs, torch and NCCL (and vLLM with
``--vllm``), and a GPU session runs them in one batch. Each trial prints
``fault, trial, outcome, seconds, orphans`` where *orphans* counts NVML compute processes
on the pair after teardown that were not there before the script started (must be 0).
Results go to ``$OUT/gpu_faults.json`` when ``OUT`` is set.

Faults without vLLM (default, under 4 minutes on 2x H100):

* ``memhog``: a process takes ~90 % of the pair's second GPU; the campaign's VRAM wait must refuse naming its pid.
* ``rank-sigstop``: one all-reduce probe rank is SIGSTOPped after NCCL init; the probe's
  watchdog (``probe.timeout_s``) must kill both ranks and report, within timeout + grace.
* ``nvml-busy``: NVML sampled at 10 Hz while both GPUs run matmuls; every sample read, flags computed.

With ``--vllm`` (vLLM importable, e.g. PYTHONPATH=/tmp/site): ``vllm-oom`` (memory hog, then a
vLLM start: the error names the hog) and ``engine-kill`` (SIGKILL of VLLM::EngineCore under load:
the death is seen, its cause named, nothing left on the GPUs), on a tiny model from
``python -m pytest_p2p.serve.tinymodel DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NO_MULTICAST)  # every process this script starts inherits it
PAIR = tuple(int(x) for x in os.environ.get("GPU_FAULTS_PAIR", "0,1").split(","))  # e.g. 2,3 on a 4-GPU machine
ROOT = Path(__file__).resolve().parents[1]

HOG = """
import sys, time, torch
dev = int(sys.argv[1]); frac = float(sys.argv[2])
free, total = torch.cuda.mem_get_info(dev)
x = torch.empty(int(free * frac), dtype=torch.uint8, device=f"cuda:{dev}")
print("held", x.numel() >> 20, "MiB", flush=True)
time.sleep(600)
"""

BUSY = """
import sys, time, torch
devs = [int(d) for d in sys.argv[1].split(",")]; end = time.time() + float(sys.argv[2])
mats = [torch.randn(8192, 8192, device=f"cuda:{d}") for d in devs]
while time.time() < end:
    for m in mats:
        m @ m
    for d in devs:
        torch.cuda.synchronize(d)
"""


def compute_pids() -> set[int]:
    from pytest_p2p.evidence.nvml import nvml_session

    with nvml_session() as nv:
        return {pid for g in PAIR for pid, _ in (nv.gpu(g).compute_processes() or [])}


BEFORE: set[int] = set()


def orphans() -> int:
    """Compute processes on the pair that were not there when the script started (after a short settle)."""
    deadline = time.monotonic() + 15
    while True:
        left = compute_pids() - BEFORE
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(0.5)


@contextlib.contextmanager
def hog(gpu: int, frac: float = 0.9) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", HOG, str(gpu), str(frac)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("held"):
            raise RuntimeError(f"memory hog did not start: {line!r}")
        yield proc
    finally:
        proc.kill()
        proc.wait(30)


def trial_memhog() -> str:
    from pytest_p2p.campaign.gpu import wait_vram_free
    from pytest_p2p.errors import P2PError

    with hog(PAIR[1]) as h:
        try:
            wait_vram_free(list(PAIR), 4096, 3.0, live=True)
        except P2PError as exc:
            named = f"pid {h.pid}" in str(exc)
            return f"{'OK' if named else 'BAD'} refused{' naming the hog' if named else ''}: {exc}"
    return f"BAD: VRAM wait passed while 90 % of GPU {PAIR[1]} was held"


def trial_rank_sigstop() -> str:
    from pytest_p2p.errors import ProbeError
    from pytest_p2p.probes.allreduce import run_allreduce
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.probes.config import parse_probe

    timeout_s = 20.0
    cfg = parse_probe({"sizes": ["256MiB"], "iters": 50, "warmup": 2, "graph_launches": 200,
                       "timeout_s": timeout_s}, "gpu_faults", "probe")
    out = Path(tempfile.mkdtemp(prefix="p2p-sigstop-"))
    stopped: list[int] = []

    def stop_one_rank() -> None:
        """SIGSTOP rank 1 once NCCL is up (its log says Init COMPLETE), or 5 s after it appeared."""
        deadline, seen = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline and not stopped:
            for pid in _worker_pids():
                if _env_of(pid).get("RANK") != "1":
                    continue
                seen = seen or time.monotonic()
                log = out / "rank1.log"
                up = log.is_file() and "Init COMPLETE" in log.read_text(errors="replace")
                if up or time.monotonic() - seen > 5:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                    return
            time.sleep(0.05)

    t = threading.Thread(target=stop_one_rank, daemon=True)
    t.start()
    t0 = time.monotonic()
    try:
        run_allreduce(PAIR, PRESETS["p2p_on"], cfg, {}, out)
        outcome = "BAD: the probe finished" + ("" if stopped else " before a rank could be stopped")
    except ProbeError as exc:
        took = time.monotonic() - t0
        ok = bool(stopped) and took <= timeout_s + 30
        outcome = f"{'OK' if ok else 'BAD'} watchdog after {took:.0f} s (limit {timeout_s:g} s): {exc}"
    for pid in stopped:  # in case the watchdog missed it: never leave a stopped rank behind
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return outcome


def _worker_pids() -> list[int]:
    """This script's own all-reduce ranks (children of this process): on a 4-GPU machine another job's ranks
    may run beside it (a first run on 4x H100 stopped a rank of a concurrent benchmark on the other pair)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if b"_allreduce_worker" not in (d / "cmdline").read_bytes():
                    continue
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    pids.append(int(d.name))
    return pids


def _env_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(kv.decode(errors="replace").partition("=")[::2] for kv in raw.split(b"\0") if b"=" in kv)


def trial_nvml_busy() -> str:
    from pytest_p2p.campaign.telemetry import NvmlReader, Sampler, assess

    busy = subprocess.Popen([sys.executable, "-c", BUSY, ",".join(map(str, PAIR)), "8"])
    reader = NvmlReader(list(PAIR))
    try:
        time.sleep(2.0)
        sampler = Sampler(reader, 10).start()
        time.sleep(5.0)
        sampler.stop()
    finally:
        reader.close()
        busy.wait(60)
    rows = sampler.rows
    flags = assess(rows, {})
    unread = sum(1 for r in rows if r.get("nvml_error"))
    ok = rows and not sampler.errors and flags.throttled is not None
    return (f"{'OK' if ok else 'BAD'} {len(rows)} samples, {unread} with NVML errors, sampler errors "
            f"{sampler.errors[:2]}, throttled={flags.throttled} {flags.reasons} missing={flags.missing[:2]}")


def _vllm_config(model_dir: Path, env: dict[str, str] | None = None) -> object:
    from pytest_p2p.serve.config import parse_server

    env = {"VLLM_USE_FLASHINFER_SAMPLER": "0", **({"PYTHONPATH": os.environ["PYTHONPATH"]}
                                                  if os.environ.get("PYTHONPATH") else {}), **(env or {})}
    return parse_server({"command": [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"],
                         "model": str(model_dir),
                         # dummy weights: the tiny model directory holds a config and a tokenizer, no weights
                         "args": {"tensor-parallel-size": 2, "max-model-len": 512, "gpu-memory-utilization": 0.5,
                                  "enforce-eager": True, "load-format": "dummy", "attention-backend": "FLASH_ATTN"},
                         "env": env, "startup_timeout_s": 240, "request_timeout_s": 30}, "gpu_faults")


def trial_vllm_oom(model_dir: Path) -> str:
    from pytest_p2p.errors import P2PError
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.serve.server import launch

    with hog(PAIR[1], 0.95) as h, tempfile.TemporaryDirectory() as tmp:  # the pair's own GPU, no other pair's
        try:
            with launch(_vllm_config(model_dir), PRESETS["p2p_on"], PAIR, {}, Path(tmp) / "s.log"):  # type: ignore[arg-type]
                return "BAD: vLLM started beside a 95 % memory hog"
        except P2PError as exc:
            text = str(exc)
            named = f"pid {h.pid}" in text
            return f"{'OK' if named else 'BAD'} {'named the hog' if named else 'hog not named'}: " \
                   f"{text.splitlines()[0][:300]} | {text.splitlines()[-1][:300]}"


def trial_engine_kill(model_dir: Path) -> str:
    from pytest_p2p.errors import P2PError
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.serve.loadgen import run_load
    from pytest_p2p.serve.server import launch

    with tempfile.TemporaryDirectory() as tmp:
        try:
            with launch(_vllm_config(model_dir), PRESETS["p2p_on"], PAIR, {}, Path(tmp) / "s.log") as srv:  # type: ignore[arg-type]
                engine = [p for p in _session_pids(srv.pid) if "EngineCor" in _comm(p)]
                if not engine:
                    return "BAD: no VLLM::EngineCore process found"
                threading.Timer(2.0, os.kill, (engine[0], signal.SIGKILL)).start()
                with contextlib.suppress(Exception):  # the load fails as the engine dies: that is the fault
                    run_load(srv.base_url, srv.api_key, srv.model, concurrency=4, num_prompts=400, input_len=32,
                             output_len=64)
                deadline = time.monotonic() + 60
                while srv.death() is None and time.monotonic() < deadline:
                    time.sleep(0.5)
                dead = srv.death()
                if dead is None:
                    return f"BAD: server still answers 60 s after SIGKILL of EngineCore pid {engine[0]}"
                outcome = f"OK death seen: {dead.message().splitlines()[0][:400]}"
        except P2PError as exc:  # teardown: leftovers or GPU memory not released
            return f"BAD teardown: {str(exc)[:400]}"
    return outcome


def _session_pids(sid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[3]) == sid:
                    out.append(int(d.name))
    return out


def _comm(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", action="store_true", help="also the vLLM faults (needs vLLM importable)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated faults to try (default: all of the above)")
    a = ap.parse_args()
    BEFORE.update(compute_pids())
    trials: list[tuple[str, Callable[[], str]]] = [
        ("memhog", trial_memhog), ("rank-sigstop", trial_rank_sigstop), ("nvml-busy", trial_nvml_busy)]
    if a.vllm:
        model_dir = Path(tempfile.mkdtemp(prefix="p2p-tiny-"))
        subprocess.run([sys.executable, "-m", "pytest_p2p.serve.tinymodel", str(model_dir)], check=True)
        trials += [("vllm-oom", lambda: trial_vllm_oom(model_dir)),
                   ("engine-kill", lambda: trial_engine_kill(model_dir))]
    only = {f for f in a.only.split(",") if f}
    if only - {name for name, _ in trials}:
        ap.error(f"--only: unknown fault(s) {sorted(only - {name for name, _ in trials})}")
    trials = [(name, fn) for name, fn in trials if not only or name in only]
    results = []
    print("fault, trial, outcome, seconds, orphans", flush=True)
    for name, fn in trials:
        for k in range(1, a.trials + 1):
            t0 = time.monotonic()
            try:
                outcome = fn()
            except Exception as exc:  # noqa: BLE001 - a trial that crashes is reported, the next one runs
                outcome = f"BAD crashed: {type(exc).__name__}: {str(exc)[:300]}"
            secs = time.monotonic() - t0
            left = orphans()
            results.append({"fault": name, "trial": k, "outcome": outcome, "seconds": round(secs, 1), "orphans": left})
            print(f"{name}, {k}, {' '.join(outcome.split())}, {secs:.1f}, {left}", flush=True)
    bad = [r for r in results if not str(r["outcome"]).startswith("OK") or r["orphans"]]
    total_orphans = sum(int(r["orphans"]) for r in results)
    print(f"SUMMARY: {len(results) - len(bad)}/{len(results)} trials OK, orphans {total_orphans}")
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "gpu_faults.json").write_text(json.dumps(results, indent=2) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
