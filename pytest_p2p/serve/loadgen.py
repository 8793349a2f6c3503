"""OpenAI-API load generator with ``vllm bench serve``'s workload and measurement rules.

Why not shell out to ``vllm bench serve``: the plugin must measure the stand-in on a CPU
box, count every failure explicitly and never retry silently, and keep up with a server
that streams tens of thousands of tokens per second. So this module reimplements the
*measurement* (same workload in tokens, same timestamps, same metric definitions, same
JSON keys -- docs/metrics.md) with:

* the workload of :mod:`.workload`: prompts of exactly ``input_len`` tokens of the
  served model's tokenizer, ``ignore_eos`` and ``max_tokens = output_len``, seeded so
  every arm gets byte-identical work; closed loop (``request_rate=inf``) or seeded
  Poisson/gamma arrivals capped at ``concurrency``;
* a transport that keeps up (:mod:`.transport`; ``raw`` by default, the ``openai`` SDK
  over httpx or aiohttp on request) with ``max_retries=0`` semantics: a retried request
  would hide a server failure and skew TTFT;
* client processes sharded automatically from the concurrency and the cores
  (:func:`plan_processes`), each pinned to its own core, all released by one barrier;
* the client's own health recorded per run -- CPU use of each client process and the
  lateness of its event loop -- and ``client_saturated`` set when it could not keep up.

A request is *successful* only if its stream delivered a content chunk, a well-formed
usage report and the final ``[DONE]``; anything else is a counted failure with its
reason, never an exception out of :func:`run_load`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..errors import ServerError
from .metrics import PERCENTILES, RequestRecord, goodput, peaks, percentile, summarize
from .result import ClientStats, LoadResult
from .transport import TRANSPORTS, StreamError, StreamParser, Transport, make_transport, require_client
from .workload import arrival_offsets, discover_tokenizer, load_tokenizer, token_prompts

#: streams one client process serves before another is started (docs/performance.md)
STREAMS_PER_PROCESS = 16


@dataclass(frozen=True)
class LoadSpec:
    """One run's workload and client settings (``vllm bench serve`` names where it has one)."""

    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    seed: int = 0
    warmup: int = 1
    request_timeout_s: float = 300.0
    endpoint: str = "completions"
    request_rate: float = math.inf
    burstiness: float = 1.0
    tokenizer: str | None = None  # None: the model directory the server reports, or the stand-in's words
    transport: str = "raw"
    client_processes: int = 0  # 0: plan_processes(concurrency)
    goodput_slos_ms: Mapping[str, float] = field(default_factory=dict)
    continuous_usage: bool = False
    keep_chunk_times: bool = False
    percentiles: tuple[float, ...] = PERCENTILES
    pin: bool = True

    def check(self) -> None:
        """``ValueError`` naming the first out-of-range field."""
        ints = {"concurrency": (self.concurrency, 1, 100_000), "num_prompts": (self.num_prompts, 1, 10_000_000),
                "input_len": (self.input_len, 1, 10_000_000), "output_len": (self.output_len, 1, 10_000_000),
                "warmup": (self.warmup, 0, 1_000_000), "client_processes": (self.client_processes, 0, 4096)}
        for name, (value, lo, hi) in ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{name} must be an integer {lo}..{hi}; got {value!r}")
        if self.endpoint not in ("completions", "chat"):
            raise ValueError(f"endpoint must be 'completions' or 'chat', got {self.endpoint!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if not 0 < self.request_timeout_s <= 7 * 86400:
            raise ValueError(f"request_timeout_s must be in (0, 604800], got {self.request_timeout_s!r}")
        if not self.request_rate > 0 or not 0 < self.burstiness < 1e6:
            raise ValueError(f"request_rate and burstiness must be > 0, got {self.request_rate}, {self.burstiness}")


def free_cores(window_s: float = 0.05) -> float:
    """Idle cores among ours right now, from two /proc/stat readings (all of them where /proc cannot say)."""
    cpus = sorted(os.sched_getaffinity(0))

    def read() -> dict[int, tuple[int, int]]:
        out = {}
        with open("/proc/stat", encoding="ascii") as fh:
            for line in fh:
                f = line.split()
                if f[0].startswith("cpu") and f[0] != "cpu" and int(f[0][3:]) in cpus:
                    ticks = [int(x) for x in f[1:8]]
                    out[int(f[0][3:])] = (sum(ticks), ticks[3] + ticks[4])  # total, idle + iowait
        return out

    try:
        a = read()
        time.sleep(window_s)
        b = read()
    except (OSError, ValueError, IndexError):
        return float(len(cpus))
    idle = 0.0
    for cpu, (total, free) in b.items():
        dt = total - a.get(cpu, (total, free))[0]
        idle += (free - a.get(cpu, (total, free))[1]) / dt if dt > 0 else 1.0
    return idle if b else float(len(cpus))


def plan_processes(concurrency: int, cores: float | None = None) -> int:
    """Client processes for ``concurrency`` streams: one per :data:`STREAMS_PER_PROCESS`, at most half the free cores.

    The other half is left to the server (vLLM's API server and engine core are busy
    processes of their own); a 2-core box therefore always runs one in-process loop.
    ``cores`` defaults to the cores idle right now among those this process may use.
    """
    n = free_cores() if cores is None else cores
    return max(1, min(max(1, int(n // 2)), math.ceil(concurrency / STREAMS_PER_PROCESS)))


@dataclass(frozen=True)
class _Job:
    """What one client process runs: its share of the measured requests and its concurrency."""

    base_url: str
    api_key: str
    model: str
    spec: LoadSpec
    prompts: tuple[str, ...]
    offsets: tuple[float, ...]
    warm_ids: tuple[int, ...]
    ids: tuple[int, ...]
    concurrency: int
    cpu: int | None = None


@dataclass
class _Shard:
    warm: list[RequestRecord]
    records: dict[int, RequestRecord]
    t0: float
    t1: float
    stats: ClientStats


def _payload(job: _Job, prompt: str) -> dict[str, object]:
    s = job.spec
    opts: dict[str, object] = {"include_usage": True}
    if s.continuous_usage:
        opts["continuous_usage_stats"] = True
    # the request bench sends: no sampling parameters (the server's defaults), ignore_eos, usage at the end.
    # (Sending temperature 0 made greedy decoding of dummy weights repeat tokens: other server work per token.)
    body: dict[str, object] = {"model": job.model, "stream": True, "stream_options": opts, "ignore_eos": True}
    if s.endpoint == "chat":
        body.update(messages=[{"role": "user", "content": prompt}], max_completion_tokens=s.output_len)
    else:
        body.update(prompt=prompt, max_tokens=s.output_len)
    return body


async def _request(transport: Transport, job: _Job, prompt: str, rid: str, keep_times: bool) -> RequestRecord:
    rec = RequestRecord(prompt_len=job.spec.input_len)
    parser = StreamParser(rec, chat=job.spec.endpoint == "chat", keep_times=keep_times)
    path = "chat/completions" if job.spec.endpoint == "chat" else "completions"
    timeout = job.spec.request_timeout_s
    rec.start_time = time.perf_counter()
    try:
        await asyncio.wait_for(transport.stream(path, _payload(job, prompt), rid, parser.feed), timeout)
        parser.finish()
        rec.success = True
    except (asyncio.TimeoutError, TimeoutError):
        rec.error = f"timeout: no complete response within {timeout:g} s"
    except StreamError as exc:
        rec.error = str(exc)
    except (ConnectionError, OSError) as exc:
        rec.error = f"connection error: {type(exc).__name__}: {str(exc)[:200]}"
    except Exception as exc:  # noqa: BLE001 - every failure is counted with its reason, none escapes
        rec.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    rec.latency = (parser.last or rec.start_time) - rec.start_time
    rec.chunk_times = parser.times if keep_times else None
    return rec


async def _lag_probe(samples: list[float], stop: asyncio.Event) -> None:
    """How long a callback made ready now waits for the loop: the bound on a chunk timestamp's lateness."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        await asyncio.sleep(0.005)
        fut: asyncio.Future[None] = loop.create_future()
        t = time.perf_counter()
        loop.call_soon(fut.set_result, None)
        await fut
        samples.append(time.perf_counter() - t)


async def _drive(job: _Job, gate: Callable[[], None] | None = None) -> _Shard:
    """Warm up, pass the ``gate`` (the other client processes), then run ``job.ids``."""
    s = job.spec
    transport = make_transport(s.transport, job.base_url, job.api_key, connections=job.concurrency + 4,
                               timeout_s=s.request_timeout_s)
    try:
        sem = asyncio.Semaphore(job.concurrency)

        async def warm_one(i: int) -> RequestRecord:
            async with sem:
                return await _request(transport, job, job.prompts[i], f"warmup-{i}", False)

        warm = list(await asyncio.gather(*(warm_one(i) for i in job.warm_ids)))
        if gate is not None:
            gate()
        records: dict[int, RequestRecord] = {}
        base = s.warmup

        async def one(i: int) -> None:
            records[i] = await _request(transport, job, job.prompts[base + i], f"req-{i}", s.keep_chunk_times)

        lags: list[float] = []
        stop = asyncio.Event()
        probe = asyncio.ensure_future(_lag_probe(lags, stop))
        cpu0, t0 = time.process_time(), time.perf_counter()
        if math.isinf(s.request_rate):
            queue = list(reversed(job.ids))

            async def worker() -> None:
                while queue:
                    await one(queue.pop())

            await asyncio.gather(*(worker() for _ in range(min(job.concurrency, len(job.ids)))))
        else:
            async def gated(i: int) -> None:
                async with sem:
                    await one(i)

            tasks = []
            for i in job.ids:
                delay = t0 + job.offsets[i] - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(gated(i)))
            await asyncio.gather(*tasks)
        t1, cpu1 = time.perf_counter(), time.process_time()
        stop.set()
        await probe
    finally:
        await transport.close()
    stats = ClientStats(cpu_s=cpu1 - cpu0, wall_s=t1 - t0, lag_p99_ms=percentile(lags, 99.0) * 1e3,
                        requests=len(job.ids))
    return _Shard(warm, records, t0, t1, stats)


def _shard_main(conn: object, barrier: object, job: _Job) -> None:
    """One client process of a sharded run: pinned, its own event loop and connections."""
    import multiprocessing.connection
    import threading

    assert isinstance(conn, multiprocessing.connection.Connection)
    from ..children import set_parent_death_signal

    set_parent_death_signal()  # the starting thread waits for every shard: safe (children.py says why)
    try:
        if job.cpu is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, {job.cpu})
        wait = barrier.wait  # type: ignore[attr-defined]
        out = asyncio.run(_drive(job, gate=lambda: wait(job.spec.request_timeout_s + 60)))
        conn.send(("ok", out))
    except (Exception, threading.BrokenBarrierError) as exc:  # noqa: BLE001 - reported to the parent
        with contextlib.suppress(Exception):
            barrier.abort()  # type: ignore[attr-defined]
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _run_sharded(jobs: Sequence[_Job]) -> list[_Shard]:
    """Every job in its own spawned process; they warm up, meet at one barrier, then measure together."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads or an event loop
    barrier = ctx.Barrier(len(jobs))
    children, pipes = [], []
    for job in jobs:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_shard_main, daemon=True, args=(child, barrier, job))
        proc.start()
        child.close()
        children.append(proc)
        pipes.append(parent)
    shards: list[_Shard] = []
    problems: list[str] = []
    try:
        for pipe in pipes:
            try:
                status, payload = pipe.recv()
            except EOFError:
                status, payload = "error", "client process died"
            if status == "ok":
                shards.append(payload)
            else:
                problems.append(str(payload))
    finally:
        for proc in children:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(1)
    if problems:
        raise ServerError(f"load generator against {jobs[0].base_url}: client process failed: "
                          f"{'; '.join(problems)}")
    return shards


def generate_load(base_url: str, api_key: str, model: str, spec: LoadSpec,
                  records_out: list[RequestRecord] | None = None) -> LoadResult:
    """Run ``spec.warmup`` unmeasured requests, then ``spec.num_prompts`` measured ones; the typed result."""
    if not isinstance(base_url, str):
        raise ServerError(f"load generator: base_url must be a string like http://127.0.0.1:8000, got "
                          f"{base_url!r}")
    spec.check()
    if spec.transport != "raw":
        require_client()
    tokenizer_id = spec.tokenizer or discover_tokenizer(base_url, api_key, model)
    tok = load_tokenizer(tokenizer_id)
    prompts = tuple(token_prompts(tok, spec.warmup + spec.num_prompts, spec.input_len, spec.seed))
    offsets = tuple(arrival_offsets(spec.num_prompts, spec.request_rate, spec.burstiness, spec.seed))
    auto = spec.client_processes == 0 and spec.concurrency > STREAMS_PER_PROCESS
    n = min(spec.client_processes or (plan_processes(spec.concurrency) if auto else 1), spec.concurrency,
            spec.num_prompts)
    cores = sorted(os.sched_getaffinity(0))
    jobs = []
    for w in range(n):
        share = spec.concurrency // n + (1 if w < spec.concurrency % n else 0)
        cpu = cores[-1 - w % len(cores)] if spec.pin and n > 1 and len(cores) > n else None
        jobs.append(_Job(base_url, api_key, model, spec, prompts, offsets, tuple(range(w, spec.warmup, n)),
                         tuple(range(w, spec.num_prompts, n)), share, cpu))
    shards = _run_sharded(jobs) if n > 1 else [_run_coroutine(jobs[0])]
    warm = [r for sh in shards for r in sh.warm]
    recs: dict[int, RequestRecord] = {}
    for sh in shards:
        recs.update(sh.records)
    done = [recs[i] for i in range(spec.num_prompts)]
    if records_out is not None:
        records_out.extend(done)
    duration = max(sh.t1 for sh in shards) - min(sh.t0 for sh in shards)
    return _result(spec, model, tokenizer_id, warm, done, max(duration, 1e-9), [sh.stats for sh in shards])


def _run_coroutine(job: _Job) -> _Shard:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_drive(job))
    # called from inside an event loop (e.g. an async test): run on a private loop in a thread
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _drive(job)).result()


def _result(spec: LoadSpec, model: str, tokenizer_id: str, warm: Sequence[RequestRecord],
            done: Sequence[RequestRecord], duration: float, clients: list[ClientStats]) -> LoadResult:
    ok = [r for r in done if r.success]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    stats: dict[str, float] = {}
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    for name, values in (("ttft", [r.ttft for r in ok]), ("tpot", tpots),
                         ("itl", [g for r in ok for g in r.itl]), ("e2el", [r.latency for r in ok])):
        stats.update(summarize(name, values, spec.percentiles))
    peak_tok, peak_req = peaks(done)
    slos = dict(spec.goodput_slos_ms)
    return LoadResult(
        model_id=model, tokenizer_id=tokenizer_id, endpoint=spec.endpoint, num_prompts=spec.num_prompts,
        input_len=spec.input_len, output_len=spec.output_len, seed=spec.seed, warmup=spec.warmup,
        max_concurrency=spec.concurrency, request_rate=spec.request_rate, burstiness=spec.burstiness,
        transport=spec.transport, duration=duration, completed=len(ok), failed=len(done) - len(ok),
        total_input_tokens=total_in, total_output_tokens=total_out,
        server_input_tokens=sum(r.server_prompt_tokens for r in ok),
        request_throughput=len(ok) / duration, request_goodput=goodput(done, duration, slos) if slos else None,
        output_throughput=total_out / duration, total_token_throughput=(total_in + total_out) / duration,
        max_output_tokens_per_s=peak_tok, max_concurrent_requests=peak_req, latency_stats=stats,
        input_lens=[r.prompt_len for r in done],
        output_lens=[r.output_tokens for r in done], ttfts=[r.ttft for r in done], itls=[list(r.itl) for r in done],
        errors=[r.error for r in done], warmup_failed=sum(1 for r in warm if not r.success),
        goodput_slos_ms=slos, clients=clients)


def run_load(base_url: str, api_key: str, model: str, *, concurrency: int, num_prompts: int, input_len: int,
             output_len: int, records_out: list[RequestRecord] | None = None, **options: object) -> dict[str, object]:
    """Keyword form of :func:`generate_load` returning the plain ``vllm bench serve`` JSON (``to_dict()``).

    ``options`` are :class:`LoadSpec` fields (``seed``, ``warmup``, ``transport``, ...). New
    code should call :func:`generate_load` for the typed :class:`LoadResult`.
    """
    return generate_load(base_url, api_key, model, make_spec(concurrency=concurrency, num_prompts=num_prompts,
                                                             input_len=input_len, output_len=output_len, **options),
                         records_out).to_dict()


def make_spec(**fields: object) -> LoadSpec:
    """A :class:`LoadSpec` from keywords; an unknown keyword is a ``TypeError`` naming it."""
    unknown = set(fields) - set(LoadSpec.__dataclass_fields__)
    if unknown:
        raise TypeError(f"load generator: unknown option(s) {', '.join(sorted(unknown))}")
    base = LoadSpec(concurrency=1, num_prompts=1, input_len=1, output_len=1)
    return replace(base, **fields)  # type: ignore[arg-type]


async def run_load_async(base_url: str, api_key: str, model: str, **kwargs: object) -> dict[str, object]:
    """:func:`run_load` from a coroutine (the run itself happens on its own loop in a worker thread)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, lambda: run_load(base_url, api_key, model, **kwargs))  # type: ignore[arg-type]
