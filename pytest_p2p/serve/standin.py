"""SIMULATED stand-in for ``vllm serve``: an OpenAI-compatible streaming server, stdlib only.

Why it exists: the whole launch -> ready -> load -> teardown path (and every way it can
fail) must be testable on a CPU box and in CI, through *exactly* the code path that
launches vLLM. So this is started like vLLM (``python -m pytest_p2p.serve.standin MODEL
--host H --port P --api-key K --tensor-parallel-size 2 ...``; unknown vLLM flags are
accepted and ignored), speaks the same HTTP API (``/health``, ``/v1/models``,
``/v1/completions``, ``/v1/chat/completions`` with SSE streaming and the usage chunk,
``/metrics``), and prints the NCCL INFO / vLLM lines the attestation parser reads --
for the transport the arm's environment would select (``NCCL_P2P_DISABLE=1`` -> SHM,
``NCCL_CUMEM_ENABLE=0`` -> P2P/IPC, SHM also disabled -> NET/Socket).

Nothing here is measured: latencies are *modelled*. Per-token latency is
``tpot_ms * slowdown * penalty * (1 + batch_coef * (running - 1)) * (1 +/- jitter)``
where ``penalty`` is ``p2p_off_penalty`` (default 1.11, the seed's 8-14 % gap) when the
arm disables P2P. Every run prints a SIMULATED banner and ``/v1/models`` says so.
With ``--lockstep`` the streams share one step clock and get their tokens in bursts, as
from vLLM's batched engine (``standin_server.Steps``: client timestamp benchmarks need it).

Fault modes (``--fault`` or ``PYTEST_P2P_STANDIN_FAULT``), to prove each ends in a clear
error or a counted failed request: ``fail-start[=oom|nccl|model|port]``,
``die-after=N`` (process exits when request N+1 arrives), ``http-500``, ``cut-stream``
(stream ends cleanly but early: no usage, no ``[DONE]``), ``hang`` (never answers,
ignores SIGTERM), ``bad-usage[=many|list]`` (the usage report says ``completion_tokens:
"many"`` or is ``[1, 2]``), ``kill-engine=N`` (request N+1 SIGKILLs the ``--engine-child``
EngineCore; the server then exits as vLLM's does). ``--fault-after N`` lets the first N completion requests succeed
(so the launcher's readiness completion passes and the *load* sees the fault).

Dying with pytest: the launcher arms ``PR_SET_PDEATHSIG`` (SIGTERM), so a SIGKILLed pytest
ends this server through its normal shutdown, which -- like vLLM's -- also stops its
engine core. A ``hang`` server ignores SIGTERM (a wedged vLLM would too); it upgrades its
own death signal to SIGKILL, so that a test's SIGKILLed pytest never leaves one behind.
See :func:`engine_core` for the ``--orphan-child`` simulation.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

from .standin_ray import print_ray_worker_lines
from .standin_server import Model, Server, State, _log

NCCL_VERSION = "2.28.9"
BANNER = "SIMULATED: pytest-p2p stand-in server -- not vLLM; latencies are modelled, not measured"
_ENV = "PYTEST_P2P_STANDIN_"


def transport_for_env(env: dict[str, str] | os._Environ[str]) -> str:
    """The NCCL transport a 2-GPU single-node communicator would pick under this environment."""
    def on(key: str) -> bool:
        return env.get(key, "").strip().lower() in ("1", "true", "yes")

    if on("NCCL_P2P_DISABLE"):
        return "NET/Socket" if on("NCCL_SHM_DISABLE") else "SHM/direct/direct"
    if env.get("NCCL_CUMEM_ENABLE", "").strip() == "0":
        return "P2P/IPC"
    return "P2P/CUMEM"


def print_nccl_lines(ranks: int, transport: str, custom_ar: bool) -> None:
    """NCCL INFO lines in NCCL 2.28.9's format, plus vLLM's, for the attestation parser."""
    host = socket.gethostname().split(".")[0]
    pid = os.getpid()
    out = []
    for r in range(ranks):
        p = f"{host}:{pid + 1 + r}:{pid + 1 + r} [{r}] NCCL INFO"
        out.append(f"{p} NCCL version {NCCL_VERSION}+cuda13.0")
        for key in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE",
                    "NCCL_P2P_LEVEL"):
            if key in os.environ:
                dot = "" if key.endswith("_DISABLE") else "."  # as NCCL 2.28.9 prints them
                out.append(f"{p} {key} set by environment to {os.environ[key]}{dot}")
    out.append(f"(Worker pid={pid + 1}) INFO {time.strftime('%m-%d %H:%M:%S')} [pynccl.py:113] "
               f"vLLM is using nccl=={NCCL_VERSION}")
    if ranks > 1:
        comm_id = f"{(pid * 2654435761) & 0xFFFFFFFFFFFF:012x}"
        for r in range(ranks):
            p = f"{host}:{pid + 1 + r}:{pid + 1 + r} [{r}] NCCL INFO"
            peer = (r + 1) % ranks
            for ch in range(4):
                if transport.startswith("P2P"):
                    out.append(f"{p} Channel {ch:02d}/0 : {r}[{r}] -> {peer}[{peer}] via {transport}")
                elif transport.startswith("NET"):
                    out.append(f"{p} Channel {ch:02d}/0 : {r}[{r}] -> {peer}[{peer}] [send] via NET/Socket/0")
                else:
                    out.append(f"{p} Channel {ch:02d} : {r}[{r}] -> {peer}[{peer}] via {transport}")
            out.append(f"{p} Connected all rings, use ring PXN 0 GDR 1")
            out.append(f"{p} ncclCommInitRankConfig comm 0x{0x5e000000 + 0x10000 * r:x} rank {r} nranks {ranks} "
                       f"cudaDev {r} nvmlDev {r} busId {0x18 + 0x10 * r:x}000 commId 0x{comm_id} - Init COMPLETE")
        backends = ["CUSTOM", "PYNCCL"] if custom_ar and transport.startswith("P2P") else ["PYNCCL"]
        out.append(f"(Worker pid={pid + 1}) INFO {time.strftime('%m-%d %H:%M:%S')} [cuda_communicator.py:245] "
                   f"Using {backends!r} all-reduce backends (in dispatch order) for group 'tp:0' out of "
                   "potential backends: ['NCCL_SYMM_MEM', 'QUICK_REDUCE', 'FLASHINFER', 'CUSTOM', "
                   "'SYMM_MEM', 'PYNCCL'].")
    print("\n".join(out), flush=True)


#: the SIMULATED card's memory (GiB) and what a model takes of it outside the KV cache (weights, activations,
#: CUDA graphs), so that a server's "available KV cache" follows its --gpu-memory-utilization as vLLM's does
SIM_GPU_GIB = 79.19
SIM_NON_KV_GIB = 13.5


def print_kv_cache_lines(ranks: int, utilization: float, kv_bytes: int | None) -> None:
    """vLLM 0.24's KV cache sizing line per rank (``gpu_worker.py`` ``determine_available_memory``).

    Without ``--kv-cache-memory-bytes`` vLLM profiles and prints ``Available KV cache memory: X GiB``
    (the campaign learns the size of parallel starts from it); with it, vLLM skips the profiling and
    says what it reserved. The figure here is SIMULATED (utilization x a modelled 80 GB card minus a
    modelled model), a little lower on each higher rank, as real ranks differ by their NCCL buffers.
    """
    stamp = time.strftime("%m-%d %H:%M:%S")
    pid = os.getpid()
    for r in range(max(1, ranks)):
        who = f"(Worker_TP{r} pid={pid + 1 + r}) INFO {stamp} [gpu_worker.py:508]"
        if kv_bytes is not None:
            print(f"{who} Initial free memory {SIM_GPU_GIB - 0.8:.2f} GiB, reserved {round(kv_bytes / 2**30, 2)} "
                  "GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory "
                  "profiling. (SIMULATED)", flush=True)
        else:
            gib = round(SIM_GPU_GIB * utilization - SIM_NON_KV_GIB - 0.03 * r, 2)
            print(f"{who} Available KV cache memory: {gib} GiB", flush=True)


# ----------------------------------------------------------------------------- command line


def _env_float(key: str, default: float) -> float:
    raw = os.environ.get(_ENV + key)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        sys.exit(f"stand-in: {_ENV}{key}={raw!r} is not a number")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_p2p.serve.standin",
                                description="SIMULATED OpenAI-compatible server (stand-in for vllm serve).")
    p.add_argument("words", nargs="*", help="[serve] MODEL, like vllm")
    p.add_argument("--model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"))
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--distributed-executor-backend", default=None, help="ray: print every Ray worker's NCCL "
                   "lines across the hosts of $PYTEST_P2P_STANDIN_RAY_HOSTS (serve/standin_ray.py)")
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--ttft-ms", type=float, default=_env_float("TTFT_MS", 20.0))
    p.add_argument("--tpot-ms", type=float, default=_env_float("TPOT_MS", 10.0))
    p.add_argument("--jitter", type=float, default=_env_float("JITTER", 0.05))
    p.add_argument("--slowdown", type=float, default=_env_float("SLOWDOWN", 1.0))
    p.add_argument("--p2p-off-penalty", type=float, default=_env_float("P2P_OFF_PENALTY", 1.11))
    p.add_argument("--batch-coef", type=float, default=_env_float("BATCH_COEF", 0.01))
    p.add_argument("--startup-delay-s", type=float, default=_env_float("STARTUP_DELAY_S", 0.0))
    p.add_argument("--fault", default=os.environ.get(_ENV + "FAULT", ""))
    p.add_argument("--fault-after", type=int, default=int(_env_float("FAULT_AFTER", 0)))
    p.add_argument("--lockstep", action="store_true", default=os.environ.get(_ENV + "LOCKSTEP", "") == "1",
                   help="every running stream gets its next token at one shared step, in one burst (as vLLM)")
    p.add_argument("--timestamp-log", default=os.environ.get(_ENV + "TIMESTAMP_LOG") or None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="accepted, as vLLM's (no GPU here)")
    p.add_argument("--kv-cache-memory-bytes", type=int, default=None,
                   help="as vLLM's: the KV cache size, so no 'Available KV cache memory' line is printed")
    p.add_argument("--enable-sleep-mode", action="store_true", help="serve /sleep, /wake_up, /is_sleeping")
    p.add_argument("--start-spread", type=float, default=_env_float("START_SPREAD", 0.0),
                   help="SD (log scale) of a speed factor drawn once per start: vLLM's start-to-start variance")
    p.add_argument("--orphan-child", action="store_true",
                   default=os.environ.get(_ENV + "ORPHAN_CHILD", "") == "1",
                   help="spawn a child in its own session (like vLLM's orphaned EngineCore, issue #55510)")
    p.add_argument("--engine-child", action="store_true",
                   default=os.environ.get(_ENV + "ENGINE_CHILD", "") == "1",
                   help="run an EngineCore child in our session; if it dies, this server logs it and exits 1 "
                        "(as vLLM's API server does on EngineDeadError)")
    return p


_FAULTS = ("fail-start", "die-after", "http-500", "cut-stream", "hang", "bad-usage", "kill-engine")


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    words = [w for w in args.words if w != "serve"]
    name = (args.served_model_name or [None])[0] or args.model or (words[0] if words else "standin-model")
    fault, _, fault_arg = args.fault.partition("=")
    if fault and fault not in _FAULTS:
        print(f"stand-in: unknown --fault {args.fault!r}; known: {', '.join(_FAULTS)}", file=sys.stderr)
        return 2
    transport = transport_for_env(os.environ)
    # a start draws its own speed (random per process, as a real server start is): windows of one start share it
    start_factor = math.exp(random.SystemRandom().gauss(0.0, args.start_spread)) if args.start_spread > 0 else 1.0
    model = Model(name=name, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms, jitter=args.jitter,
                  slowdown=args.slowdown * start_factor, sleep_mode=args.enable_sleep_mode,
                  p2p_off_penalty=args.p2p_off_penalty, batch_coef=args.batch_coef,
                  transport=transport, fault=fault, fault_arg=fault_arg, fault_after=args.fault_after,
                  max_model_len=args.max_model_len, timestamp_log=args.timestamp_log,
                  lockstep=args.lockstep)
    print(BANNER, flush=True)
    _log("APIServer", f"SIMULATED stand-in for vllm serve; model {name}; non-default args: "
                      f"{json.dumps({'host': args.host, 'port': args.port, 'tp': args.tensor_parallel_size})}; "
                      f"ignored vLLM args: {unknown}")
    _log("APIServer", f"latency model: ttft={model.ttft_ms}ms tpot={model.tpot_ms}ms jitter={model.jitter} "
                      f"slowdown={model.slowdown:.4g} transport={transport} factor={model.factor:.3f}"
                      f"{' lockstep' if model.lockstep else ''}")
    if fault == "fail-start":
        causes = {
            "oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "nccl": "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "model": f"OSError: {name} does not appear to have a file named config.json",
            "port": f"OSError: [Errno 98] error while attempting to bind on address ('{args.host}', "
                    f"{args.port}): address already in use",
        }
        _log("EngineCore", f"SIMULATED fault fail-start: {causes.get(fault_arg or 'oom', causes['oom'])}", "ERROR")
        return 1
    # a vLLM start is Python first (API server, engine core), then GPU work after the engine core's first line:
    # half the delay on each side of that line, so a server held there (serve.hold) has work left after it
    if args.startup_delay_s:
        time.sleep(args.startup_delay_s / 2)
    child = None
    if args.orphan_child:
        from .procs import OWNER_ENV, owner_mark

        root = os.environ.get(OWNER_ENV) or owner_mark(os.getppid())
        child = subprocess.Popen([sys.executable, "-c", "from pytest_p2p.serve.standin import engine_core; "
                                  "engine_core()", root], start_new_session=True, stdin=subprocess.DEVNULL)
        _log("EngineCore", f"SIMULATED engine core pid {child.pid} in its own session (orphans on SIGKILL)")
    engine = None
    if args.engine_child or fault == "kill-engine":
        engine = _start_engine_child()
    # the engine line vLLM prints, with the version honestly reading SIMULATED
    _log("EngineCore", f"Initializing a V1 LLM engine (vSIMULATED) with config: model={name!r}, "
                       f"tensor_parallel_size={max(1, args.tensor_parallel_size)}, "
                       f"disable_custom_all_reduce={bool(args.disable_custom_all_reduce)}")
    if args.startup_delay_s:
        time.sleep(args.startup_delay_s / 2)
    if args.distributed_executor_backend == "ray":
        print_ray_worker_lines(max(1, args.tensor_parallel_size) * max(1, args.pipeline_parallel_size), NCCL_VERSION)
    else:
        print_nccl_lines(max(1, args.tensor_parallel_size), transport, not args.disable_custom_all_reduce)
    print_kv_cache_lines(max(1, args.tensor_parallel_size), args.gpu_memory_utilization, args.kv_cache_memory_bytes)
    for r in range(max(1, args.tensor_parallel_size)):  # vLLM's milestones of a start (serve.start_phases)
        _log(f"Worker_TP{r}", "Model loading took 0.00 GiB and 0.000000 seconds (SIMULATED)")
    state = State(model=model, api_key=args.api_key, engine_pid=None if engine is None else engine[0].pid)
    try:
        asyncio.run(_serve(args.host, args.port, state))
    except OSError as exc:
        _log("APIServer", f"OSError: [Errno {exc.errno}] error while attempting to bind on address "
                          f"('{args.host}', {args.port}): {exc.strerror.lower() if exc.strerror else exc}",
             "ERROR")
        return 1
    finally:  # a clean shutdown stops the engine core, as vLLM's does; SIGKILL skips this and orphans it
        for proc in (child, None if engine is None else engine[0]):
            if proc is not None:
                if engine is not None and proc is engine[0]:
                    engine[1].set()  # our own shutdown: the watcher must not report it as a death
                proc.terminate()
                proc.wait(10)
    return 0


def _start_engine_child() -> tuple[subprocess.Popen[bytes], threading.Event]:
    """A SIMULATED EngineCore in our session (``--engine-child``) and the watcher that ends us when it dies.

    vLLM's API server answers a dead engine core (``kill -9`` of ``VLLM::EngineCore``, a crash) with
    "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client." and exits; this does
    the same, so the campaign's death check and set-aside path run as they would on a real rig.
    """
    from .procs import OWNER_ENV, owner_mark

    root = os.environ.get(OWNER_ENV) or owner_mark(os.getppid())
    proc = subprocess.Popen([sys.executable, "-c", "from pytest_p2p.serve.standin import engine_core; "
                             "engine_core()", root], stdin=subprocess.DEVNULL)
    _log("EngineCore", f"SIMULATED engine core pid {proc.pid} (EngineCore_DP0) in the server's session")
    stopping = threading.Event()

    def watch() -> None:
        code = proc.wait()
        if not stopping.is_set():
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            _log("EngineCore", f"Engine core proc EngineCore_DP0 (pid {proc.pid}) died unexpectedly ({how}), "
                               "shutting down client.", "ERROR")
            os._exit(1)

    threading.Thread(target=watch, name="engine-watch", daemon=True).start()
    return proc, stopping


def engine_core(poll_s: float = 0.5, lifetime_s: float = 3600.0) -> None:
    """The SIMULATED engine core of ``--orphan-child``: lives in its own session, as vLLM's does.

    It stays alive when its API server is SIGKILLed -- vLLM issue #55510, the orphan that
    teardown must find by the env marker -- and is stopped by its API server's clean
    shutdown (SIGTERM, also the one the kernel sends when pytest dies). Unlike vLLM, it
    also exits once the pytest named in ``sys.argv[1]`` (an ``owner_mark``) is gone: a
    test that SIGKILLs the API server and then dies itself must not leak it. A real vLLM
    orphan in that case is killed by ``procs.sweep_orphans`` at the next launch.
    """
    from .procs import owner_alive

    mark = sys.argv[1] if len(sys.argv) > 1 else ""
    end = time.monotonic() + lifetime_s
    while time.monotonic() < end and (not mark or owner_alive(mark)):
        time.sleep(poll_s)


async def _serve(host: str, port: int, state: State) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    if state.model.fault == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a wedged server: only SIGKILL ends it
        from ..children import set_parent_death_signal

        set_parent_death_signal(signal.SIGKILL)  # ... so pytest's death must send SIGKILL (no-op off Linux)
    else:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    if state.model.timestamp_log:
        state.ts_file = open(state.model.timestamp_log, "a", encoding="ascii")  # noqa: SIM115
    handler = Server(state)
    server = await asyncio.start_server(handler.handle, host, port, backlog=1024)
    _log("APIServer", f"Starting vLLM server on http://{host}:{port} (SIMULATED)")
    print(f"INFO:     Started server process [{os.getpid()}]", flush=True)
    print("INFO:     Application startup complete.", flush=True)
    print(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", flush=True)
    async with server:
        await stop.wait()
        server.close()
        handler.close_all()
    _log("APIServer", "[shutdown] SIMULATED stand-in: signal received, shutting down")
    if state.ts_file is not None:
        state.ts_file.close()


if __name__ == "__main__":
    sys.exit(main())
