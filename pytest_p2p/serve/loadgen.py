"""Closed-loop OpenAI load generator with ``vllm bench serve``'s measurement rules.

Why not shell out to ``vllm bench serve``: the plugin must measure the stand-in on a
CPU box with only the ``openai`` client installed, count every failure explicitly,
and never retry silently. So this module reimplements the *measurement* (same
timestamps, same metric definitions, same JSON keys; see docs/metrics.md) on top of
``openai.AsyncOpenAI`` with:

* ``max_retries=0`` -- a retried request would hide a server failure and skew TTFT;
* an explicit ``httpx.AsyncClient`` (``trust_env=False`` so a proxy variable cannot
  route 127.0.0.1 traffic elsewhere; connection limits >= concurrency so requests never
  queue inside the client; explicit timeouts);
* fixed input/output lengths (``ignore_eos`` and ``min_tokens``) and seeded prompts, so
  P2P-on and P2P-off arms get byte-identical work;
* streamed responses with ``include_usage`` (and vLLM's ``continuous_usage_stats``):
  output tokens are the server's count, not a re-tokenisation. The raw SSE lines are
  parsed here (``with_streaming_response``) rather than by the SDK's typed stream:
  building a pydantic object per token would make the client the bottleneck well below
  10 000 tokens/s (benchmarks/harness_ceiling.py).

A request is *successful* only if its stream delivered at least one content chunk, a
usage report and the final ``[DONE]``; a stream cut short, an HTTP error, a timeout
or a dropped connection is a counted failure with its reason, never an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Sequence
from typing import Any

from ..errors import ServerError
from .metrics import PERCENTILES, RequestRecord, compute_metrics

# Common English words that are single tokens (with their leading space) in Llama-style
# tokenizers, so that ``input_len`` words are close to ``input_len`` prompt tokens. The
# reported ``total_input_tokens`` still comes from the server's usage, not from this.
_VOCAB = (  # noqa: SIM905 - one readable string, not 130 quoted words
    " the of and to in is that for it as with on was be by at this from are or an have not "
    "but which one all were they there can when more been has would what if will about up out "
    "so them some time these two may other then do first any like now my over such our man "
    "me even most made after also did many before must through back years where much your way "
    "well down should because each just those people how too little state good very make world "
    "still own see men work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came right used take "
    "three").split()


def require_client() -> None:
    """A clear error, not a traceback, when the OpenAI client library is missing."""
    try:
        import openai  # noqa: F401
    except ImportError:
        raise ServerError("the load generator needs the 'openai' package (a dependency of pytest-p2p and of "
                          "vLLM): pip install 'openai>=1.40'") from None


def http_module() -> Any:
    """The httpx module the installed ``openai`` SDK is built on.

    ``openai`` 1.x/2.x use ``httpx``; later releases use a fork (``httpx2``). Limits,
    timeouts and the client passed to the SDK must come from the same module.
    """
    import importlib

    import openai

    for cls in getattr(openai, "DefaultAsyncHttpxClient", type(None)).__mro__[1:]:
        if cls.__name__ == "AsyncClient":
            return importlib.import_module(cls.__module__.split(".")[0])
    import httpx

    return httpx


def make_prompts(n: int, input_len: int, seed: int) -> list[str]:
    """``n`` deterministic prompts of ``input_len`` words; distinct so prefix caching cannot help."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_VOCAB) for _ in range(input_len)) for _ in range(n)]


def _describe(exc: BaseException, timeout_s: float) -> str:
    import openai

    if isinstance(exc, (asyncio.TimeoutError, openai.APITimeoutError)):
        return f"timeout: no complete response within {timeout_s:g} s"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {str(exc.message)[:200]}"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"connection error: {type(cause).__name__}: {str(cause)[:200]}"
    return f"{type(exc).__name__}: {str(exc)[:200]}"


async def _request(client: Any, *, chat: bool, model: str, prompt: str, output_len: int, rid: str,
                   timeout_s: float, continuous_usage: bool, keep_chunk_times: bool) -> RequestRecord:
    rec = RequestRecord(prompt_len=0)
    extra_body: dict[str, Any] = {
        "stream_options": {"include_usage": True, **({"continuous_usage_stats": True} if continuous_usage else {})},
        "ignore_eos": True, "min_tokens": output_len, "temperature": 0.0,
    }
    if chat:
        call = client.chat.completions.with_streaming_response.create
        kwargs: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}],
                                  "max_completion_tokens": output_len}
    else:
        call = client.completions.with_streaming_response.create
        kwargs = {"prompt": prompt, "max_tokens": output_len}
    times: list[float] | None = [] if keep_chunk_times else None
    st = time.perf_counter()
    rec.start_time = st
    last = st
    first = False
    done = False
    usage: dict[str, Any] | None = None

    async def consume() -> None:
        nonlocal last, first, done, usage
        async with call(model=model, stream=True, extra_body=extra_body,
                        extra_headers={"x-request-id": rid}, **kwargs) as resp:
            buf = b""
            # Raw bytes, split into SSE events here: httpx's text and line decoders cost more
            # per token than the JSON parse. All events of one network read share its arrival
            # time, exactly as in vLLM's benchmark client.
            async for raw in resp.iter_bytes():
                now = time.perf_counter()
                buf += raw
                while True:
                    cut = buf.find(b"\n\n")
                    if cut < 0:
                        break
                    event, buf = buf[:cut], buf[cut + 2:]
                    for line in event.split(b"\n"):
                        if not line.startswith(b"data:"):
                            continue  # ": ping" comments, event names
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            done = True
                            continue
                        data = json.loads(payload)
                        if data.get("usage"):
                            usage = data["usage"]
                        if "error" in data and not data.get("choices"):
                            raise RuntimeError(f"error event in stream: {str(data['error'])[:200]}")
                        choices = data.get("choices")
                        if not choices:
                            continue
                        if chat:
                            delta = choices[0].get("delta") or {}
                            if not (delta.get("content") or delta.get("reasoning_content")
                                    or delta.get("reasoning")):
                                continue  # the role preamble carries no token
                        if not first:
                            first = True
                            rec.ttft = now - st
                        else:
                            rec.itl.append(now - last)
                        last = now
                        if times is not None:
                            times.append(now)

    try:
        await asyncio.wait_for(consume(), timeout_s)
    except Exception as exc:  # noqa: BLE001 - every failure is counted with its reason
        rec.error = _describe(exc, timeout_s)
    else:
        if not first:
            rec.error = "stream carried no content chunk (cannot measure TTFT)"
        elif not done:
            rec.error = "stream cut short: ended before data: [DONE]"
        elif usage is None or usage.get("completion_tokens") is None:
            rec.error = "no usage report in stream: server did not count completion tokens"
        else:
            rec.success = True
            rec.output_tokens = int(usage["completion_tokens"])
            rec.prompt_len = int(usage.get("prompt_tokens") or 0)
    rec.latency = last - st
    rec.chunk_times = times
    return rec


def _check_shape(concurrency: int, num_prompts: int, input_len: int, output_len: int, warmup: int,
                 endpoint: str) -> None:
    if concurrency < 1 or num_prompts < 1 or input_len < 1 or output_len < 1 or warmup < 0:
        raise ValueError("concurrency, num_prompts, input_len, output_len must be >= 1 and warmup >= 0; got "
                         f"{concurrency}, {num_prompts}, {input_len}, {output_len}, {warmup}")
    if endpoint not in ("completions", "chat"):
        raise ValueError(f"endpoint must be 'completions' or 'chat', got {endpoint!r}")


async def _drive(base_url: str, api_key: str, model: str, prompts: Sequence[str], warm_ids: Sequence[int],
                 ids: Sequence[int], offset: int, *, concurrency: int, output_len: int, request_timeout_s: float,
                 chat: bool, continuous_usage: bool, keep_chunk_times: bool, gate: Any = None,
                 ) -> tuple[list[RequestRecord], dict[int, RequestRecord], float, float]:
    """Warm up, pass the ``gate`` (other client processes), then run ``ids`` closed-loop at ``concurrency``.

    Measured request ``i`` sends ``prompts[offset + i]`` with request id ``req-<i>``.
    """
    import openai

    httpx = http_module()

    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    timeout = httpx.Timeout(request_timeout_s, connect=min(10.0, request_timeout_s))
    http = httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)
    client = openai.AsyncOpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key, max_retries=0,
                                timeout=timeout, http_client=http)
    common = dict(chat=chat, model=model, output_len=output_len, timeout_s=request_timeout_s,
                  continuous_usage=continuous_usage)
    async with http:
        sem = asyncio.Semaphore(concurrency)

        async def warm_one(i: int) -> RequestRecord:
            async with sem:
                return await _request(client, prompt=prompts[i], rid=f"warmup-{i}", keep_chunk_times=False,
                                      **common)  # type: ignore[arg-type]

        warm = list(await asyncio.gather(*(warm_one(i) for i in warm_ids)))
        if gate is not None:
            gate()
        records: dict[int, RequestRecord] = {}
        queue = list(ids)
        queue.reverse()

        async def worker() -> None:
            while queue:
                i = queue.pop()
                records[i] = await _request(client, prompt=prompts[offset + i], rid=f"req-{i}",
                                            keep_chunk_times=keep_chunk_times, **common)  # type: ignore[arg-type]

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(ids)))))
        t1 = time.perf_counter()
    return warm, records, t0, t1


def _result(warm: Sequence[RequestRecord], done: Sequence[RequestRecord], duration: float,
            percentiles: Sequence[float], **shape: Any) -> dict[str, Any]:
    result = compute_metrics(done, duration, percentiles)
    errors: dict[str, int] = {}
    for r in done:
        if not r.success:
            errors[r.error] = errors.get(r.error, 0) + 1
    result.update(shape)
    result.update({
        "warmup_failed": sum(1 for r in warm if not r.success),
        "errors": [{"error": e, "count": n} for e, n in sorted(errors.items(), key=lambda kv: -kv[1])][:10],
        "input_lens": [r.prompt_len for r in done], "output_lens": [r.output_tokens for r in done],
        "ttfts": [r.ttft for r in done],
    })
    return result


async def run_load_async(base_url: str, api_key: str, model: str, *, concurrency: int, num_prompts: int,
                         input_len: int, output_len: int, seed: int = 0, warmup: int = 1,
                         request_timeout_s: float = 300.0, endpoint: str = "completions",
                         continuous_usage: bool = True, percentiles: Sequence[float] = PERCENTILES,
                         keep_chunk_times: bool = False,
                         records_out: list[RequestRecord] | None = None) -> dict[str, Any]:
    """Run ``warmup`` unmeasured requests, then ``num_prompts`` at closed-loop ``concurrency`` (one event loop)."""
    require_client()
    _check_shape(concurrency, num_prompts, input_len, output_len, warmup, endpoint)
    prompts = make_prompts(warmup + num_prompts, input_len, seed)
    warm, recs, t0, t1 = await _drive(
        base_url, api_key, model, prompts, list(range(warmup)), list(range(num_prompts)), warmup,
        concurrency=concurrency,
        output_len=output_len, request_timeout_s=request_timeout_s, chat=endpoint == "chat",
        continuous_usage=continuous_usage, keep_chunk_times=keep_chunk_times)
    done = [recs[i] for i in range(num_prompts)]
    if records_out is not None:
        records_out.extend(done)
    return _result(warm, done, t1 - t0, percentiles, endpoint=endpoint, max_concurrency=concurrency,
                   num_prompts=num_prompts, input_len=input_len, output_len=output_len, seed=seed, warmup=warmup,
                   client_processes=1)


def _shard_main(conn: Any, barrier: Any, base_url: str, api_key: str, model: str, prompts: list[str],
                warm_ids: list[int], ids: list[int], offset: int, kwargs: dict[str, Any]) -> None:
    """One client process of a sharded run: its own event loop, client and connection pool."""
    try:
        conn.send(("ok", asyncio.run(_drive(base_url, api_key, model, prompts, warm_ids, ids, offset,
                                            gate=lambda: barrier.wait(kwargs["request_timeout_s"] + 60),
                                            **kwargs))))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        with contextlib.suppress(Exception):
            barrier.abort()
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _run_sharded(base_url: str, api_key: str, model: str, *, processes: int, concurrency: int, num_prompts: int,
                 input_len: int, output_len: int, seed: int, warmup: int, request_timeout_s: float,
                 endpoint: str, continuous_usage: bool = True, percentiles: Sequence[float] = PERCENTILES,
                 keep_chunk_times: bool = False, records_out: list[RequestRecord] | None = None) -> dict[str, Any]:
    """The closed loop split over ``processes`` client processes that start measuring together.

    Concurrency and requests are dealt round-robin; every process warms up, then all wait
    at one barrier, so ``duration`` spans the first measured send to the last finish.
    ``perf_counter`` is CLOCK_MONOTONIC on Linux, one clock for all processes.
    """
    import multiprocessing

    _check_shape(concurrency, num_prompts, input_len, output_len, warmup, endpoint)
    processes = max(1, min(processes, concurrency, num_prompts))
    prompts = make_prompts(warmup + num_prompts, input_len, seed)
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads or an event loop
    barrier = ctx.Barrier(processes)
    kwargs = dict(output_len=output_len, request_timeout_s=request_timeout_s, chat=endpoint == "chat",
                  continuous_usage=continuous_usage, keep_chunk_times=keep_chunk_times)
    children, pipes = [], []
    for w in range(processes):
        parent, child = ctx.Pipe(duplex=False)
        share = concurrency // processes + (1 if w < concurrency % processes else 0)
        proc = ctx.Process(target=_shard_main, daemon=True, args=(
            child, barrier, base_url, api_key, model, prompts, list(range(w, warmup, processes)),
            list(range(w, num_prompts, processes)), warmup, {**kwargs, "concurrency": share}))
        proc.start()
        child.close()
        children.append(proc)
        pipes.append(parent)
    warm: list[RequestRecord] = []
    recs: dict[int, RequestRecord] = {}
    starts, ends, problems = [], [], []
    try:
        for pipe in pipes:
            try:
                status, payload = pipe.recv()
            except EOFError:
                status, payload = "error", "client process died"
            if status != "ok":
                problems.append(payload)
                continue
            w_warm, w_recs, t0, t1 = payload
            warm.extend(w_warm)
            recs.update(w_recs)
            starts.append(t0)
            ends.append(t1)
    finally:
        for proc in children:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
    if problems:
        raise ServerError(f"load generator against {base_url}: client process failed: {'; '.join(problems)}")
    done = [recs[i] for i in range(num_prompts)]
    if records_out is not None:
        records_out.extend(done)
    return _result(warm, done, max(ends) - min(starts), percentiles, endpoint=endpoint,
                   max_concurrency=concurrency, num_prompts=num_prompts, input_len=input_len,
                   output_len=output_len, seed=seed, warmup=warmup, client_processes=processes)


def run_load(base_url: str, api_key: str, model: str, *, concurrency: int, num_prompts: int, input_len: int,
             output_len: int, seed: int = 0, warmup: int = 1, request_timeout_s: float = 300.0,
             endpoint: str = "completions", client_processes: int = 1, **kwargs: Any) -> dict[str, Any]:
    """Synchronous entry point: one event loop (in a thread if one is already running), or sharded.

    ``client_processes > 1`` splits the closed loop over that many client processes, for
    token rates beyond one core's ceiling (docs/performance.md).
    """
    require_client()
    coro_kwargs = dict(concurrency=concurrency, num_prompts=num_prompts, input_len=input_len,
                       output_len=output_len, seed=seed, warmup=warmup, request_timeout_s=request_timeout_s,
                       endpoint=endpoint, **kwargs)
    if client_processes > 1:
        return _run_sharded(base_url, api_key, model, processes=client_processes, **coro_kwargs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_load_async(base_url, api_key, model, **coro_kwargs))
    # called from inside an event loop (e.g. an async test): run on a private loop in a thread
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run_load_async(base_url, api_key, model, **coro_kwargs)).result()
