"""Metric arithmetic: vllm bench serve's definitions and key names, checked by hand and against numpy."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_p2p.serve.metrics import RequestRecord, compute_metrics, mean, percentile, std, summarize

VLLM_KEYS = {
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "output_throughput", "total_token_throughput",
} | {f"{stat}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
     for stat in ("mean", "median", "std", "p50", "p90", "p99")}


def rec(ttft: float, itl: list[float], out: int, prompt: int = 10, ok: bool = True) -> RequestRecord:
    return RequestRecord(success=ok, prompt_len=prompt, output_tokens=out, ttft=ttft, itl=list(itl),
                         latency=ttft + sum(itl), error="" if ok else "boom")


def test_keys_are_vllm_bench_serve_keys() -> None:
    assert set(compute_metrics([rec(0.1, [0.01], 2)], 1.0)) == VLLM_KEYS


def test_hand_computed_example() -> None:
    records = [
        rec(0.100, [0.010, 0.030], 3, prompt=8),   # e2el 0.140, tpot (0.140-0.100)/2 = 0.020
        rec(0.200, [0.020], 2, prompt=12),         # e2el 0.220, tpot 0.020/1 = 0.020
        rec(0.300, [], 1, prompt=5),               # one token: no tpot, no itl
        rec(9.0, [9.0], 2, prompt=100, ok=False),  # failed: excluded everywhere but "failed"
    ]
    m = compute_metrics(records, duration=2.0)
    assert m["completed"] == 3 and m["failed"] == 1
    assert m["total_input_tokens"] == 25 and m["total_output_tokens"] == 6
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(3.0)
    assert m["total_token_throughput"] == pytest.approx(15.5)
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["std_ttft_ms"] == pytest.approx(math.sqrt((100**2 + 0 + 100**2) / 3))  # population std
    assert m["mean_tpot_ms"] == pytest.approx(20.0)
    assert m["mean_itl_ms"] == pytest.approx(20.0)  # pooled gaps 10, 30, 20
    assert m["p50_itl_ms"] == pytest.approx(20.0)
    assert m["p90_itl_ms"] == pytest.approx(28.0)  # sorted 10, 20, 30: rank 1.8
    assert m["mean_e2el_ms"] == pytest.approx((140 + 220 + 300) / 3)
    assert m["p99_e2el_ms"] == pytest.approx(220 + (300 - 220) * 0.98)


def test_percentile_linear_interpolation() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 99) == 0.0


def test_all_failed_gives_zeros_not_errors() -> None:
    m = compute_metrics([rec(1, [1], 2, ok=False)], 1.0)
    assert m["completed"] == 0 and m["failed"] == 1 and m["mean_ttft_ms"] == 0.0 and m["output_throughput"] == 0


def test_nonpositive_duration_rejected() -> None:
    with pytest.raises(ValueError, match="duration"):
        compute_metrics([], 0.0)


def test_fractional_percentile_key() -> None:
    assert "p99.9_ttft_ms" in summarize("ttft", [0.1, 0.2], (99.9,))


@settings(deadline=None, max_examples=50)
@given(st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), min_size=1, max_size=50),
       st.floats(min_value=0, max_value=100))
def test_matches_numpy(values: list[float], p: float) -> None:
    np = pytest.importorskip("numpy")
    assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), rel=1e-9, abs=1e-9)
    assert mean(values) == pytest.approx(float(np.mean(values)), rel=1e-9, abs=1e-9)
    assert std(values) == pytest.approx(float(np.std(values)), rel=1e-6, abs=1e-6)
