"""OpenAI-API load generator with ``vllm bench serve``'s workload and measurement rules.

Why not shell out to ``vllm bench serve``: the plugin must measure the stand-in on a CPU
box, count every failure explicitly and never retry silently, and keep up with a server
that streams tens of thousands of tokens per second. So this module reimplements the
*measurement* (same workload in tokens, same timestamps, same metric definitions, same
JSON keys -- docs/metrics.md) with:

* the workload of :mod:`.workload`: prompts of exactly ``input_len`` tokens of the
  served model's tokenizer, ``ignore_eos`` and ``max_tokens = output_len`` (or each request's own
  lengths within ``range_ratio``, bench's ``--random-range-ratio``), seeded so
  every arm gets byte-identical work; closed loop (``request_rate=inf``) or seeded
  Poisson/gamma arrivals capped at ``concurrency``;
* a transport that keeps up (:mod:`.transport`; ``raw`` by default, the ``openai`` SDK
  over httpx or aiohttp on request) with ``max_retries=0`` semantics: a retried request
  would hide a server failure and skew TTFT;
* client processes chosen by measurement (:class:`~.loadclients.ClientPlanner`): one, as
  bench, until a run's event loop is late, then twice as many up to half the idle cores,
  each pinned to a physical core of its own
  (:func:`~.cores.client_cpus`: never two on sibling threads while a core is free), all released by one barrier
  (:mod:`.loadclients` runs them);
* the client's own health recorded per run -- CPU use of each client process and the
  lateness of its event loop -- and ``client_saturated`` set when it could not keep up.

A request is *successful* only if its stream delivered a content chunk, a well-formed
usage report and the final ``[DONE]``; anything else is a counted failure with its
reason, never an exception out of :func:`run_load`.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

from ..errors import ServerError
from .cores import client_cpus
from .loadclients import (
    PLANNER,
    ClientPlanner,
    CountPlanner,
    Job,
    current_pool,
    free_cores,
    process_cap,
    run_coroutine,
    run_sharded,
)
from .loadspec import LoadSpec
from .metrics import RequestRecord, goodput, peaks, steady_state, summarize
from .result import ClientStats, LoadResult
from .transport import require_client
from .workload import Tokenizer, arrival_offsets, discover_tokenizer, load_tokenizer, request_lengths, token_prompts

__all__ = ["PLANNER", "ClientPlanner", "free_cores", "generate_load", "make_prompts", "make_spec", "prepare",
           "process_cap", "run_load", "run_load_async"]


def generate_load(base_url: str, api_key: str, model: str, spec: LoadSpec,
                  records_out: list[RequestRecord] | None = None, planner: CountPlanner | None = None) -> LoadResult:
    """Run ``spec.warmup`` unmeasured requests, then ``spec.num_prompts`` measured ones; the typed result.

    With ``client_processes=0`` the ``planner`` (default :data:`~.loadclients.PLANNER`) picks
    the client processes; a run that comes back late is re-run at once with more of them
    when ``spec.reshard`` allows, and the result lists why in ``client_reshards``. Each
    re-run sends fresh prompts of the same lengths (seed + 7919 per re-run, recorded as the
    result's ``seed``): the replaced run's prompts may sit in the server's prefix cache.
    """
    if not isinstance(base_url, str):
        raise ServerError(f"load generator: base_url must be a string like http://127.0.0.1:8000, got "
                          f"{base_url!r}")
    spec.check()
    if spec.transport != "raw":
        require_client()
    tok, tokenizer_id = _tokenizer(base_url, api_key, model, spec)
    if spec.client_processes:  # an explicit count is never changed
        result, records = _run(base_url, api_key, model, spec, tok, tokenizer_id,
                               _clients(spec, model, tokenizer_id, PLANNER), "req")
    else:
        result, records = _planned(base_url, api_key, model, spec, tok, tokenizer_id, planner or PLANNER)
    if records_out is not None:
        records_out.extend(records)
    return result


def prepare(base_url: str, api_key: str, model: str, spec: LoadSpec, planner: CountPlanner | None = None) -> None:
    """Make the prompts of a run of ``spec`` now, for :func:`generate_load` to find made.

    Why: making 557 prompts of exactly 128 tokens takes 0.2-0.35 s of CPU (``token_prompts`` redraws until the
    re-encoding is exact). Made inside a campaign's window, that time counted as measured load while the GPUs
    idled, and its energy went into the window's tokens per joule: about 0.3 of the 0.6 s a window spent
    outside its load (stand-in with a 7B tokenizer; 0.64 s a window on 2x H200). The campaign calls this
    before a window's clock starts; the other arm of the window pair sends the same prompts and finds them made.
    Inside a :func:`~.loadclients.client_pool` the run's client processes are spawned now too, if the pool has
    none of the count the run will use (a Python start each, ~0.5 s of a c64 window on 2x H200): the count
    ``planner`` (default :data:`~.loadclients.PLANNER`) gives the run, which must be the one it then runs with.
    """
    spec.check()
    tok, tokenizer_id = _tokenizer(base_url, api_key, model, spec)
    _workload(spec, tok, tokenizer_id)
    pool = current_pool()
    if pool is not None:  # the run's client processes, spawned now if the pool has none of its count
        n = _clients(spec, model, tokenizer_id, planner or PLANNER)
        if n > 1:
            pool.ensure(n)


def make_prompts(spec: LoadSpec) -> None:
    """Make the prompts of a run of ``spec``, which names its tokenizer, without asking any server: a campaign
    makes a launch's prompts while the launch's servers start (:meth:`~pytest_p2p.campaign.backends.ModelBackend.
    prompts_ahead`), and its warm-ups and windows find them made."""
    if not spec.tokenizer:
        raise ValueError("make_prompts: the spec must name its tokenizer (no server is asked)")
    spec.check()
    _workload(spec, load_tokenizer(spec.tokenizer), spec.tokenizer)


def _tokenizer(base_url: str, api_key: str, model: str, spec: LoadSpec) -> tuple[Tokenizer, str]:
    """The tokenizer a run's prompts are made with, and its id: the spec's, else the one the server names."""
    tokenizer_id = spec.tokenizer or discover_tokenizer(base_url, api_key, model)
    return load_tokenizer(tokenizer_id), tokenizer_id


#: the prompts of the last few runs, by (tokenizer, prompt count, lengths, seed): a pure function of these, kept
#: so that a run made ready by :func:`prepare` and the window pair's other arm do not make them again, and a
#: launch's runs made while its servers start (:func:`make_prompts`: 2 points x (a warm-up + 2 windows) for the
#: committed 7B rig, times ``starts_at_once``) are still there when its windows run
_PROMPTS: OrderedDict[tuple[str, int, int | tuple[int, ...], int], tuple[str, ...]] = OrderedDict()
PROMPT_RUNS_KEPT = 24
_PROMPTS_LOCK = threading.Lock()


def _workload(spec: LoadSpec, tok: Tokenizer, tokenizer_id: str) -> tuple[tuple[tuple[int, int], ...],
                                                                           tuple[str, ...]]:
    """A run's per-request lengths (empty: every request the spec's) and its prompts, warm-up first."""
    n_prompts = spec.warmup + spec.num_prompts
    lengths: tuple[tuple[int, int], ...] = ()  # empty: every request the spec's lengths, nothing to ship per prompt
    if spec.range_ratio:
        seed = spec.seed if spec.lengths_seed is None else spec.lengths_seed
        lengths = tuple(request_lengths(n_prompts, spec.input_len, spec.output_len, spec.range_ratio, seed))
    inputs: int | tuple[int, ...] = tuple(i for i, _ in lengths) or spec.input_len
    key = (tokenizer_id, n_prompts, inputs, spec.seed)
    with _PROMPTS_LOCK:
        made = _PROMPTS.get(key)
        if made is not None:
            _PROMPTS.move_to_end(key)
    if made is None:
        made = tuple(token_prompts(tok, n_prompts, inputs if isinstance(inputs, int) else list(inputs), spec.seed))
        with _PROMPTS_LOCK:
            _PROMPTS[key] = made
            while len(_PROMPTS) > PROMPT_RUNS_KEPT:
                _PROMPTS.popitem(last=False)
    return lengths, made


def _clients(spec: LoadSpec, model: str, tokenizer_id: str, planner: CountPlanner) -> int:
    """Client processes the next run of ``spec`` starts on: the spec's count, else the planner's for its workload,
    capped by :func:`process_cap` on the CPUs we may use -- not on a 50 ms look at the idle ones, which
    :func:`_planned` takes only after a late run."""
    if spec.client_processes:
        return min(spec.client_processes, spec.concurrency, spec.num_prompts)
    return planner.start(_workload_key(spec, model, tokenizer_id),
                         min(process_cap(spec.concurrency, len(os.sched_getaffinity(0))), spec.num_prompts))


def _workload_key(spec: LoadSpec, model: str, tokenizer_id: str) -> tuple[object, ...]:
    """What the planner remembers a process count by: all that sets a run's client work."""
    return (model, tokenizer_id, spec.endpoint, spec.transport, spec.concurrency, spec.request_rate,
            spec.input_len, spec.output_len, spec.range_ratio)


def _planned(base_url: str, api_key: str, model: str, spec: LoadSpec, tok: Tokenizer, tokenizer_id: str,
             planner: CountPlanner) -> tuple[LoadResult, list[RequestRecord]]:
    """Runs on the planner's process count; a late one is replaced (``spec.reshard``) while more may help.

    The idle cores are looked at (50 ms of ``/proc/stat``) only after a late run, to size its replacement: a
    run on time keeps its count, and a campaign window's clock holds no look (2x H200: 64 looks a night).
    """
    workload = _workload_key(spec, model, tokenizer_id)
    n = _clients(spec, model, tokenizer_id, planner)
    late: list[str] = []
    while True:
        run = replace(spec, seed=spec.seed + 7919 * len(late))
        result, records = _run(base_url, api_key, model, run, tok, tokenizer_id, n, f"req{len(late) or ''}")
        is_late = bool(result.client_lateness)
        cap = min(process_cap(spec.concurrency), spec.num_prompts) if is_late else n
        nxt = planner.after(workload, n, is_late, cap)
        if nxt is None or not spec.reshard:
            return replace(result, reshards=late, _json=None), records
        late.append(result.client_lateness)
        n = nxt


def _run(base_url: str, api_key: str, model: str, spec: LoadSpec, tok: Tokenizer, tokenizer_id: str, n: int,
         rid_prefix: str) -> tuple[LoadResult, list[RequestRecord]]:
    """One run over ``n`` client processes (one in this process, or spawned and pinned); its measured records."""
    lengths, prompts = _workload(spec, tok, tokenizer_id)
    offsets = tuple(arrival_offsets(spec.num_prompts, spec.request_rate, spec.burstiness, spec.seed))
    cores = sorted(os.sched_getaffinity(0))
    pins = client_cpus(n, cores) if spec.pin and n > 1 and len(cores) > n else []
    jobs = []
    for w in range(n):
        share = spec.concurrency // n + (1 if w < spec.concurrency % n else 0)
        cpu = pins[w] if pins else None
        jobs.append(Job(base_url, api_key, model, spec, prompts, offsets, tuple(range(w, spec.warmup, n)),
                        tuple(range(w, spec.num_prompts, n)), share, cpu, rid_prefix, lengths))
    shards = run_sharded(jobs) if n > 1 else [run_coroutine(jobs[0])]
    warm = [r for sh in shards for r in sh.warm]
    recs: dict[int, RequestRecord] = {}
    for sh in shards:
        recs.update(sh.records)
    done = [recs[i] for i in range(spec.num_prompts)]
    counted = count_text_tokens(tok, done)
    duration = max(sh.t1 for sh in shards) - min(sh.t0 for sh in shards)
    result = _result(spec, model, tokenizer_id, warm, done, max(duration, 1e-9), [sh.stats for sh in shards])
    result.counted_by_client = counted
    return result, done


def count_text_tokens(tok: Tokenizer, records: Sequence[RequestRecord]) -> int:
    """Output tokens of the streams that came without a usage report, counted as bench counts them.

    bench 0.24 re-tokenises the generated text (no special tokens) when a stream says
    nothing; so do we, after the measured window, with the workload's tokenizer. Returns
    how many records were counted that way (the result's ``output_tokens_counted_by_client``).
    """
    n = 0
    for rec in records:
        if rec.output_tokens < 0:
            rec.output_tokens = len(tok.encode(rec.generated_text)) if rec.success else 0
            rec.generated_text = ""
            n += 1
    return n


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
    steady = steady_state(done, duration) if math.isinf(spec.request_rate) else None
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
        goodput_slos_ms=slos, clients=clients, steady_output_throughput=steady[0] if steady else None,
        steady_s=steady[1] if steady else None, range_ratio=spec.range_ratio)


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
