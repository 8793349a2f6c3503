"""The workload in tokens, the bench-compatible result keys, peaks and goodput, the load section's ranges."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_p2p.errors import ConfigError, ServerError
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.loadgen import ClientPlanner, make_spec, process_cap
from pytest_p2p.serve.loadspec import LoadSpec
from pytest_p2p.serve.metrics import RequestRecord, goodput, peaks
from pytest_p2p.serve.result import SATURATED_CPU, ClientStats, LoadResult, bench_keys
from pytest_p2p.serve.workload import WordTokenizer, arrival_offsets, load_tokenizer, token_prompts


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tokenizers")
    from pytest_p2p.serve.tinymodel import write_tiny_model

    d = tmp_path_factory.mktemp("tiny")
    write_tiny_model(d)
    return d


def test_prompts_have_exactly_the_asked_tokens_with_a_real_bpe(model_dir: Path) -> None:
    tok = load_tokenizer(str(model_dir))
    prompts = token_prompts(tok, 40, 128, seed=3)
    assert [len(tok.encode(p)) for p in prompts] == [128] * 40
    assert len(set(prompts)) == 40 and prompts == token_prompts(tok, 40, 128, seed=3)  # same for every arm
    assert token_prompts(tok, 40, 128, seed=4) != prompts


def test_unknown_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ServerError, match="cannot read"):
        load_tokenizer(str(tmp_path))


def test_word_tokenizer_prompts_for_the_standin() -> None:
    tok = WordTokenizer()
    assert all(len(p.split()) == 9 for p in token_prompts(tok, 5, 9, seed=1))


def test_poisson_arrivals_are_seeded_with_the_asked_mean_rate() -> None:
    a = arrival_offsets(4000, 20.0, 1.0, seed=5)
    assert a == arrival_offsets(4000, 20.0, 1.0, seed=5) and a[0] > 0.0 and a == sorted(a)
    assert a[-1] == pytest.approx(4000 / 20.0, rel=1e-12)  # bench rescales: the last send at exactly N / rate
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    cv = math.sqrt(sum((g - a[-1] / len(gaps)) ** 2 for g in gaps) / len(gaps)) / (a[-1] / len(gaps))
    assert cv == pytest.approx(1.0, abs=0.1)  # exponential gaps (burstiness 1)
    assert arrival_offsets(3, math.inf, 1.0, seed=0) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("seed", range(5))
def test_the_rate_is_the_asked_one_for_every_seed(seed: int) -> None:
    """Issue 26: N = 64 at 8 req/s gave 6.6-9.8 req/s over seeds; bench's rescaling makes it 8 for each."""
    assert 64 / arrival_offsets(64, 8.0, 1.0, seed)[-1] == pytest.approx(8.0, rel=1e-12)


def test_arrivals_match_bench_schedules_recorded_from_its_get_request() -> None:
    """The fixture holds bench's draws (np.random.seed, one gamma per request, running sum, rescale)."""
    fixture = json.loads((Path(__file__).parent.parent / "benchmarks" / "results"
                          / "arrivals_bench_0.24.json").read_text())
    for key, ref in fixture["cases"].items():
        n, rate, burst, seed = key.split("/")
        ours = arrival_offsets(int(n), float(rate), float(burst), int(seed))
        assert max(abs(a - b) for a, b in zip(ours, ref, strict=True)) <= 1e-6, key


def _rec(start: float, ttft: float, itl: list[float], tokens: int, ok: bool = True) -> RequestRecord:
    return RequestRecord(success=ok, output_tokens=tokens, ttft=ttft, itl=itl, latency=ttft + sum(itl),
                         start_time=start, error="" if ok else "x")


def test_peaks_and_goodput_by_bench_rules() -> None:
    recs = [_rec(0.0, 0.1, [0.2] * 9, 10), _rec(0.5, 0.1, [0.05] * 4, 5), _rec(0.2, 0.0, [], 0, ok=False)]
    # tokens at 0.1..1.9 (first) and 0.6..0.8 (second): bucket 0 holds 5 + 5
    assert peaks(recs) == (10.0, 2)
    assert goodput(recs, 2.0, {"ttft": 150}) == 1.0
    assert goodput(recs, 2.0, {"tpot": 100}) == 0.5  # the first request's TPOT is 200 ms
    with pytest.raises(ValueError, match="goodput SLOs"):
        goodput(recs, 2.0, {"itl": 1})


def _result(**kw: object) -> LoadResult:
    base: dict[str, object] = dict(
        model_id="m", tokenizer_id="t", endpoint="completions", num_prompts=1, input_len=4, output_len=2, seed=0,
        warmup=0, max_concurrency=1, request_rate=math.inf, burstiness=1.0, transport="raw", duration=1.0,
        completed=1, failed=0, total_input_tokens=4, total_output_tokens=2, server_input_tokens=5,
        request_throughput=1.0, request_goodput=None, output_throughput=2.0, total_token_throughput=6.0,
        max_output_tokens_per_s=2.0, max_concurrent_requests=1,
        latency_stats={f"{s}_{m}_ms": 1.0 for s in ("mean", "median", "std", "p99")
                       for m in ("ttft", "tpot", "itl", "e2el")},
        input_lens=[4], output_lens=[2], ttfts=[0.01], itls=[[0.001]], errors=[""], warmup_failed=0,
        goodput_slos_ms={}, clients=[ClientStats(0.1, 1.0, 0.2, 1)])
    base.update(kw)
    return LoadResult(**base)  # type: ignore[arg-type]


def test_result_has_every_bench_key_and_is_plain_json() -> None:
    r = _result()
    d = r.to_dict()
    assert bench_keys() <= set(d)
    assert d["request_rate"] == "inf" and d["request_goodput"] is None and d["itls"] == [[0.001]]
    assert d["client_saturated"] is False and d["client_saturation"] == ""
    json.loads(json.dumps(d, allow_nan=False))
    r["arm"] = "p2p_on"
    assert r["arm"] == "p2p_on" and r.to_dict()["arm"] == "p2p_on" and r.metric("output_throughput") == 2.0
    with pytest.raises(KeyError, match="numeric"):
        r.metric("model_id")


def test_a_busy_or_late_client_is_flagged_saturated() -> None:
    busy = _result(clients=[ClientStats(0.1, 1.0, 0.2, 1), ClientStats(SATURATED_CPU, 1.0, 0.2, 1)])
    assert busy.client_saturated and "busy 90%" in busy.client_saturation
    late = _result(clients=[ClientStats(0.1, 1.0, 25.0, 1)])
    assert late["client_saturated"] is True and "late by 25.0 ms" in str(late["client_saturation"])


def test_a_run_that_completed_nothing_is_never_late() -> None:
    """No chunk to date: re-running it with more processes would only send a failing endpoint every request twice."""
    refused = _result(completed=0, failed=4, errors=["HTTP 429: rate limited"] * 4,
                      clients=[ClientStats(1.0, 1.0, 0.2, 4), ClientStats(1.0, 1.0, 0.2, 0)])
    assert refused.client_saturated and refused.client_lateness == ""
    assert _result(clients=[ClientStats(1.0, 1.0, 0.2, 1)]).client_lateness != ""  # one completed: still judged


def test_a_busy_or_lagging_client_is_late_but_only_over_a_window_long_enough_to_tell() -> None:
    assert _result().client_lateness == "" and _result().to_dict()["client_reshards"] == []
    busy = _result(clients=[ClientStats(0.75, 1.0, 0.2, 1), ClientStats(0.1, 1.0, 0.2, 1)])
    assert busy.client_lateness == "2 client process(es): busiest 75% of the window (limit 70%)"
    assert not busy.client_saturated  # kept: late is not saturated
    lag = _result(clients=[ClientStats(0.1, 1.0, 1.5, 1)])
    assert "event loop late by 1.50 ms at p99 (goal 1 ms)" in lag.client_lateness
    short = _result(duration=0.05, clients=[ClientStats(0.04, 0.05, 1.5, 1)])  # a few ms of parsing: busy 80 %
    assert short.client_lateness == "" and not short.client_saturated
    saturated = _result(clients=[ClientStats(0.95, 1.0, 0.2, 1)])
    assert saturated.client_lateness == saturated.client_saturation != ""


def test_with_kernel_stamps_a_loop_may_be_late_by_up_to_half_the_median_gap() -> None:
    """A kernel-stamped chunk is late only when the loop missed a whole gap of its stream (serve/stamped.py)."""
    stats = {f"{s}_{m}_ms": 1.0 for s in ("mean", "median", "std", "p99") for m in ("ttft", "tpot", "itl", "e2el")}
    stats["median_itl_ms"] = 5.0

    def run(lag_ms: float, stamps: str) -> LoadResult:
        return _result(latency_stats=stats, clients=[ClientStats(0.1, 1.0, lag_ms, 1, stamps=stamps)])

    assert run(1.5, "event loop").client_lateness != ""  # dated by the loop: 1 ms is the limit
    assert run(1.5, "kernel").client_lateness == "" and run(1.5, "kernel").timely_lag_ms == 2.5
    assert "late by 3.00 ms at p99 (goal 2.5 ms)" in run(3.0, "kernel").client_lateness
    fast = dict(stats, median_itl_ms=0.4)  # a gap shorter than 2 ms: never below the loop-stamp limit
    assert _result(latency_stats=fast, clients=[ClientStats(0.1, 1.0, 1.5, 1, stamps="kernel")]).client_lateness
    mixed = _result(latency_stats=stats, clients=[ClientStats(0.1, 1.0, 1.5, 1, stamps="kernel"),
                                                  ClientStats(0.1, 1.0, 0.2, 1)])
    assert mixed.client_timestamps == "event loop" and mixed.client_lateness != ""


def test_spec_range_checks_name_the_field() -> None:
    for bad, field in ((dict(concurrency=0), "concurrency"), (dict(num_prompts=10**30), "num_prompts"),
                       (dict(transport="carrier-pigeon"), "transport"), (dict(request_timeout_s=1e308),
                                                                          "request_timeout_s"),
                       (dict(output_len=True), "output_len"), (dict(request_rate=-1.0), "request_rate")):
        with pytest.raises(ValueError, match=field):
            make_spec(**{"concurrency": 1, "num_prompts": 1, "input_len": 1, "output_len": 1, **bad}).check()
    with pytest.raises(TypeError, match="unknown option"):
        make_spec(concurency=3)
    LoadSpec(concurrency=3, num_prompts=3, input_len=3, output_len=3).check()


def test_the_process_cap_is_half_the_idle_cores_and_one_a_stream() -> None:
    import os

    from pytest_p2p.serve.loadgen import free_cores

    assert process_cap(1, cores=16) == 1 and process_cap(64, cores=16) == 8 and process_cap(3, cores=16) == 3
    assert process_cap(256, cores=2) == 1 and process_cap(256, cores=5.5) == 2 and process_cap(256, cores=0.0) == 1
    assert 0.0 <= free_cores(0.02) <= len(os.sched_getaffinity(0)) + 0.01


def test_the_planner_starts_on_one_process_and_doubles_only_after_a_late_run() -> None:
    plan, work, other = ClientPlanner(), ("m", 64), ("m", 256)
    assert plan.start(work, cap=8) == 1  # as bench: one event loop until a run says otherwise
    assert plan.after(work, 1, late=False, cap=8) is None and plan.start(work, cap=8) == 1
    assert plan.after(work, 1, late=True, cap=8) == 2
    assert plan.after(work, 2, late=True, cap=8) == 4 and plan.start(work, cap=8) == 4  # remembered
    assert plan.after(work, 4, late=False, cap=8) is None and plan.start(work, cap=8) == 4
    assert plan.start(work, cap=2) == 2  # fewer idle cores now: the cap wins
    assert plan.after(work, 8, late=True, cap=8) is None  # at the cap: keep the run, late as it is
    assert plan.start(other, cap=8) == 1  # another workload learns apart


@pytest.mark.parametrize(("load", "where"), [
    ({"num_prompts": 10**30}, "load.num_prompts"), ({"input_len": 0}, "load.input_len"),
    ({"client_processes": 1e29}, "load.client_processes"), ({"transport": "tcp"}, "load.transport"),
    ({"request_rate": -3}, "load.request_rate"), ({"warmup": "many"}, "load.warmup"),
])
def test_load_section_numbers_are_range_checked(load: dict[str, object], where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        parse_server({"model": "m", "load": load}, "rig.yaml")


@pytest.mark.parametrize("key", ["startup_timeout_s", "request_timeout_s", "teardown_timeout_s"])
def test_server_timeouts_are_range_checked(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_server({"model": "m", key: 1e308}, "rig.yaml")


def test_load_section_new_keys() -> None:
    c = parse_server({"model": "m", "load": {"transport": "openai", "tokenizer": "/models/x", "request_rate": 2.5,
                                             "client_processes": 0}}, "rig.yaml")
    assert (c.load.transport, c.load.tokenizer, c.load.request_rate, c.load.client_processes) == \
        ("openai", "/models/x", 2.5, 0)
    assert json.loads(json.dumps(parse_server({"model": "m"}, "r").to_dict()))["load"]["request_rate"] == "inf"
