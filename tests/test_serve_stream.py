"""The stream parser and the raw transport: every malformed stream is a counted failure with a reason."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server
from pytest_p2p.serve.loadgen import generate_load, make_spec, run_load
from pytest_p2p.serve.metrics import RequestRecord
from pytest_p2p.serve.server import RunningServer, launch
from pytest_p2p.serve.transport import RawTransport, StreamError, StreamParser


def _sse(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)


def _parse(data: bytes, splits: list[int] | None = None, chat: bool = False) -> RequestRecord:
    rec = RequestRecord(start_time=0.0)
    p = StreamParser(rec, chat=chat)
    cuts = sorted({0, len(data), *(s % (len(data) + 1) for s in splits or [])})
    for i, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        p.feed(data[a:b], float(i + 1))
    p.finish()
    return rec


TOKENS = [{"choices": [{"index": 0, "text": " a"}]}] * 3
USAGE = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def test_good_stream_counts_server_usage() -> None:
    rec = _parse(_sse(*TOKENS, USAGE, b"[DONE]"), splits=[10, 30, 200])
    assert rec.output_tokens == 3 and rec.server_prompt_tokens == 5 and len(rec.itl) == 2  # 3 chunks, 2 gaps


@pytest.mark.parametrize(("usage", "reason"), [
    ({"prompt_tokens": 5, "completion_tokens": "many"}, "completion_tokens is 'many'"),
    ([1, 2], "is not an object"),
    ({"prompt_tokens": 5, "completion_tokens": -1}, "not a count"),
    ({"prompt_tokens": 5, "completion_tokens": True}, "not a count"),
    ({"prompt_tokens": "x", "completion_tokens": 3}, "prompt_tokens"),
])
def test_malformed_usage_is_a_stream_error(usage: Any, reason: str) -> None:
    with pytest.raises(StreamError, match=reason):
        _parse(_sse(*TOKENS, {"choices": [], "usage": usage}, b"[DONE]"))


@pytest.mark.parametrize("usage", [None, {"prompt_tokens": 5}])
def test_a_stream_without_a_usage_count_keeps_its_text_for_the_tokenizer(usage: Any) -> None:
    """bench re-tokenises the text when the server says nothing; the parser keeps it (was: 100 % failed)."""
    events = [*TOKENS, {"choices": [], "usage": usage}] if usage else TOKENS
    rec = _parse(_sse(*events, b"[DONE]"), splits=[7, 50])
    assert rec.output_tokens == -1 and rec.generated_text == " a a a" and len(rec.itl) == 2


def test_chat_stream_without_usage_keeps_the_delta_text() -> None:
    chunks = [{"choices": [{"delta": {"role": "assistant"}}]}, {"choices": [{"delta": {"content": "hi"}}]},
              {"choices": [{"delta": {"content": " there"}}]}]
    rec = _parse(_sse(*chunks, b"[DONE]"), chat=True)
    assert rec.generated_text == "hi there" and rec.output_tokens == -1 and len(rec.itl) == 1


@pytest.mark.parametrize("eol", [b"\r\n", b"\r"])
@settings(deadline=None, max_examples=40)
@given(splits=st.lists(st.integers(0, 400), max_size=8))
def test_crlf_and_cr_line_ends_parse_like_lf(eol: bytes, splits: list[int]) -> None:
    """sse-starlette ends lines with CRLF (legal SSE): 100 % of requests failed before; cut anywhere, even in a CRLF."""
    lf = _sse(*TOKENS, USAGE, b"[DONE]")
    rec = _parse(lf.replace(b"\n", eol), splits)
    ref = _parse(lf)
    assert (rec.output_tokens, rec.server_prompt_tokens, len(rec.itl)) == (3, 5, 2) == (
        ref.output_tokens, ref.server_prompt_tokens, len(ref.itl))


def test_sse_comments_fields_and_multiline_data_follow_the_spec() -> None:
    data = (b": ping\n\nevent: message\nid: 1\ndata: {\"choices\":\n"
            b"data: [{\"text\": \"x\"}]}\n\n" + _sse(USAGE) + b"data: [DONE]")  # no blank line after the last
    rec = _parse(data)
    assert rec.output_tokens == 3 and rec.ttft == 1.0


def test_chunks_read_together_are_counted_as_merged() -> None:
    rec = RequestRecord(start_time=0.0)
    p = StreamParser(rec, chat=False)
    p.feed(_sse(TOKENS[0]), 1.0)
    p.feed(_sse(TOKENS[0], TOKENS[0]), 2.0)  # the loop missed a gap: the first of these two carries 2.0
    p.feed(_sse(USAGE, b"[DONE]"), 3.0)
    p.finish()
    assert p.merged == 1 and p.events == 3


@pytest.mark.parametrize(("events", "reason"), [
    ([b"{not json"], "not JSON"),
    ([[1, 2]], "not an object"),
    ([{"choices": "abc"}], "choices is"),
    ([{"error": {"message": "boom"}}], "error event in stream: .*boom"),
    (TOKENS + [USAGE], "cut short"),
    ([USAGE, b"[DONE]"], "no content chunk"),
])
def test_malformed_stream_is_a_stream_error(events: list[object], reason: str) -> None:
    with pytest.raises(StreamError, match=reason):
        _parse(_sse(*events))


@settings(deadline=None, max_examples=60)
@given(st.binary(max_size=300), st.lists(st.integers(0, 400), max_size=6))
def test_parser_never_raises_anything_but_stream_error(junk: bytes, splits: list[int]) -> None:
    with contextlib.suppress(StreamError):  # anything else (ValueError, AttributeError, ...) fails the test
        _parse(b"data: " + junk + b"\n\n" + _sse(*TOKENS), splits)


# ----------------------------------------------------------------------------- through a server


def _cfg(fault: str = "", after: int = 0) -> Any:
    args: dict[str, Any] = {"ttft-ms": 1, "tpot-ms": 0.3, "jitter": 0}
    if fault:
        args.update({"fault": fault, "fault-after": after})
    return parse_server({"command": ["python", "-m", "pytest_p2p.serve.standin"], "model": "tiny", "args": args,
                         "startup_timeout_s": 20, "teardown_timeout_s": 2}, "rig.yaml")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with launch(_cfg(), PRESETS["p2p_on"], (0, 1), None, tmp_path_factory.mktemp("st") / "server.log") as s:
        yield s


@pytest.mark.parametrize("arg", ["many", "list"])
def test_server_with_malformed_usage_gives_failed_requests_not_exceptions(arg: str, tmp_path: Path) -> None:
    with launch(_cfg(f"bad-usage={arg}", after=1), PRESETS["p2p_on"], (0, 1), None, tmp_path / "s.log") as s:
        for transport in ("raw", "openai"):
            r = run_load(s.base_url, s.api_key, s.model, concurrency=2, num_prompts=3, input_len=4, output_len=3,
                         warmup=0, transport=transport)
            assert r["completed"] == 0 and r["failed"] == 3, transport
            assert "malformed usage" in str(r["error_summary"]), r["error_summary"]


@pytest.mark.parametrize("transport", ["raw", "openai"])
def test_transports_agree_on_counts(srv: RunningServer, transport: str, kernel_rx_stamps: bool) -> None:
    records: list[RequestRecord] = []
    res = generate_load(srv.base_url, srv.api_key, srv.model,
                        make_spec(concurrency=3, num_prompts=6, input_len=7, output_len=40, warmup=1,
                                  transport=transport, keep_chunk_times=True), records)
    assert res.completed == 6 and res.total_output_tokens == 240 and res.total_input_tokens == 42
    assert res.server_input_tokens == 42 and res.transport == transport
    assert all(len(r.chunk_times or []) == 40 and len(r.itl) == 39 for r in records)
    kernel = transport == "raw" and kernel_rx_stamps  # the SDK reads the socket itself
    assert res.client_timestamps == ("kernel" if kernel else "event loop")
    # a chunk is never dated before its request was sent, nor two of one stream out of order
    assert all(r.start_time < (r.chunk_times or [0.0])[0] for r in records)
    assert all(a <= b for r in records for a, b in itertools.pairwise(r.chunk_times or []))


def test_raw_transport_reuses_its_connections(srv: RunningServer) -> None:
    async def go() -> int:
        t = RawTransport(srv.base_url, srv.api_key)
        for i in range(3):
            rec = RequestRecord(start_time=0.0)
            p = StreamParser(rec, chat=False)
            await t.stream("completions", {"model": srv.model, "prompt": "a b", "max_tokens": 300, "stream": True,
                                           "stream_options": {"include_usage": True}}, f"r{i}", p.feed)
            p.finish()
            assert rec.output_tokens == 300
        n = len(t.idle)
        await t.close()
        return n

    assert asyncio.run(go()) == 1  # one keep-alive connection carried all three requests


def test_raw_transport_opens_its_connections_before_the_window(srv: RunningServer) -> None:
    async def go() -> tuple[int, int]:
        t = RawTransport(srv.base_url, srv.api_key)
        await t.open(4)
        opened = len(t.idle)
        await t.open(2)  # already enough idle: nothing more
        rec = RequestRecord(start_time=0.0)
        p = StreamParser(rec, chat=False)
        await t.stream("completions", {"model": srv.model, "prompt": "a", "max_tokens": 3, "stream": True,
                                       "stream_options": {"include_usage": True}}, "r", p.feed)
        p.finish()
        n = len(t.idle)
        await t.close()
        return opened, n

    assert asyncio.run(go()) == (4, 4)  # the request took an open connection and gave it back


_SSE = (b'data: {"choices":[{"text":"x"}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\ndata: [DONE]\n\n')


async def _one_shot_server(answer: bool) -> tuple[asyncio.AbstractServer, int, list[int]]:
    """Answers one request per connection (or none), then closes it without saying so: an expired keep-alive."""
    seen: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        seen.append(1)
        if answer:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + f"{len(_SSE):x}\r\n".encode() + _SSE + b"\r\n0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


@pytest.mark.parametrize("noticed", [True, False])
def test_a_request_on_an_expired_keep_alive_connection_is_sent_once_more_on_a_fresh_one(
        noticed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Noticed: the idle connection's end was read before its next use, so it is discarded. Not noticed (the
    server closed it just as the request went out): the request meets the closed connection and is re-sent."""
    if not noticed:
        from pytest_p2p.serve.stamped import StampedConnection

        monkeypatch.setattr(StampedConnection, "usable", property(lambda self: True))

    async def go() -> tuple[list[int], int]:
        server, port, seen = await _one_shot_server(answer=True)
        t = RawTransport(f"http://127.0.0.1:{port}", "k")
        outs = []
        for i in range(3):
            rec = RequestRecord(start_time=0.0)
            p = StreamParser(rec, chat=False)
            await t.stream("completions", {"prompt": "a"}, f"r{i}", p.feed)
            await asyncio.sleep(0.05)  # the server has closed the kept connection by now
            p.finish()
            outs.append(rec.output_tokens)
        await t.close()
        server.close()
        return outs, len(seen)

    outs, served = asyncio.run(go())
    assert outs == [1, 1, 1] and served == 3  # each stale connection was replaced; nothing sent twice to the server


def test_a_fresh_connection_closed_unanswered_is_a_failure_not_a_retry() -> None:
    async def go() -> tuple[str, int]:
        server, port, seen = await _one_shot_server(answer=False)
        t = RawTransport(f"http://127.0.0.1:{port}", "k")
        try:
            await t.stream("completions", {"prompt": "a"}, "r", lambda data, now: None)
        except ConnectionError as exc:
            return str(exc), len(seen)
        finally:
            await t.close()
            server.close()
        return "", len(seen)

    assert asyncio.run(go()) == ("server closed the connection before answering", 1)


@pytest.mark.parametrize("url", ["ftp://example.invalid", "http://:80", "http://h:99999"])
def test_raw_transport_refuses_what_is_not_an_http_url(url: str) -> None:
    from pytest_p2p.errors import ServerError

    with pytest.raises(ServerError, match="raw transport: base URL"):
        RawTransport(url, "k")
