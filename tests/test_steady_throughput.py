"""The steady-state output throughput of a closed-loop window (issue 24: windows sized for signal).

A window's ``output_throughput`` divides by the whole window, prefill of the first wave and the
drain at its end included; how long the drain lasts depends on how the last requests line up.
``steady_state`` counts only while every stream was busy, so two windows of a server that
streams at one fixed rate read the same, however their last requests happened to line up.
"""

from __future__ import annotations

import pytest

from pytest_p2p.serve.metrics import RequestRecord, steady_state


def closed_loop(lengths: list[list[int]], gap: float = 0.01, ttft: float = 0.05) -> list[RequestRecord]:
    """One closed-loop stream per list, sending requests of those token counts back to back;
    every token ``gap`` s after the last (one token per chunk)."""
    recs: list[RequestRecord] = []
    for per_stream in lengths:
        t = 0.0
        for n in per_stream:
            latency = ttft + gap * (n - 1)
            recs.append(RequestRecord(success=True, prompt_len=8, output_tokens=n, ttft=ttft,
                                      itl=[gap] * (n - 1), latency=latency, start_time=t))
            t += latency
    return recs


def test_a_steady_server_reads_its_rate_however_the_drain_lines_up() -> None:
    even = closed_loop([[100] * 10] * 4)  # every stream ends together: no drain
    ragged = closed_loop([[100] * 9 + [last] for last in (100, 70, 40, 10)])  # streams run dry one by one
    whole_even = sum(r.output_tokens for r in even) / max(r.start_time + r.latency for r in even)
    whole_ragged = sum(r.output_tokens for r in ragged) / max(r.start_time + r.latency for r in ragged)
    steady_even, s_even = steady_state(even, max(r.start_time + r.latency for r in even)) or (0.0, 0.0)
    steady_ragged, _ = steady_state(ragged, max(r.start_time + r.latency for r in ragged)) or (0.0, 0.0)
    assert whole_even != pytest.approx(whole_ragged, rel=0.01)  # the whole-window rate moves with the drain
    rate = 4 * 100 / (0.05 + 0.99)  # 4 streams, each 100 tokens per 1.04 s request (TTFT included)
    assert steady_even == pytest.approx(rate, rel=0.01)
    assert steady_ragged == pytest.approx(rate, rel=0.01)
    assert s_even > 0.5 * max(r.start_time + r.latency for r in even)


def test_no_steady_part_worth_the_name_is_none() -> None:
    staggered = closed_loop([[100]] * 4)  # requests sent 0.5 s apart, as an open loop sends them
    for k, r in enumerate(staggered):
        r.start_time = 0.5 * k
    assert steady_state(staggered, max(r.start_time + r.latency for r in staggered)) is None
    one_wave = closed_loop([[100]] * 4)  # one wave sent at once: busy from its first tokens to its first end
    assert steady_state(one_wave, 1.04) == pytest.approx((400.0, 0.99), rel=1e-6)
    assert steady_state([], 1.0) is None
