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

Fault modes (``--fault`` or ``PYTEST_P2P_STANDIN_FAULT``), to prove each ends in a clear
error or a counted failed request: ``fail-start[=oom|nccl|model|port]``,
``die-after=N`` (process exits when request N+1 arrives), ``http-500``, ``cut-stream``
(stream ends cleanly but early: no usage, no ``[DONE]``), ``hang`` (never answers,
ignores SIGTERM). ``--fault-after N`` lets the first N completion requests succeed
(so the launcher's readiness completion passes and the *load* sees the fault).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

NCCL_VERSION = "2.28.9"
BANNER = "SIMULATED: pytest-p2p stand-in server -- not vLLM; latencies are modelled, not measured"
_ENV = "PYTEST_P2P_STANDIN_"
_WORDS = (" the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " with", " on")


@dataclass
class Model:
    """The latency model and identity of this stand-in."""

    name: str
    ttft_ms: float = 20.0
    tpot_ms: float = 10.0
    jitter: float = 0.05
    slowdown: float = 1.0
    p2p_off_penalty: float = 1.11
    batch_coef: float = 0.01
    transport: str = "P2P/CUMEM"
    fault: str = ""
    fault_arg: str = ""
    fault_after: int = 0
    max_model_len: int = 4096
    timestamp_log: str | None = None

    @property
    def factor(self) -> float:
        penalty = {"SHM": self.p2p_off_penalty, "NET": self.p2p_off_penalty ** 2}.get(
            self.transport.split("/")[0], 1.0)
        return self.slowdown * penalty


@dataclass
class State:
    model: Model
    api_key: str | None
    running: int = 0
    completions_seen: int = 0
    success: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(1234))
    ts_file: Any = None


def _log(source: str, msg: str, level: str = "INFO") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({source} pid={os.getpid()}) {level} {stamp} [standin.py] {msg}", flush=True)


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


# ----------------------------------------------------------------------------- HTTP


def _response(status: int, reason: str, body: bytes, ctype: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
            "\r\n").encode() + body


def _json(status: int, reason: str, obj: Any) -> bytes:
    return _response(status, reason, json.dumps(obj).encode())


def _error(status: int, reason: str, message: str) -> bytes:
    return _json(status, reason, {"error": {"message": message, "type": reason, "code": status},
                                  "object": "error", "message": message})


def _usage(prompt: int, completion: int) -> str:
    return f'{{"prompt_tokens":{prompt},"total_tokens":{prompt + completion},"completion_tokens":{completion}}}'


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-encoding frame."""
    return b"%x\r\n%s\r\n" % (len(data), data)


class Server:
    def __init__(self, state: State) -> None:
        self.state = state
        self.writers: set[asyncio.StreamWriter] = set()

    def close_all(self) -> None:
        """Drop idle keep-alive connections so shutdown does not wait for clients (Python >= 3.12)."""
        for w in list(self.writers):
            with contextlib.suppress(Exception):
                w.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, _, val = line.partition(":")
                        headers[k.strip().lower()] = val.strip()
                length = int(headers.get("content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                status = await self.route(method, target.split("?")[0], headers, body, writer)
                if status:
                    print(f'INFO:     {peer[0]}:{peer[1]} - "{method} {target} HTTP/1.1" {status}', flush=True)
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self.writers.discard(writer)
            with contextlib.suppress(Exception):  # a peer that went away is not our problem
                writer.close()

    async def route(self, method: str, path: str, headers: dict[str, str], body: bytes,
                    writer: asyncio.StreamWriter) -> int:
        st = self.state
        m = st.model
        if m.fault == "hang" and m.fault_after == 0:
            await asyncio.Event().wait()
        if path == "/health":
            writer.write(_response(200, "OK", b""))
            return 0
        if path == "/metrics":
            writer.write(_response(200, "OK", self.metrics().encode(), "text/plain; version=0.0.4"))
            return 0
        if path.startswith("/v1/") and st.api_key and headers.get("authorization") != f"Bearer {st.api_key}":
            writer.write(_error(401, "Unauthorized", "invalid or missing API key"))
            return 401
        if path == "/v1/models" and method == "GET":
            writer.write(_json(200, "OK", {"object": "list", "data": [{
                "id": m.name, "object": "model", "created": 0, "owned_by": "pytest-p2p-standin (SIMULATED)",
                "root": m.name, "max_model_len": m.max_model_len}]}))
            return 200
        if path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            return await self.complete(path.endswith("chat/completions"), body, headers, writer)
        writer.write(_error(404, "Not Found", f"no route {method} {path}"))
        return 404

    def metrics(self) -> str:
        st, name = self.state, self.state.model.name
        return (f"# pytest-p2p stand-in: SIMULATED metrics\n"
                f'vllm:num_requests_running{{model_name="{name}"}} {st.running}\n'
                f'vllm:request_success_total{{model_name="{name}"}} {st.success}\n'
                f'vllm:prompt_tokens_total{{model_name="{name}"}} {st.prompt_tokens}\n'
                f'vllm:generation_tokens_total{{model_name="{name}"}} {st.generation_tokens}\n')

    async def complete(self, chat: bool, body: bytes, headers: dict[str, str],
                       writer: asyncio.StreamWriter) -> int:
        st, m = self.state, self.state.model
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            writer.write(_error(400, "Bad Request", "body is not JSON"))
            return 400
        if not isinstance(req, dict):  # answered like vLLM, not by dropping the connection
            writer.write(_error(400, "Bad Request", "body is not a JSON object"))
            return 400
        if req.get("model") not in (m.name, None):
            writer.write(_error(404, "Not Found", f"The model `{req.get('model')}` does not exist."))
            return 404
        st.completions_seen += 1
        faulty = st.completions_seen > m.fault_after
        if m.fault == "die-after" and st.completions_seen > int(m.fault_arg or 0):
            _log("APIServer", f"SIMULATED fault die-after={m.fault_arg}: engine core died unexpectedly", "ERROR")
            os._exit(70)
        if faulty and m.fault == "hang":
            await asyncio.Event().wait()
        if faulty and m.fault == "http-500":
            writer.write(_error(500, "Internal Server Error", "SIMULATED fault http-500"))
            return 500
        if chat:
            msgs = req.get("messages") or []
            prompt = " ".join(str(x.get("content", "")) for x in msgs if isinstance(x, dict))
            max_tokens = req.get("max_completion_tokens") or req.get("max_tokens") or 16
        else:
            prompt = req.get("prompt", "")
            prompt = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
            max_tokens = req.get("max_tokens") or 16
        n_prompt = max(1, len(prompt.split()))
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            writer.write(_error(400, "Bad Request", f"max_tokens must be a positive integer, got {max_tokens!r}"))
            return 400
        n_out = max_tokens
        stream_opts = req.get("stream_options") or {}
        rid = headers.get("x-request-id") or f"{st.completions_seen}"
        cut = n_out // 2 if faulty and m.fault == "cut-stream" else None
        st.running += 1
        try:
            if req.get("stream"):
                await self.stream(chat, rid, n_prompt, n_out, stream_opts, writer, cut)
            else:
                await self.sleep_tokens(n_out)
                text = "".join(_WORDS[i % len(_WORDS)] for i in range(n_out))
                choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                           "finish_reason": "length"} if chat else
                          {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"})
                writer.write(_json(200, "OK", {
                    "id": f"cmpl-{rid}", "object": "chat.completion" if chat else "text_completion",
                    "created": int(time.time()), "model": m.name, "choices": [choice],
                    "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                              "total_tokens": n_prompt + n_out}}))
            st.success += 1
            st.prompt_tokens += n_prompt
            st.generation_tokens += n_out
        finally:
            st.running -= 1
        return 200

    def itl_s(self) -> float:
        m = self.state.model
        base = m.tpot_ms * m.factor * (1.0 + m.batch_coef * max(0, self.state.running - 1))
        if m.jitter:
            base *= 1.0 + m.jitter * (2.0 * self.state.rng.random() - 1.0)
        return max(0.0, base) / 1000.0

    async def sleep_tokens(self, n: int) -> None:
        m = self.state.model
        await asyncio.sleep(m.ttft_ms * m.factor / 1000.0 + sum(self.itl_s() for _ in range(max(0, n - 1))))

    async def stream(self, chat: bool, rid: str, n_prompt: int, n_out: int, opts: dict[str, Any],
                     writer: asyncio.StreamWriter, cut: int | None) -> None:
        st, m = self.state, self.state.model
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = (f'data: {{"id":"cmpl-{rid}","object":"{obj}","created":{created},'
                f'"model":{json.dumps(m.name)}')
        word = json.dumps(_WORDS[0])
        if chat:
            body = f'"delta":{{"content":{word}}},"logprobs":null,"finish_reason":%s}}]'
            first_body = f'"delta":{{"role":"assistant","content":{word}}},"logprobs":null,"finish_reason":%s}}]'
        else:
            body = f'"text":{word},"logprobs":null,"finish_reason":%s,"stop_reason":null}}]'
            first_body = body
        continuous = bool(opts.get("continuous_usage_stats"))
        include_usage = bool(opts.get("include_usage")) or continuous

        def frame(i: int) -> bytes:
            fin = '"length"' if i == n_out - 1 else "null"
            text = head + ',"choices":[{"index":0,' + (first_body if i == 0 else body).replace("%s", fin)
            if continuous:
                text += ',"usage":' + _usage(n_prompt, i + 1)
            return _chunk((text + "}\n\n").encode())

        # frames that do not change between tokens are built once: the stand-in must sustain
        # tens of thousands of tokens/s on one core (benchmarks/harness_ceiling.py)
        middle = None if continuous else frame(1)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        target = t0 + m.ttft_ms * m.factor / 1000.0
        sends: list[float] | None = [] if st.ts_file is not None else None
        transport = writer.transport
        for i in range(n_out):
            if cut is not None and i == cut:
                writer.write(b"0\r\n\r\n")  # clean end of the HTTP body, but no usage and no [DONE]
                return
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if transport.is_closing():
                return
            if sends is not None:
                sends.append(time.perf_counter())
            writer.write(middle if (middle is not None and 0 < i < n_out - 1) else frame(i))
            if transport.get_write_buffer_size() > 1 << 16:
                await writer.drain()
            target += self.itl_s()
        tail = b""
        if include_usage:
            tail += _chunk((head + ',"choices":[],"usage":' + _usage(n_prompt, n_out) + "}\n\n").encode())
        tail += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        if sends is not None:
            # logged before [DONE] goes out: a client that reads the log once its stream ended
            # (benchmarks/harness_ceiling.py, the tests) must find this request's lines there
            st.ts_file.write("".join(f"{rid} {k} {t:.9f}\n" for k, t in enumerate(sends)))
            st.ts_file.flush()
        writer.write(tail)
        await writer.drain()


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
    p.add_argument("--timestamp-log", default=os.environ.get(_ENV + "TIMESTAMP_LOG") or None)
    p.add_argument("--orphan-child", action="store_true",
                   default=os.environ.get(_ENV + "ORPHAN_CHILD", "") == "1",
                   help="spawn a child in its own session (like vLLM's orphaned EngineCore, issue #55510)")
    return p


_FAULTS = ("fail-start", "die-after", "http-500", "cut-stream", "hang")


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    words = [w for w in args.words if w != "serve"]
    name = (args.served_model_name or [None])[0] or args.model or (words[0] if words else "standin-model")
    fault, _, fault_arg = args.fault.partition("=")
    if fault and fault not in _FAULTS:
        print(f"stand-in: unknown --fault {args.fault!r}; known: {', '.join(_FAULTS)}", file=sys.stderr)
        return 2
    transport = transport_for_env(os.environ)
    model = Model(name=name, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms, jitter=args.jitter,
                  slowdown=args.slowdown, p2p_off_penalty=args.p2p_off_penalty, batch_coef=args.batch_coef,
                  transport=transport, fault=fault, fault_arg=fault_arg, fault_after=args.fault_after,
                  max_model_len=args.max_model_len, timestamp_log=args.timestamp_log)
    print(BANNER, flush=True)
    _log("APIServer", f"SIMULATED stand-in for vllm serve; model {name}; non-default args: "
                      f"{json.dumps({'host': args.host, 'port': args.port, 'tp': args.tensor_parallel_size})}; "
                      f"ignored vLLM args: {unknown}")
    _log("APIServer", f"latency model: ttft={model.ttft_ms}ms tpot={model.tpot_ms}ms jitter={model.jitter} "
                      f"slowdown={model.slowdown} transport={transport} factor={model.factor:.3f}")
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
    if args.startup_delay_s:
        time.sleep(args.startup_delay_s)
    if args.orphan_child:
        import subprocess

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"],
                                 start_new_session=True, stdin=subprocess.DEVNULL)
        _log("EngineCore", f"SIMULATED engine core pid {child.pid} in its own session (orphans on SIGKILL)")
    # the engine line vLLM prints, with the version honestly reading SIMULATED
    _log("EngineCore", f"Initializing a V1 LLM engine (vSIMULATED) with config: model={name!r}, "
                       f"tensor_parallel_size={max(1, args.tensor_parallel_size)}, "
                       f"disable_custom_all_reduce={bool(args.disable_custom_all_reduce)}")
    print_nccl_lines(max(1, args.tensor_parallel_size), transport, not args.disable_custom_all_reduce)
    try:
        asyncio.run(_serve(args.host, args.port, State(model=model, api_key=args.api_key)))
    except OSError as exc:
        _log("APIServer", f"OSError: [Errno {exc.errno}] error while attempting to bind on address "
                          f"('{args.host}', {args.port}): {exc.strerror.lower() if exc.strerror else exc}",
             "ERROR")
        return 1
    return 0


async def _serve(host: str, port: int, state: State) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    if state.model.fault == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a wedged server: only SIGKILL ends it
    else:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    if state.model.timestamp_log:
        state.ts_file = open(state.model.timestamp_log, "a", encoding="ascii")  # noqa: SIM115
    handler = Server(state)
    server = await asyncio.start_server(handler.handle, host, port, backlog=1024)
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
