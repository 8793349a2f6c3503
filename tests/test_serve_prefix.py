"""vLLM's prefix-cache counters: read from ``/metrics`` around a window (serve.prefix), and the stand-in keeps them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.loadgen import run_load
from pytest_p2p.serve.prefix import PrefixCounts, parse_counts, prefix_counts
from pytest_p2p.serve.server import RunningServer, launch

#: the counters as prometheus_client writes vLLM 0.24's (names from vllm/v1/metrics/loggers.py: Counter
#: "vllm:prefix_cache_queries" gives _total and _created samples); written here, not captured from a GPU run
VLLM_PAGE = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="/tmp/m7b"} 75264.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="/tmp/m7b"} 1.7957388e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="/tmp/m7b"} 21504.0
vllm:external_prefix_cache_hits_total{engine="0",model_name="/tmp/m7b"} 99.0
"""


def test_the_counters_are_read_from_vllms_page_and_nothing_else() -> None:
    assert parse_counts(VLLM_PAGE) == PrefixCounts(75264.0, 21504.0)
    two_engines = VLLM_PAGE + VLLM_PAGE.replace('engine="0"', 'engine="1"')
    assert parse_counts(two_engines) == PrefixCounts(2 * 75264.0, 2 * 21504.0)
    assert parse_counts("vllm:prefix_cache_queries_total 10 1700000000000\nvllm:prefix_cache_hits_total 4\n") == \
        PrefixCounts(10.0, 4.0)  # no labels, and a timestamp after the value


@pytest.mark.parametrize("page", ["", "vllm:prefix_cache_queries_total{} 5\n",  # a counter missing
                                  "vllm:prefix_cache_queries_total 5\nvllm:prefix_cache_hits_total NaN\n",
                                  "vllm:prefix_cache_queries_total 5\nvllm:prefix_cache_hits_total\n"])
def test_a_page_without_both_counters_is_unknown(page: str) -> None:
    assert parse_counts(page) is None


def test_a_window_is_the_difference_and_a_restart_is_unknown() -> None:
    before, after = PrefixCounts(1000.0, 100.0), PrefixCounts(3000.0, 600.0)
    assert after.since(before) == (2000.0, 0.25)
    assert before.since(after) is None and after.since(after) is None


def test_an_endpoint_without_metrics_is_unknown() -> None:
    assert prefix_counts("http://127.0.0.1:9", "key") is None  # nothing listens on the discard port


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    c = parse_server({"command": ["python", "-m", "pytest_p2p.serve.standin"], "model": "tiny",
                      "args": {"ttft-ms": 1, "tpot-ms": 0.2, "jitter": 0}, "startup_timeout_s": 20,
                      "teardown_timeout_s": 2}, "rig.yaml")
    with launch(c, PRESETS["p2p_on"], (0, 1), None, Path(tmp_path_factory.mktemp("px")) / "server.log") as s:
        yield s


def test_the_stand_in_finds_a_prompt_it_served_but_its_last_token(srv: RunningServer) -> None:
    def window(seed: int, n: int) -> tuple[float, float] | None:
        before = prefix_counts(srv.base_url, srv.api_key)
        run_load(srv.base_url, srv.api_key, srv.model, concurrency=2, num_prompts=n, input_len=8, output_len=2,
                 warmup=0, seed=seed, tokenizer="standin-words")
        after = prefix_counts(srv.base_url, srv.api_key)
        assert before is not None and after is not None
        return after.since(before)

    assert window(11, 4) == (32.0, 0.0)
    assert window(11, 8) == (64.0, 4 * 7 / 64)  # the first 4 prompts of seed 11 again: 7 of their 8 tokens each
    assert window(12, 4) == (32.0, 0.0)


def test_a_request_the_stand_in_rejects_is_never_looked_up_in_its_prefix_cache(srv: RunningServer) -> None:
    """vLLM refuses a bad ``max_tokens`` with HTTP 400 before the scheduler sees the prompt, so the counters stay."""
    import json
    import urllib.error
    import urllib.request

    before = prefix_counts(srv.base_url, srv.api_key)
    req = urllib.request.Request(f"{srv.base_url}/v1/completions", method="POST",
                                 data=json.dumps({"model": srv.model, "prompt": "a b c", "max_tokens": -1}).encode(),
                                 headers={"Authorization": f"Bearer {srv.api_key}", "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    assert prefix_counts(srv.base_url, srv.api_key) == before
