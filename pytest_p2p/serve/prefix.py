"""How much of a window's prompts a vLLM server served from its prefix cache (``GET /metrics``).

Why: vLLM keeps the KV blocks of prompts it served, and a prompt sent again is prefilled only where the
cache does not cover it. A window that repeats prompts its server has seen is therefore partly a
measurement of the cache, and it favours the arm whose prefill costs more (P2P off: a prefill's
all-reduces go through host memory). The campaign draws every window's prompts fresh
(:func:`pytest_p2p.campaign.backends.prompt_seed`); this is the check that the server agrees. It reads
vLLM's Prometheus counters ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total``
(prompt tokens looked up, and found, summed over engines) before and after a window; on 2x H100 with
the old seeds the servers' own log said ``Prefix cache hit rate: 23.0%`` for the windows that repeated
prompts. An endpoint without these counters (another server, a proxy) gives ``None``: unknown, never a
failure, since nothing measured depends on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from http.client import HTTPException

from .ready import http_call

QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
METRICS_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class PrefixCounts:
    """vLLM's prefix-cache counters at one moment, in prompt tokens."""

    queries: float
    hits: float

    def since(self, before: PrefixCounts) -> tuple[float, float] | None:
        """``(tokens looked up, fraction found)`` between ``before`` and now; ``None`` if a counter went back
        (a restarted server) or nothing was looked up."""
        dq, dh = self.queries - before.queries, self.hits - before.hits
        if dq <= 0 or dh < 0:
            return None
        return dq, min(1.0, dh / dq)


def parse_counts(text: str) -> PrefixCounts | None:
    """The two counters from a Prometheus text page (samples of every label set summed), or ``None``
    when either is missing or not a finite number."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in (QUERIES, HITS):
            continue
        rest = line.rsplit("}", 1)[1] if "{" in line else line[len(name):]  # "value [timestamp]"
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            return None
        if not math.isfinite(value):
            return None
        sums[name] = sums.get(name, 0.0) + value
    if QUERIES not in sums or HITS not in sums:
        return None
    return PrefixCounts(sums[QUERIES], sums[HITS])


def prefix_counts(base_url: str, api_key: str) -> PrefixCounts | None:
    """The server's counters now, or ``None`` (no ``/metrics``, no such counters, or no answer in time)."""
    try:
        status, body = http_call("GET", base_url + "/metrics", api_key, None, METRICS_TIMEOUT_S)
    except (OSError, HTTPException):
        return None
    if status != 200:
        return None
    return parse_counts(body.decode("utf-8", errors="replace"))


__all__ = ["HITS", "QUERIES", "PrefixCounts", "parse_counts", "prefix_counts"]
