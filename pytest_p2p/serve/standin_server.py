"""The SIMULATED stand-in's HTTP side: an OpenAI-compatible streaming server on asyncio streams.

Why hand-written HTTP/1.1 instead of a framework: stdlib only (CI and a CPU box need
nothing installed), and cheap enough per token that the stand-in sustains tens of
thousands of tokens/s on one core, so the load generator's ceiling can be measured
against it (benchmarks/harness_ceiling.py). Latencies are modelled (:class:`Model`);
fault modes answer like a broken vLLM would. ``serve.standin`` is the command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TextIO

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
    lockstep: bool = False  # every stream's next token at one shared step, as a batching engine emits them
    sleep_mode: bool = False  # --enable-sleep-mode: /sleep, /wake_up and /is_sleeping are served

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
    sleeping: bool = False
    success: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0  # prompt tokens looked up in the (SIMULATED) prefix cache, and found: vLLM's counters
    prefix_hits: int = 0
    served_prompts: set[int] = field(default_factory=set)  # hashes of the prompts served (an unbounded cache)
    rng: random.Random = field(default_factory=lambda: random.Random(1234))
    ts_file: TextIO | None = None  # --timestamp-log: 'rid k time [step]' per token (benchmarks read it)
    engine_pid: int | None = None  # --engine-child: the SIMULATED EngineCore process (fault kill-engine)


def _log(source: str, msg: str, level: str = "INFO") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({source} pid={os.getpid()}) {level} {stamp} [standin.py] {msg}", flush=True)


def _response(status: int, reason: str, body: bytes, ctype: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n"
            "\r\n").encode() + body


def _json(status: int, reason: str, obj: object) -> bytes:
    return _response(status, reason, json.dumps(obj).encode())


def _error(status: int, reason: str, message: str) -> bytes:
    return _json(status, reason, {"error": {"message": message, "type": reason, "code": status},
                                  "object": "error", "message": message})


def _usage(prompt: int, completion: int) -> str:
    return f'{{"prompt_tokens":{prompt},"total_tokens":{prompt + completion},"completion_tokens":{completion}}}'


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-encoding frame."""
    return b"%x\r\n%s\r\n" % (len(data), data)


class Steps:
    """``--lockstep``: one step clock for every running stream.

    vLLM's engine decodes its whole batch at once and its API server then writes a token to
    every running stream in one burst, so at C = 64 a client gets 64 chunks within
    microseconds every step. A client that handles them one after another dates the last
    ones late, and only such bursts show it; per-stream timers (the default) spread the
    chunks out and hide it. Each step is ``Server.itl_s()`` long (jitter drawn once per step,
    for all streams); the clock runs only while a stream waits on it.
    """

    def __init__(self, step_s: Callable[[], float]) -> None:
        self.step_s = step_s
        self.waiters = 0
        self.event = asyncio.Event()  # binds to the running loop at first use (Python >= 3.10)
        self.fired = 0  # steps taken so far: the number the timestamp log gives each burst
        self.clock: asyncio.Task[None] | None = None

    async def next(self) -> int:
        """Return at the next step, together with every other stream waiting for it: that step's number."""
        if self.clock is None or self.clock.done():
            self.clock = asyncio.get_running_loop().create_task(self._run())
        event, number = self.event, self.fired + 1  # each event fires once, as the next step
        self.waiters += 1
        try:
            await event.wait()  # a per-waiter future inside: one stream's cancellation leaves the others
        finally:
            self.waiters -= 1
        return number

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + self.step_s()
        while self.waiters:
            await asyncio.sleep(max(0.0, due - loop.time()))
            event, self.event = self.event, asyncio.Event()
            self.fired += 1
            event.set()
            due = max(due + self.step_s(), loop.time())  # a late step is not caught up with a burst of steps


class Server:
    def __init__(self, state: State) -> None:
        self.state = state
        self.writers: set[asyncio.StreamWriter] = set()
        self.steps = Steps(self.itl_s)

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
        if m.sleep_mode and path in ("/sleep", "/wake_up", "/is_sleeping"):
            if path != "/is_sleeping":
                st.sleeping = path == "/sleep"
                _log("APIServer", f"SIMULATED {'sleep' if st.sleeping else 'wake up'}")
            writer.write(_json(200, "OK", {"is_sleeping": st.sleeping}) if path == "/is_sleeping"
                         else _response(200, "OK", b""))
            return 200
        if path.startswith("/v1/") and st.api_key and headers.get("authorization") != f"Bearer {st.api_key}":
            writer.write(_error(401, "Unauthorized", "invalid or missing API key"))
            return 401
        if path == "/v1/models" and method == "GET":
            writer.write(_json(200, "OK", {"object": "list", "data": [{
                "id": m.name, "object": "model", "created": 0, "owned_by": "pytest-p2p-standin (SIMULATED)",
                "root": m.name, "max_model_len": m.max_model_len}]}))
            return 200
        if path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            if st.sleeping:  # what a sleeping vLLM cannot do: serve; the campaign must wake it first
                writer.write(_error(503, "Service Unavailable", "the engine is sleeping (SIMULATED)"))
                return 503
            return await self.complete(path.endswith("chat/completions"), body, headers, writer)
        writer.write(_error(404, "Not Found", f"no route {method} {path}"))
        return 404

    def metrics(self) -> str:
        st, name = self.state, self.state.model.name
        return (f"# pytest-p2p stand-in: SIMULATED metrics\n"
                f'vllm:num_requests_running{{model_name="{name}"}} {st.running}\n'
                f'vllm:request_success_total{{model_name="{name}"}} {st.success}\n'
                f'vllm:prompt_tokens_total{{model_name="{name}"}} {st.prompt_tokens}\n'
                f'vllm:generation_tokens_total{{model_name="{name}"}} {st.generation_tokens}\n'
                f'vllm:prefix_cache_queries_total{{engine="0",model_name="{name}"}} {float(st.prefix_queries)}\n'
                f'vllm:prefix_cache_hits_total{{engine="0",model_name="{name}"}} {float(st.prefix_hits)}\n')

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
        if m.fault == "kill-engine" and st.engine_pid and st.completions_seen > int(m.fault_arg or 0):
            # as ``kill -9`` of VLLM::EngineCore from outside; the request dies with it, the watcher ends us
            _log("APIServer", f"SIMULATED fault kill-engine={m.fault_arg}: SIGKILL to engine core pid "
                              f"{st.engine_pid}", "ERROR")
            os.kill(st.engine_pid, signal.SIGKILL)
            await asyncio.Event().wait()
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
        self.look_up(prompt, n_prompt)  # after validation: vLLM rejects a bad request before its scheduler looks
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

    def look_up(self, prompt: str, n_prompt: int) -> None:
        """vLLM's prefix cache, as counted: a prompt served before is found but for its last token (which is
        always computed); a new one is kept. No eviction: the stand-in's cache never forgets."""
        st = self.state
        st.prefix_queries += n_prompt
        key = hash(prompt)
        if key in st.served_prompts:
            st.prefix_hits += n_prompt - 1
        else:
            st.served_prompts.add(key)

    def itl_s(self) -> float:
        m = self.state.model
        base = m.tpot_ms * m.factor * (1.0 + m.batch_coef * max(0, self.state.running - 1))
        if m.jitter:
            base *= 1.0 + m.jitter * (2.0 * self.state.rng.random() - 1.0)
        return max(0.0, base) / 1000.0

    async def sleep_tokens(self, n: int) -> None:
        m = self.state.model
        await asyncio.sleep(m.ttft_ms * m.factor / 1000.0 + sum(self.itl_s() for _ in range(max(0, n - 1))))

    async def stream(self, chat: bool, rid: str, n_prompt: int, n_out: int, opts: Mapping[str, object],
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
        ts_file = st.ts_file
        sends: list[str] | None = [] if ts_file is not None else None  # "time" or "time step" (--lockstep)
        transport = writer.transport
        for i in range(n_out):
            if cut is not None and i == cut:
                writer.write(b"0\r\n\r\n")  # clean end of the HTTP body, but no usage and no [DONE]
                return
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            step = 0
            if m.lockstep:
                step = await self.steps.next()  # prefill ends at the first step after TTFT; tokens follow step by step
            if transport.is_closing():
                return
            if sends is not None:
                sends.append(f"{time.perf_counter():.9f} {step}" if m.lockstep else f"{time.perf_counter():.9f}")
            writer.write(middle if (middle is not None and 0 < i < n_out - 1) else frame(i))
            if transport.get_write_buffer_size() > 1 << 16:
                await writer.drain()
            if not m.lockstep:
                target += self.itl_s()
        tail = b""
        if include_usage:
            usage = _usage(n_prompt, n_out)
            if m.fault == "bad-usage" and st.completions_seen > m.fault_after:  # a broken server's usage report
                usage = "[1, 2]" if m.fault_arg == "list" else usage.replace(f'"completion_tokens":{n_out}',
                                                                                '"completion_tokens":"many"')
            tail += _chunk((head + ',"choices":[],"usage":' + usage + "}\n\n").encode())
        tail += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        if sends is not None and ts_file is not None:
            # logged before [DONE] goes out: a client that reads the log once its stream ended
            # (benchmarks/harness_ceiling.py, the tests) must find this request's lines there
            ts_file.write("".join(f"{rid} {k} {t}\n" for k, t in enumerate(sends)))
            ts_file.flush()
        writer.write(tail)
        await writer.drain()
