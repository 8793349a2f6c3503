"""What one load run sends and how its clients reach the endpoint (:class:`LoadSpec`).

Why a module of its own: the load generator (:mod:`.loadgen`) builds a spec and its client
processes (:mod:`.loadclients`) each carry one in their job; with the spec inside the
generator, the clients imported the module that imports them (an import cycle, issue 25).
It depends only on the metric and transport definitions below both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .metrics import PERCENTILES
from .transport import TRANSPORTS, ClientOptions


@dataclass(frozen=True)
class LoadSpec:
    """One run's workload and client settings (``vllm bench serve`` names where it has one)."""

    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    seed: int = 0
    warmup: int = 1
    range_ratio: float = 0.0  # bench's --random-range-ratio: each request's lengths in L * (1 -+ r) (workload.py)
    lengths_seed: int | None = None  # seeds those lengths (None: ``seed``); a campaign keeps one for all windows
    request_timeout_s: float = 300.0
    endpoint: str = "completions"
    request_rate: float = math.inf
    burstiness: float = 1.0
    tokenizer: str | None = None  # None: the model directory the server reports, or the stand-in's words
    transport: str = "raw"
    client_processes: int = 0  # 0: the planner's choice (loadclients.ClientPlanner); n: exactly n
    reshard: bool = True  # planner's choice only: re-run a late run at once with more processes
    goodput_slos_ms: Mapping[str, float] = field(default_factory=dict)
    continuous_usage: bool = False
    keep_chunk_times: bool = False
    percentiles: tuple[float, ...] = PERCENTILES
    pin: bool = True
    # a user-supplied endpoint (transport.ClientOptions says how each is honoured)
    headers: tuple[tuple[str, str], ...] = ()
    extra_body: Mapping[str, object] = field(default_factory=dict)
    ca_file: str | None = None
    proxy: str = "env"
    connect_timeout_s: float = 10.0

    def client_options(self) -> ClientOptions:
        """How the transport reaches the endpoint; a connect never waits longer than a request may take."""
        return ClientOptions(headers=self.headers, ca_file=self.ca_file, proxy=self.proxy,
                             connect_timeout_s=min(self.connect_timeout_s, self.request_timeout_s))

    def check(self) -> None:
        """``ValueError`` naming the first out-of-range field."""
        ints = {"concurrency": (self.concurrency, 1, 100_000), "num_prompts": (self.num_prompts, 1, 10_000_000),
                "input_len": (self.input_len, 1, 10_000_000), "output_len": (self.output_len, 1, 10_000_000),
                "warmup": (self.warmup, 0, 1_000_000), "client_processes": (self.client_processes, 0, 4096)}
        for name, (value, lo, hi) in ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{name} must be an integer {lo}..{hi}; got {value!r}")
        if isinstance(self.range_ratio, bool) or not 0 <= self.range_ratio < 1:
            raise ValueError(f"range_ratio must be a number in [0, 1), got {self.range_ratio!r}")
        if self.endpoint not in ("completions", "chat"):
            raise ValueError(f"endpoint must be 'completions' or 'chat', got {self.endpoint!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {self.transport!r}")
        if not 0 < self.request_timeout_s <= 7 * 86400:
            raise ValueError(f"request_timeout_s must be in (0, 604800], got {self.request_timeout_s!r}")
        if not self.request_rate > 0 or not 0 < self.burstiness < 1e6:
            raise ValueError(f"request_rate and burstiness must be > 0, got {self.request_rate}, {self.burstiness}")
        if not 0 < self.connect_timeout_s <= 7 * 86400:
            raise ValueError(f"connect_timeout_s must be in (0, 604800], got {self.connect_timeout_s!r}")
        reserved = {"host", "content-length", "transfer-encoding", "x-request-id"}
        bad = [k for k, _ in self.headers if k.lower() in reserved or not k or any(c in k for c in ":\r\n ")]
        if bad or any(c in v for _, v in self.headers for c in "\r\n"):
            raise ValueError(f"headers: {', '.join(map(repr, bad)) or 'a value with a line break'} cannot be set "
                             "(the client sets Host, Content-Length, Transfer-Encoding and X-Request-Id itself)")
        if self.proxy not in ("env", "none") and not self.proxy.startswith("http://"):
            raise ValueError(f"proxy must be 'env', 'none' or http://HOST:PORT, got {self.proxy!r}")
