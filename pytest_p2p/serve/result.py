"""The load generator's typed result, and its ``vllm bench serve`` JSON form.

Why typed: the campaign, the fixtures and the verdict read a run's numbers; an untyped
dict let a misspelt key or a string count flow silently into an average. Why the
bench JSON form too: users' scripts read ``vllm bench serve --save-result`` files, so
:meth:`LoadResult.to_dict` carries every key bench writes (same names, same units,
``itls`` per request, ``request_goodput`` null without SLOs) plus ours (docs/metrics.md).

The client's own health travels with the numbers: ``client_saturated`` is true when a
client process was busy >= :data:`SATURATED_CPU` of the measured window or its event
loop ran late by more than :data:`SATURATED_LAG_MS` at p99 -- then the client, not the
server, shaped TPOT and ITL, and the run must not feed a verdict (the campaign and the
verdict read this key). A milder ``client_lateness`` (loop later than
:attr:`LoadResult.timely_lag_ms` at p99, or busier than :data:`TIMELY_CPU`) keeps the run
but tells the load generator to use more client processes; the runs it replaced that way
are listed in ``client_reshards``.

For callers written against the old dict result, a ``LoadResult`` is also a read-only
``Mapping`` of its JSON form, and ``result[key] = value`` adds a label (like bench's
``--metadata KEY=VALUE``), e.g. the arm a fixture ran it on.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ..jsontypes import JSONValue

#: a client process busy this fraction of the measured window could not keep up
SATURATED_CPU = 0.90
#: event-loop lateness (p99, ms) beyond which chunk timestamps are not trustworthy
SATURATED_LAG_MS = 10.0
#: event-loop lateness (p99, ms) beyond which timestamps miss the 1 ms goal: the next run gets more client processes
#: (where chunks are dated by the loop; with the kernel's receive stamps see LoadResult.timely_lag_ms)
TIMELY_LAG_MS = 1.0
#: with kernel stamps, a loop late by less than this fraction of the median inter-chunk gap keeps every stamp
#: exact: two chunks of one stream share a read (and its stamp) only when the loop is late by a whole gap
TIMELY_KERNEL_GAP_FRACTION = 0.5
#: a client process busier than this is on time on average but not in bursts: at 82 % one loop stamped
#: the first chunks of C = 64 streams 28 ms late while its lag probe still read < 1 ms (docs/performance.md).
#: Kept with kernel stamps: such a loop also sends the next request of a closed loop late, and in a burst
#: it misses whole inter-chunk gaps (merged reads), which the kernel's stamp cannot undo
TIMELY_CPU = 0.70
#: kernel stamps: the share of content chunks that may carry a later chunk's stamp while the ITL error p99 stays 0
#: (each such chunk touches at most two of the gaps: 0.4 % of chunks -> at most 0.8 % of the gaps)
TIMELY_MERGED_SHARE = 0.004
#: loop stamps: the share of the window the client may wait for its CPU (runnable, preempted) and stay on time
TIMELY_RUN_QUEUE_SHARE = 0.01
#: a shorter measured window is not judged late: a few ms of parsing is "busy" all of them, and the
#: lag probe (every 5 ms) has too few samples for a p99 -- a re-run would only double a short test run
TIMELY_MIN_WINDOW_S = 0.5


@dataclass(frozen=True)
class ClientStats:
    """What one client process spent on a run (measured window only)."""

    cpu_s: float
    wall_s: float
    lag_p99_ms: float
    requests: int
    cpu: int | None = None  # the CPU it was pinned to; None: it ran where the kernel put it
    stamps: str = "event loop"  # what dated its chunks: "kernel" (receive stamps) or "event loop"
    read_lag_p99_ms: float = 0.0  # kernel stamps only: how late the loop read what had arrived, p99 over reads
    chunks: int = 0  # content chunks received in the window
    merged_chunks: int = 0  # of them, read together with a later chunk of their stream (dated by its stamp)
    run_queue_s: float | None = None  # runnable but off the CPU (the OS gave it to another task); None: unknown

    @property
    def util(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class LoadResult(Mapping[str, JSONValue]):
    """One measured run: the workload asked for, what came back, and how healthy the client was."""

    # workload
    model_id: str
    tokenizer_id: str
    endpoint: str
    num_prompts: int
    input_len: int
    output_len: int
    seed: int
    warmup: int
    max_concurrency: int
    request_rate: float
    burstiness: float
    transport: str
    # outcome
    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    server_input_tokens: int
    request_throughput: float
    request_goodput: float | None
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    latency_stats: dict[str, float]  # mean_/median_/std_/pNN_ {ttft,tpot,itl,e2el} _ms
    input_lens: list[int]
    output_lens: list[int]
    ttfts: list[float]
    itls: list[list[float]]
    errors: list[str]  # one per measured request, "" when it succeeded (bench's form)
    warmup_failed: int
    goodput_slos_ms: dict[str, float]
    # the client
    clients: list[ClientStats]
    date: str = field(default_factory=lambda: _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    labels: dict[str, JSONValue] = field(default_factory=dict)
    reshards: list[str] = field(default_factory=list)  # why each run this one replaced was late (first first)
    counted_by_client: int = 0  # requests whose stream had no usage report: tokens counted from their text
    steady_output_throughput: float | None = None  # output tok/s while every stream was busy (metrics.steady_state)
    steady_s: float | None = None  # how long that steady part lasted
    range_ratio: float = 0.0  # each request's lengths drawn in L * (1 -+ r) (workload.request_lengths); 0: fixed
    _json: dict[str, JSONValue] | None = field(default=None, repr=False, compare=False)

    # --------------------------------------------------------------- client health
    @property
    def client_processes(self) -> int:
        return len(self.clients)

    @property
    def client_cpu_s(self) -> float:
        return math.fsum(c.cpu_s for c in self.clients)

    @property
    def client_cpu_util_max(self) -> float:
        return max((c.util for c in self.clients), default=0.0)

    @property
    def client_loop_lag_p99_ms(self) -> float:
        return max((c.lag_p99_ms for c in self.clients), default=0.0)

    @property
    def client_merged_share(self) -> float:
        """Share of content chunks that carry a later chunk's stamp (read together with it)."""
        chunks = sum(c.chunks for c in self.clients)
        return sum(c.merged_chunks for c in self.clients) / chunks if chunks else 0.0

    @property
    def client_read_lag_p99_ms(self) -> float:
        return max((c.read_lag_p99_ms for c in self.clients), default=0.0)

    @property
    def client_run_queue_share(self) -> float | None:
        """The largest share of the window a client process spent runnable but off its CPU (None: unknown)."""
        shares = [c.run_queue_s / c.wall_s for c in self.clients if c.run_queue_s is not None and c.wall_s > 0]
        return max(shares) if shares else None

    @property
    def client_timestamps(self) -> str:
        """``"kernel"`` when every client process dated its chunks by the kernel's receive stamp, else
        ``"event loop"`` (a chunk dated when the loop read it: late by the loop's lateness)."""
        return "kernel" if self.clients and all(c.stamps == "kernel" for c in self.clients) else "event loop"

    @property
    def timely_lag_ms(self) -> float:
        """The event loop's p99 lateness up to which chunk timestamps stay on time.

        A chunk dated by the loop is late by the loop's lateness: :data:`TIMELY_LAG_MS`. A
        chunk dated by the kernel is late only if the loop missed a whole inter-chunk gap of
        its stream, so that the next chunk came into the same read: up to
        :data:`TIMELY_KERNEL_GAP_FRACTION` of the run's median ITL (never below the former).
        """
        if self.client_timestamps != "kernel":
            return TIMELY_LAG_MS
        gap_ms = self.latency_stats.get("median_itl_ms", 0.0)
        return max(TIMELY_LAG_MS, TIMELY_KERNEL_GAP_FRACTION * gap_ms)

    @property
    def client_saturation(self) -> str:
        """Why the client could not keep up, or ``""``."""
        why = []
        if self.client_cpu_util_max >= SATURATED_CPU:
            why.append(f"a client process was busy {self.client_cpu_util_max:.0%} of the window "
                       f"(limit {SATURATED_CPU:.0%})")
        if self.client_loop_lag_p99_ms > SATURATED_LAG_MS:
            why.append(f"client event loop late by {self.client_loop_lag_p99_ms:.1f} ms at p99 "
                       f"(limit {SATURATED_LAG_MS:g} ms)")
        return "; ".join(why)

    @property
    def client_saturated(self) -> bool:
        return bool(self.client_saturation)

    @property
    def client_lateness(self) -> str:
        """Why chunk timestamps may be more than 1 ms late, or ``""``; more client processes are the cure.

        A run in which no request completed has no chunk to date: its window is the few milliseconds the
        endpoint took to refuse everything, which a client is busy all of. More processes cannot help
        it, and re-running it sent a failing endpoint every request twice (seen on 2x H200, 32 cores:
        8 requests for 4 prompts answered 429 / 500; a 2-core box caps a run at one process and never
        re-ran it).
        """
        if not self.completed:
            return ""
        if self.client_saturated:
            return self.client_saturation
        if self.duration < TIMELY_MIN_WINDOW_S:
            return ""
        why = []
        if self.client_cpu_util_max > TIMELY_CPU:
            why.append(f"busiest {self.client_cpu_util_max:.0%} of the window (limit {TIMELY_CPU:.0%})")
        limit = self.timely_lag_ms
        if self.client_loop_lag_p99_ms > limit:
            why.append(f"event loop late by {self.client_loop_lag_p99_ms:.2f} ms at p99 (goal {limit:.3g} ms)")
        why.extend(self._preempted())
        return f"{self.client_processes} client process(es): {'; '.join(why)}" if why else ""

    def _preempted(self) -> list[str]:
        """What the lag probe cannot see: the OS taking the CPU away between its samples.

        With kernel stamps a late read costs nothing unless it took two chunks of one
        stream at once; the earlier then carries the later one's stamp. When at most
        :data:`TIMELY_MERGED_SHARE` of the chunks did, at most twice that share of the ITL
        gaps has any error, so their p99 has none. With loop stamps every chunk arriving
        while the client was off its CPU is late by up to that wait: more than
        :data:`TIMELY_RUN_QUEUE_SHARE` of the window is too much for a 1 ms p99.
        """
        why = []
        if self.client_timestamps == "kernel":
            share = self.client_merged_share
            if share > TIMELY_MERGED_SHARE:
                wait = self.client_run_queue_share
                off = f", off its CPU {wait:.1%} of the window" if wait is not None else ""
                why.append(f"{share:.1%} of chunks were read together with a later chunk of their stream and carry "
                           f"its stamp (limit {TIMELY_MERGED_SHARE:.1%}); reads late by "
                           f"{self.client_read_lag_p99_ms:.2f} ms at p99{off}")
        else:
            wait = self.client_run_queue_share
            if wait is not None and wait > TIMELY_RUN_QUEUE_SHARE:
                why.append(f"the OS kept the client off its CPU {wait:.1%} of the window (limit "
                           f"{TIMELY_RUN_QUEUE_SHARE:.0%}): chunks dated by its loop are late by as much")
        return why

    def error_summary(self) -> list[dict[str, JSONValue]]:
        """The ten most frequent failure reasons with their counts."""
        counts: dict[str, int] = {}
        for e in self.errors:
            if e:
                counts[e] = counts.get(e, 0) + 1
        return [{"error": e, "count": n} for e, n in sorted(counts.items(), key=lambda kv: -kv[1])][:10]

    # --------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, JSONValue]:
        """``vllm bench serve``'s result keys (same names and units), then ours; plain JSON (a fresh dict)."""
        return dict(self._cached())

    def _cached(self) -> dict[str, JSONValue]:
        if self._json is None:
            self._json = self._build()
        return self._json

    def _build(self) -> dict[str, JSONValue]:
        out: dict[str, JSONValue] = {
            "date": self.date, "endpoint_type": "openai-chat" if self.endpoint == "chat" else "openai",
            "label": self.labels.get("label"), "model_id": self.model_id, "tokenizer_id": self.tokenizer_id,
            "num_prompts": self.num_prompts,
            "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate,
            "burstiness": self.burstiness, "max_concurrency": self.max_concurrency,
            "duration": self.duration, "completed": self.completed, "failed": self.failed,
            "total_input_tokens": self.total_input_tokens, "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.request_throughput, "request_goodput": self.request_goodput,
            "output_throughput": self.output_throughput, "total_token_throughput": self.total_token_throughput,
            "steady_output_throughput": self.steady_output_throughput, "steady_s": self.steady_s,
            "max_output_tokens_per_s": self.max_output_tokens_per_s,
            "max_concurrent_requests": self.max_concurrent_requests,
            "input_lens": list(self.input_lens), "output_lens": list(self.output_lens),
            "ttfts": list(self.ttfts), "itls": [list(x) for x in self.itls],
            "generated_texts": [""] * len(self.errors), "errors": list(self.errors),
            **self.latency_stats,
            # ours (docs/metrics.md)
            "endpoint": self.endpoint, "input_len": self.input_len, "output_len": self.output_len,
            "range_ratio": self.range_ratio,
            "seed": self.seed, "warmup": self.warmup, "warmup_failed": self.warmup_failed,
            "server_input_tokens": self.server_input_tokens, "goodput_slos_ms": dict(self.goodput_slos_ms),
            "error_summary": self.error_summary(), "transport": self.transport,
            "client_processes": self.client_processes, "client_cpu_s": self.client_cpu_s,
            "client_cpus": [c.cpu for c in self.clients], "client_timestamps": self.client_timestamps,
            "client_cpu_util_max": self.client_cpu_util_max,
            "client_loop_lag_p99_ms": self.client_loop_lag_p99_ms,
            "client_read_lag_p99_ms": self.client_read_lag_p99_ms,
            "client_merged_chunk_share": self.client_merged_share,
            "client_run_queue_share": self.client_run_queue_share,
            "output_tokens_counted_by_client": self.counted_by_client,
            "client_saturated": self.client_saturated, "client_saturation": self.client_saturation,
            "client_lateness": self.client_lateness, "client_reshards": list(self.reshards),
        }
        out.update({k: v for k, v in self.labels.items() if k != "label"})
        return out

    # --------------------------------------------------------------- Mapping (old dict callers)
    def __getitem__(self, key: str) -> JSONValue:
        return self._cached()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._cached())

    def __len__(self) -> int:
        return len(self._cached())

    def __setitem__(self, key: str, value: JSONValue) -> None:
        """A label carried into the JSON form (bench's ``--metadata``)."""
        self.labels[key] = value
        self._json = None

    def metric(self, name: str) -> float:
        """One numeric key of the JSON form as a float (``KeyError`` naming the key if absent or not numeric)."""
        value = self._cached().get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise KeyError(f"load result has no numeric key {name!r}")
        return float(value)


def bench_keys() -> frozenset[str]:
    """The keys ``vllm bench serve`` 0.24 writes for a text-generation run with default percentiles."""
    base = {"date", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
            "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
            "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
            "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests", "input_lens",
            "output_lens", "ttfts", "itls", "generated_texts", "errors"}
    for m in ("ttft", "tpot", "itl", "e2el"):
        base |= {f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms", f"p99_{m}_ms"}
    return frozenset(base)

