"""Serving metrics with ``vllm bench serve``'s definitions and JSON key names.

Pure arithmetic on per-request records, so that every number a campaign reports can be
checked by hand (tests/test_metrics.py does). Definitions (see docs/metrics.md):

* ``ttft``  first content chunk time - request send time.
* ``itl``   gaps between consecutive content chunks of a request (all requests pooled).
* ``tpot``  per request ``(e2el - ttft) / (output_tokens - 1)``, requests with >1 token.
* ``e2el``  last content chunk time - request send time (vLLM's ``latency``).
* throughput: ``completed / duration``, ``sum(output_tokens) / duration``,
  ``(sum(input_tokens) + sum(output_tokens)) / duration`` over *successful* requests.

Statistics match numpy's defaults, which vLLM uses: population standard deviation
(``ddof=0``) and linearly interpolated percentiles; an empty list gives 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass
class RequestRecord:
    """One request as the load generator saw it (times in seconds, ``perf_counter`` clock)."""

    success: bool = False
    prompt_len: int = 0
    output_tokens: int = 0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    start_time: float = 0.0
    error: str = ""
    server_prompt_tokens: int = 0  # the server's usage.prompt_tokens (its tokenizer's count, BOS included)
    chunk_times: list[float] | None = None  # absolute chunk arrival times, only when asked for
    request_id: str = ""  # what it was sent as (X-Request-Id), so a server's own log can be matched to it
    generated_text: str = ""  # kept only when the stream had no usage report (output_tokens -1 until counted)
    merged_chunks: int = 0  # content chunks read together with a later one of this stream (dated by the later)


def percentile(values: Sequence[float], p: float) -> float:
    """numpy.percentile's default ("linear") method; 0.0 for an empty list like vLLM's ``or 0``."""
    if not values:
        return 0.0
    xs = sorted(values)
    rank = (len(xs) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def std(values: Sequence[float]) -> float:
    """Population standard deviation (numpy's default ``ddof=0``)."""
    if not values:
        return 0.0
    m = mean(values)
    return math.sqrt(math.fsum((x - m) ** 2 for x in values) / len(values))


def _pword(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def summarize(name: str, values_s: Sequence[float], percentiles: Iterable[float] = PERCENTILES) -> dict[str, float]:
    """``mean_<name>_ms``, ``median_<name>_ms``, ``std_<name>_ms``, ``p<P>_<name>_ms`` from seconds."""
    out = {
        f"mean_{name}_ms": mean(values_s) * 1000.0,
        f"median_{name}_ms": percentile(values_s, 50.0) * 1000.0,
        f"std_{name}_ms": std(values_s) * 1000.0,
    }
    for p in percentiles:
        out[f"p{_pword(p)}_{name}_ms"] = percentile(values_s, p) * 1000.0
    return out


def compute_metrics(records: Sequence[RequestRecord], duration: float,
                    percentiles: Iterable[float] = PERCENTILES) -> dict[str, float]:
    """The ``vllm bench serve`` result keys for measured (non-warm-up) requests over ``duration`` s.

    Every value is a number: the counts (``completed``, ``failed``, ``total_*_tokens``) are ints.
    """
    if duration <= 0:
        raise ValueError(f"benchmark duration must be positive, got {duration}")
    pcts = tuple(percentiles)
    ok = [r for r in records if r.success]
    ttfts = [r.ttft for r in ok]
    e2els = [r.latency for r in ok]
    itls = [gap for r in ok for gap in r.itl]
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    result: dict[str, float] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        result.update(summarize(name, values, pcts))
    return result


def token_times(rec: RequestRecord) -> list[float]:
    """Absolute arrival times of a successful request's content chunks (send + TTFT + cumulated ITLs)."""
    if not rec.success:
        return []
    t = rec.start_time + rec.ttft
    out = [t]
    for gap in rec.itl:
        t += gap
        out.append(t)
    return out


def peaks(records: Sequence[RequestRecord]) -> tuple[float, int]:
    """``(max_output_tokens_per_s, max_concurrent_requests)`` in ``vllm bench serve``'s 1-second buckets.

    Buckets are whole seconds from the earliest send; a token counts in the bucket of its
    arrival, a request in every bucket from its send to its last chunk (so the second
    figure can exceed the concurrency by the requests that replaced each other within a
    second, exactly as bench reports it).
    """
    if not records:
        return 0.0, 0
    t0 = min(r.start_time for r in records)
    tokens: dict[int, int] = {}
    running: dict[int, int] = {}
    for r in records:
        if not r.success:
            continue
        for t in token_times(r):
            b = int(t - t0)
            tokens[b] = tokens.get(b, 0) + 1
        for b in range(int(r.start_time - t0), int(r.start_time + r.latency - t0) + 1):
            running[b] = running.get(b, 0) + 1
    return float(max(tokens.values(), default=0)), max(running.values(), default=0)


def steady_state(records: Sequence[RequestRecord], duration: float) -> tuple[float, float] | None:
    """``(output tokens/s, seconds)`` over the part of a closed-loop run when every stream was busy.

    Why: ``output_throughput`` divides by the whole window, which includes the first wave's
    prefill (nothing streams yet) and the drain at the end (streams run out of prompts one by
    one). How long the drain lasts depends on how the last requests happen to line up, so it
    adds window-to-window noise that has nothing to do with the interconnect. The steady part
    runs from the moment every request of the first wave (those sent before anything
    completed) has streamed its first token, to the first completion after the last request
    was sent (from then on fewer streams are busy). Chunks count with their request's tokens
    per chunk. ``None`` when that part is under half of ``duration`` (an open-loop or too short
    a run): then there is no steady part worth the name.
    """
    ok = [r for r in records if r.success and r.output_tokens > 0]
    if len(ok) < 2:
        return None
    first_end = min(r.start_time + r.latency for r in ok)
    wave = [r.start_time + r.ttft for r in ok if r.start_time < first_end]
    last_send = max(r.start_time for r in records)
    ends_after = [r.start_time + r.latency for r in ok if r.start_time + r.latency > last_send]
    if not wave or not ends_after:
        return None
    t_a, t_b = max(wave), min(ends_after)
    if t_b - t_a < 0.5 * duration:
        return None
    tokens = 0.0
    for r in ok:
        times = token_times(r)
        per_chunk = r.output_tokens / len(times)
        tokens += per_chunk * sum(1 for t in times if t_a <= t <= t_b)
    return tokens / (t_b - t_a), t_b - t_a


GOODPUT_METRICS = ("ttft", "tpot", "e2el")


def goodput(records: Sequence[RequestRecord], duration: float, slos_ms: Mapping[str, float]) -> float:
    """Requests per second that completed within every SLO (``vllm bench serve --goodput ttft:50 tpot:10``).

    A request's TPOT is ``(e2el - ttft) / (output_tokens - 1)``, 0 for a single token.
    """
    unknown = set(slos_ms) - set(GOODPUT_METRICS)
    if unknown:
        raise ValueError(f"goodput SLOs are for {', '.join(GOODPUT_METRICS)}; got {', '.join(sorted(unknown))}")
    if duration <= 0:
        raise ValueError(f"benchmark duration must be positive, got {duration}")
    good = 0
    for r in records:
        if not r.success:
            continue
        tpot = (r.latency - r.ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0
        values = {"ttft": r.ttft, "tpot": tpot, "e2el": r.latency}
        if all(values[k] * 1000.0 <= slo for k, slo in slos_ms.items()):
            good += 1
    return good / duration
