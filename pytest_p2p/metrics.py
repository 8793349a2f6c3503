"""The metric registry: the one definition of each metric's unit, direction and role.

Why one table: the direction of a metric (is bigger better?) used to be written in the
campaign, the verdict and the report, and the copies disagreed (``avg_watts`` was
"lower is better" for the campaign and "informational" for the verdict;
``max_output_tokens_per_s`` matched the campaign's ``*_s`` latency pattern and so read
as lower-is-better there; ``request_goodput`` had no direction at all in the campaign).
Every stage now asks :func:`metric` (or :func:`find` for names a user invented).

Fields:

* ``higher_is_better`` — the direction; meaningless when ``judged`` is false.
* ``primary`` — a default primary metric: only primary metrics can fail a baseline
  check (everything else is reported, with its multiplicity-adjusted significance, as
  information).  For probes ``busbw_gbs`` is primary at the bandwidth sizes and
  ``time_us`` at the decode (latency) sizes; :func:`default_primaries` picks by size.
* ``kind`` — ``"model"`` (vLLM serving) or ``"probe"`` (NCCL collectives).
* ``judged`` — false for counts and spreads (``completed``, ``std_ttft_ms``) and for
  power alone (a faster run may draw more; efficiency is judged via tokens per joule).
* ``aggregation`` — how reps of one scenario combine: ``"mean"`` for everything here
  (percentile metrics are already per-rep percentiles; their reps are averaged).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Kind = Literal["model", "probe"]

#: sizes up to this many bytes are "decode sizes" (latency-bound: time is primary);
#: larger ones are "bandwidth sizes" (busbw is primary).
DECODE_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool
    primary: bool
    kind: Kind
    description: str
    judged: bool = True
    aggregation: str = "mean"

    @property
    def direction(self) -> str:
        """``"higher"``, ``"lower"`` or ``"info"`` (reported, never judged)."""
        if not self.judged:
            return "info"
        return "higher" if self.higher_is_better else "lower"


def _m(name: str, unit: str, higher: bool, desc: str, *, kind: Kind = "model", primary: bool = False,
       judged: bool = True) -> Metric:
    return Metric(name, unit, higher, primary, kind, desc, judged)


_LAT = {"ttft": "time to first token", "tpot": "time per output token (after the first)",
        "itl": "inter-token latency (gaps between chunks)", "e2el": "end-to-end request latency"}
_STAT = {"mean": "mean", "median": "median", "p50": "50th percentile", "p90": "90th percentile",
         "p99": "99th percentile"}


def _build() -> dict[str, Metric]:
    ms: list[Metric] = [
        _m("output_throughput", "tok/s", True, "generated tokens per second of the benchmark window",
           primary=True),
        _m("total_token_throughput", "tok/s", True, "prompt plus generated tokens per second"),
        _m("request_throughput", "req/s", True, "completed requests per second"),
        _m("request_goodput", "req/s", True, "requests per second meeting the SLOs (vLLM bench serve)"),
        _m("max_output_tokens_per_s", "tok/s", True, "peak generated tokens per second (vLLM bench serve)"),
        _m("steady_output_throughput", "tok/s", True, "generated tokens per second while every stream was busy "
           "(closed loop: first wave streaming to the first completion after the last send)"),
        _m("tokens_per_joule", "tok/J", True, "generated tokens per joule of GPU energy"),
        _m("joules_per_token", "J/tok", False, "GPU energy per generated token"),
        _m("avg_watts", "W", False, "average GPU power of the pair; power alone is not judged", judged=False),
        _m("total_joules", "J", False, "GPU energy of the window", judged=False),
        _m("idle_total_watts", "W", False, "idle power of the pair before the campaign", judged=False),
        _m("duration", "s", False, "length of the benchmark window", judged=False),
        _m("completed", "", True, "requests completed", judged=False),
        _m("failed", "", False, "requests failed", judged=False),
        _m("warmup_failed", "", False, "warm-up requests failed", judged=False),
        _m("num_prompts", "", True, "prompts sent", judged=False),
        _m("total_input_tokens", "tok", True, "prompt tokens of completed requests", judged=False),
        _m("total_output_tokens", "tok", True, "generated tokens of completed requests", judged=False),
        _m("max_concurrent_requests", "", True, "largest number of requests in flight", judged=False),
        _m("busbw_gbs", "GB/s", True, "NCCL bus bandwidth (primary at bandwidth sizes)", kind="probe",
           primary=True),
        _m("algbw_gbs", "GB/s", True, "NCCL algorithm bandwidth", kind="probe"),
        _m("bandwidth_gbs", "GB/s", True, "copy bandwidth of a P2P probe", kind="probe"),
        _m("time_us", "us", False, "time of one collective (primary at decode sizes)", kind="probe",
           primary=True),
        _m("latency_us", "us", False, "latency of a small P2P transfer", kind="probe"),
    ]
    for lat, what in _LAT.items():
        for stat, sname in _STAT.items():
            ms.append(_m(f"{stat}_{lat}_ms", "ms", False, f"{sname} {what}"))
        ms.append(_m(f"std_{lat}_ms", "ms", False, f"spread (population std) of {what}: noise, not speed",
                     judged=False))
    return {m.name: m for m in ms}


METRICS: Mapping[str, Metric] = MappingProxyType(_build())

# Names a user or a newer vLLM may produce that are not in the table (p95_ttft_ms, ...).
_PATTERNS: tuple[tuple[re.Pattern[str], str, bool, bool], ...] = (
    (re.compile(r"^std_"), "", False, False),
    (re.compile(r"_ms$"), "ms", False, True),
    (re.compile(r"_us$"), "us", False, True),
    (re.compile(r"_(gbs)$"), "GB/s", True, True),
    (re.compile(r"(throughput|_per_s|per_joule|goodput)$"), "", True, True),
)


def metric(name: str) -> Metric:
    """The registered metric ``name``; an unknown name is a ``KeyError`` naming close matches."""
    try:
        return METRICS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(METRICS), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown metric {name!r}{hint}") from None


def find(name: str) -> Metric | None:
    """:func:`metric`, or a metric inferred from the name's suffix (``p95_ttft_ms`` -> lower-is-better ms);
    ``None`` when neither the table nor a suffix says anything (reported, not judged)."""
    if name in METRICS:
        return METRICS[name]
    for rx, unit, higher, judged in _PATTERNS:
        if rx.search(name):
            kind: Kind = "probe" if name.endswith(("_us", "_gbs")) else "model"
            return Metric(name, unit, higher, False, kind, "inferred from the name", judged)
    return None


def direction(name: str, overrides: Mapping[str, str] | None = None) -> str | None:
    """``"higher"``, ``"lower"``, ``"info"`` or ``None`` (unknown); ``overrides`` (the rig file's
    ``baseline.directions``) win."""
    if overrides and name in overrides:
        return overrides[name]
    m = find(name)
    return m.direction if m is not None else None


def unit(name: str) -> str:
    m = find(name)
    return m.unit if m is not None else ""


def is_decode_size(point: str) -> bool:
    """A probe point label ``s8KiB``/``s1MiB`` at or below :data:`DECODE_MAX_BYTES`."""
    mt = re.fullmatch(r"s?(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?", point.strip())
    if not mt:
        return False
    mult = {"B": 1, None: 1, "KiB": 1024, "KB": 1000, "MiB": 1024 ** 2, "MB": 1000 ** 2,
            "GiB": 1024 ** 3, "GB": 1000 ** 3}.get(mt.group(2), 1)
    return float(mt.group(1)) * mult <= DECODE_MAX_BYTES


def default_primaries(kind: str, point: str) -> tuple[str, ...]:
    """Primary metrics of one scenario by default: output throughput for a model campaign;
    time at decode sizes, bus bandwidth at bandwidth sizes for a probe campaign."""
    if kind == "probe":
        return ("time_us",) if is_decode_size(point) else ("busbw_gbs",)
    return ("output_throughput",)
