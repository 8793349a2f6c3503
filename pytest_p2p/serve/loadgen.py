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
import json
import random
import time
from collections.abc import Sequence
from typing import Any

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


async def run_load_async(base_url: str, api_key: str, model: str, *, concurrency: int, num_prompts: int,
                         input_len: int, output_len: int, seed: int = 0, warmup: int = 1,
                         request_timeout_s: float = 300.0, endpoint: str = "completions",
                         continuous_usage: bool = True, percentiles: Sequence[float] = PERCENTILES,
                         keep_chunk_times: bool = False,
                         records_out: list[RequestRecord] | None = None) -> dict[str, Any]:
    """Run ``warmup`` unmeasured requests, then ``num_prompts`` at closed-loop ``concurrency``."""
    import httpx
    import openai

    if concurrency < 1 or num_prompts < 1 or input_len < 1 or output_len < 1 or warmup < 0:
        raise ValueError("concurrency, num_prompts, input_len, output_len must be >= 1 and warmup >= 0; got "
                         f"{concurrency}, {num_prompts}, {input_len}, {output_len}, {warmup}")
    if endpoint not in ("completions", "chat"):
        raise ValueError(f"endpoint must be 'completions' or 'chat', got {endpoint!r}")
    chat = endpoint == "chat"
    prompts = make_prompts(warmup + num_prompts, input_len, seed)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    timeout = httpx.Timeout(request_timeout_s, connect=min(10.0, request_timeout_s))
    http = httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)
    client = openai.AsyncOpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key, max_retries=0,
                                timeout=timeout, http_client=http)
    common = dict(chat=chat, model=model, output_len=output_len, timeout_s=request_timeout_s,
                  continuous_usage=continuous_usage)
    async with http:
        warm: list[RequestRecord] = []
        if warmup:
            sem = asyncio.Semaphore(concurrency)

            async def warm_one(i: int) -> RequestRecord:
                async with sem:
                    return await _request(client, prompt=prompts[i], rid=f"warmup-{i}", keep_chunk_times=False,
                                          **common)  # type: ignore[arg-type]

            warm = list(await asyncio.gather(*(warm_one(i) for i in range(warmup))))
        records: list[RequestRecord | None] = [None] * num_prompts
        next_index = 0

        async def worker() -> None:
            nonlocal next_index
            while next_index < num_prompts:
                i = next_index
                next_index += 1
                records[i] = await _request(client, prompt=prompts[warmup + i], rid=f"req-{i}",
                                            keep_chunk_times=keep_chunk_times, **common)  # type: ignore[arg-type]

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, num_prompts))))
        duration = time.perf_counter() - t0
    done = [r for r in records if r is not None]
    if records_out is not None:
        records_out.extend(done)
    result = compute_metrics(done, duration, percentiles)
    errors: dict[str, int] = {}
    for r in done:
        if not r.success:
            errors[r.error] = errors.get(r.error, 0) + 1
    result.update({
        "endpoint": endpoint, "max_concurrency": concurrency, "num_prompts": num_prompts,
        "input_len": input_len, "output_len": output_len, "seed": seed, "warmup": warmup,
        "warmup_failed": sum(1 for r in warm if not r.success),
        "errors": [{"error": e, "count": n} for e, n in sorted(errors.items(), key=lambda kv: -kv[1])][:10],
        "input_lens": [r.prompt_len for r in done], "output_lens": [r.output_tokens for r in done],
        "ttfts": [r.ttft for r in done],
    })
    return result


def run_load(base_url: str, api_key: str, model: str, *, concurrency: int, num_prompts: int, input_len: int,
             output_len: int, seed: int = 0, warmup: int = 1, request_timeout_s: float = 300.0,
             endpoint: str = "completions", **kwargs: Any) -> dict[str, Any]:
    """Synchronous wrapper around :func:`run_load_async` (runs its own event loop, in a thread if needed)."""
    coro_kwargs = dict(concurrency=concurrency, num_prompts=num_prompts, input_len=input_len,
                       output_len=output_len, seed=seed, warmup=warmup, request_timeout_s=request_timeout_s,
                       endpoint=endpoint, **kwargs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_load_async(base_url, api_key, model, **coro_kwargs))
    # called from inside an event loop (e.g. an async test): run on a private loop in a thread
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run_load_async(base_url, api_key, model, **coro_kwargs)).result()
