"""Load generator against the stand-in: counts from server usage, warm-up excluded, failures counted."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.loadgen import run_load, run_load_async
from pytest_p2p.serve.metrics import RequestRecord
from pytest_p2p.serve.server import RunningServer, launch
from pytest_p2p.serve.workload import WordTokenizer, token_prompts


def _launch(tmp: Path, arm: str = "p2p_on", args: dict[str, object] | None = None) -> object:
    c = parse_server({"command": ["python", "-m", "pytest_p2p.serve.standin"], "model": "tiny",
                      "args": {"ttft-ms": 2, "tpot-ms": 0.5, "jitter": 0, **(args or {})}, "startup_timeout_s": 20,
                      "teardown_timeout_s": 2}, "rig.yaml")
    return launch(c, PRESETS[arm], (0, 1), None, tmp / "server.log")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with _launch(tmp_path_factory.mktemp("lg")) as s:  # type: ignore[attr-defined]
        yield s


def _served(srv: RunningServer) -> int:
    text = urllib.request.urlopen(srv.base_url + "/metrics", timeout=5).read().decode()
    return int(next(ln for ln in text.splitlines() if ln.startswith("vllm:request_success_total")).split()[-1])


def test_prompts_deterministic_distinct_and_sized() -> None:
    tok = WordTokenizer()
    a, b = token_prompts(tok, 5, 12, seed=7), token_prompts(tok, 5, 12, seed=7)
    assert a == b and len(set(a)) == 5 and all(len(tok.encode(p)) == 12 for p in a)
    assert token_prompts(tok, 5, 12, seed=8) != a


def test_closed_loop_counts_from_usage_and_excludes_warmup(srv: RunningServer) -> None:
    before = _served(srv)
    records: list[RequestRecord] = []
    r = run_load(srv.base_url, srv.api_key, srv.model, concurrency=3, num_prompts=7, input_len=9, output_len=5,
                 warmup=2, seed=1, records_out=records, keep_chunk_times=True)
    assert _served(srv) - before == 9  # 2 warm-up + 7 measured reached the server
    assert r["completed"] == 7 and r["failed"] == 0 and r["warmup_failed"] == 0
    assert r["total_input_tokens"] == 63 and r["total_output_tokens"] == 35  # the server's usage counts
    assert r["max_concurrency"] == 3 and r["output_lens"] == [5] * 7
    assert all(len(rec.itl) == 4 and len(rec.chunk_times or []) == 5 for rec in records)
    assert r["mean_ttft_ms"] >= 2.0 and r["mean_e2el_ms"] >= r["mean_ttft_ms"]
    rec = records[0]
    assert rec.latency == pytest.approx(rec.ttft + sum(rec.itl))
    assert r["output_throughput"] == pytest.approx(35 / r["duration"])
    json.dumps(r)  # the result is plain JSON


def test_chat_endpoint(srv: RunningServer) -> None:
    r = run_load(srv.base_url, srv.api_key, srv.model, concurrency=2, num_prompts=3, input_len=4, output_len=3,
                 warmup=0, endpoint="chat")
    assert r["completed"] == 3 and r["total_output_tokens"] == 9 and r["endpoint"] == "chat"


def test_bad_api_key_is_counted_not_raised(srv: RunningServer) -> None:
    r = run_load(srv.base_url, "wrong", srv.model, concurrency=2, num_prompts=2, input_len=2, output_len=2,
                 warmup=0)
    assert r["completed"] == 0 and r["failed"] == 2 and r["error_summary"][0]["error"].startswith("HTTP 401")


def test_refused_connection_fails_fast() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_load(f"http://127.0.0.1:{port}", "k", "m", concurrency=2, num_prompts=3, input_len=2, output_len=2,
                 warmup=1, request_timeout_s=5)
    assert r["failed"] == 3 and r["warmup_failed"] == 1 and "connection error" in r["error_summary"][0]["error"]
    assert r["duration"] < 5


def test_works_inside_a_running_event_loop(srv: RunningServer) -> None:
    async def inner() -> object:
        return run_load(srv.base_url, srv.api_key, srv.model, concurrency=1, num_prompts=1, input_len=2,
                        output_len=2, warmup=0)

    assert asyncio.run(inner())["completed"] == 1


def test_rejects_nonsense_shape(srv: RunningServer) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        asyncio.run(run_load_async(srv.base_url, srv.api_key, srv.model, concurrency=0, num_prompts=1,
                                   input_len=1, output_len=1))
    with pytest.raises(ValueError, match="endpoint"):
        run_load(srv.base_url, srv.api_key, srv.model, concurrency=1, num_prompts=1, input_len=1, output_len=1,
                 endpoint="embeddings")


def test_injected_slowdown_is_visible_in_tpot(tmp_path: Path) -> None:
    """The baseline tests inject a slower server with PYTEST_P2P_STANDIN_SLOWDOWN; the metrics must see it."""
    shape: dict[str, Any] = dict(concurrency=1, num_prompts=3, input_len=4, output_len=30, warmup=1)
    with _launch(tmp_path, args={"tpot-ms": 3}) as fast:  # type: ignore[attr-defined]
        base = run_load(fast.base_url, fast.api_key, fast.model, **shape)
    with _launch(tmp_path, args={"tpot-ms": 3, "slowdown": 3.0}) as slow:  # type: ignore[attr-defined]
        slowed = run_load(slow.base_url, slow.api_key, slow.model, **shape)
    assert slowed["mean_tpot_ms"] > 2.0 * base["mean_tpot_ms"]
    assert slowed["output_throughput"] < base["output_throughput"]


def test_sharded_over_client_processes_matches_single_loop(srv: RunningServer) -> None:
    records: list[RequestRecord] = []
    r = run_load(srv.base_url, srv.api_key, srv.model, concurrency=4, num_prompts=6, input_len=3, output_len=4,
                 warmup=1, client_processes=2, records_out=records, keep_chunk_times=True)
    assert r["client_processes"] == 2 and r["completed"] == 6 and r["total_output_tokens"] == 24
    assert r["total_input_tokens"] == 18 and r["max_concurrency"] == 4 and r["warmup_failed"] == 0
    starts = sorted(rec.start_time for rec in records)
    assert r["duration"] >= max(rec.start_time + rec.latency for rec in records) - starts[0] - 1e-6


def test_sharded_run_reports_failures_too() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_load(f"http://127.0.0.1:{port}", "k", "m", concurrency=2, num_prompts=2, input_len=2, output_len=2,
                 warmup=0, client_processes=2, request_timeout_s=5)
    assert r["failed"] == 2 and "connection error" in r["error_summary"][0]["error"]


def test_a_failing_client_process_is_a_server_error_not_a_traceback() -> None:
    """A sharded run whose client process dies raises the user-facing ServerError (the campaign reports those)."""
    from pytest_p2p.errors import ServerError

    with pytest.raises(ServerError, match="client process failed: ServerError: raw transport: base URL"):
        run_load("ftp://127.0.0.1:9", "key", "m", concurrency=2, num_prompts=2, input_len=1, output_len=1,
                 warmup=0, client_processes=2, tokenizer="standin-words")
    with pytest.raises(ServerError, match="base_url must be a string"):
        run_load(12345, "key", "m", concurrency=1, num_prompts=1, input_len=1, output_len=1)  # type: ignore[arg-type]


def test_closed_loop_client_processes_draw_from_one_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream that is free takes the run's next request, whichever process it lives in.

    With fixed shares a process whose streams were slower (or had one request more than
    its streams divide) ran extra waves alone; here a slow and a fast client share
    20 requests through one counter and the fast one takes nearly all of them.
    """
    import multiprocessing

    from pytest_p2p.serve import loadclients
    from pytest_p2p.serve.loadgen import make_spec

    async def fake_request(transport: object, job: loadclients.Job, k: int, rid: str,
                           keep: bool) -> RequestRecord:
        await asyncio.sleep(0.5 if job.cpu == 1 else 0)  # job "1" is the slow client
        rec = RequestRecord(prompt_len=1)
        rec.success, rec.output_tokens, rec.server_prompt_tokens = True, 1, job.cpu or 0
        return rec

    class NoTransport:
        stamps = "event loop"
        read_lags: list[float] = []  # noqa: RUF012

        async def open(self, n: int) -> None:
            return None

        async def close(self) -> None:
            return None

    monkeypatch.setattr(loadclients, "_request", fake_request)
    monkeypatch.setattr(loadclients, "make_transport", lambda *a, **k: NoTransport())
    spec = make_spec(concurrency=2, num_prompts=20, input_len=1, output_len=1, warmup=0, pin=False)
    ticket = multiprocessing.get_context("spawn").Value("q", 0)
    take = loadclients._taker(ticket, spec.num_prompts)
    jobs = [loadclients.Job("http://x", "k", "m", spec, ("p",) * 20, (0.0,) * 20, (), tuple(range(w, 20, 2)), 1, w + 1)
            for w in range(2)]

    async def both() -> list[loadclients.Shard]:
        return list(await asyncio.gather(*(loadclients.drive(j, take=take) for j in jobs)))

    slow, fast = asyncio.run(both())
    assert sorted([*slow.records, *fast.records]) == list(range(20))  # every id exactly once
    assert len(slow.records) == 1 and len(fast.records) == 19
    assert slow.stats.requests + fast.stats.requests == 20 and ticket.value == 20
    assert take() is None


def test_a_late_run_is_re_run_with_more_client_processes_and_says_why(srv: RunningServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner's choice: one process first; a late run is replaced, not averaged in, and the reason kept."""
    from pytest_p2p.serve import loadgen, result
    from pytest_p2p.serve.loadclients import ClientPlanner
    from pytest_p2p.serve.loadgen import generate_load, make_spec

    monkeypatch.setattr(result, "TIMELY_LAG_MS", -1.0)  # every run is late ...
    monkeypatch.setattr(result, "TIMELY_KERNEL_GAP_FRACTION", -1.0)  # ... also where the kernel dated its chunks
    monkeypatch.setattr(result, "TIMELY_MIN_WINDOW_S", 0.0)  # however short
    monkeypatch.setattr(loadgen, "process_cap", lambda c, cores=None: 2)  # a 2-core CI box has a cap of 1
    plan = ClientPlanner()
    spec = make_spec(concurrency=2, num_prompts=6, input_len=4, output_len=3, warmup=1, seed=5,
                     tokenizer="standin-words")
    before = _served(srv)
    records: list[RequestRecord] = []
    r = generate_load(srv.base_url, srv.api_key, srv.model, spec, records_out=records, planner=plan)
    assert _served(srv) - before == 2 * 7  # the late run and its replacement, warm-up included
    assert r.client_processes == 2 and r.completed == 6 and r.seed == 5 + 7919  # fresh prompts for the re-run
    assert len(r.reshards) == 1 and r.reshards[0].startswith("1 client process(es): ")
    assert "event loop late by" in r.reshards[0]
    assert r.to_dict()["client_reshards"] == r.reshards and r.client_lateness  # still late at the cap: kept, said
    assert len(records) == 6 and all(rec.request_id.startswith("req1-") for rec in records)
    again = generate_load(srv.base_url, srv.api_key, srv.model, spec, planner=plan)
    assert again.client_processes == 2 and again.reshards == []  # the planner remembered the workload
    fixed = generate_load(srv.base_url, srv.api_key, srv.model, dataclasses.replace(spec, client_processes=1),
                          planner=plan)
    assert fixed.client_processes == 1 and fixed.reshards == []  # an explicit count is never changed
