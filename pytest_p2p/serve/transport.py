"""How a streamed completion reaches the load generator: three transports, one stream parser.

Why three: the client must not shape what it measures. ``benchmarks/loadgen_transports.py``
measures, per transport, the tokens/s one client core can ingest and how late its
timestamps are; docs/performance.md has the figures and the choice:

* ``raw`` (default) -- HTTP/1.1 over its own non-blocking sockets, one keep-alive
  connection per in-flight request, chunked decoding and SSE splitting on bytes. The least
  work per token, and each read is dated by the kernel's receive stamp
  (:mod:`pytest_p2p.serve.stamped`), so a busy loop does not make its chunks late.
* ``openai`` -- the ``openai`` SDK's ``with_streaming_response`` over its httpx client
  (``max_retries=0``, ``trust_env=False``): the API surface users know, slower per token.
* ``aiohttp`` -- the SDK over ``openai.DefaultAioHttpClient`` (``pip install
  'openai[aiohttp]'``), the HTTP stack ``vllm bench serve`` uses.

Every transport feeds raw body bytes with their arrival time into :class:`StreamParser`,
so all three apply the same rules (docs/metrics.md): a request succeeds only with a
content chunk, a well-formed usage report and ``data: [DONE]``. Anything else -- HTTP
errors, a cut stream, malformed JSON, ``usage.completion_tokens: "many"``, ``usage:
[1, 2]`` -- is a failed request with its reason, never an exception out of the run.
"""

from __future__ import annotations

import asyncio
import json
import time
import types
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ServerError
from .metrics import RequestRecord
from .stamped import StampedConnection

TRANSPORTS = ("raw", "openai", "aiohttp")
Payload = Mapping[str, object]
OnBytes = Callable[[bytes, float], None]


class StreamError(Exception):
    """A request that failed, with the one-line reason the result will show."""


def _count(usage: Mapping[str, object], key: str) -> int | None:
    value = usage.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StreamError(f"malformed usage in stream: {key} is {str(value)[:40]!r}, not a count")
    return value


@dataclass
class StreamParser:
    """Server-sent events of one completion -> a :class:`RequestRecord` (times from ``perf_counter``)."""

    rec: RequestRecord
    chat: bool
    keep_times: bool = False
    buf: bytes = b""
    last: float = 0.0
    first: bool = False
    done: bool = False
    usage: Mapping[str, object] | None = None
    times: list[float] = field(default_factory=list)

    def feed(self, data: bytes, now: float) -> None:
        """All events completed by one network read share its arrival time (as in vLLM's client)."""
        self.buf += data
        while True:
            cut = self.buf.find(b"\n\n")
            if cut < 0:
                return
            event, self.buf = self.buf[:cut], self.buf[cut + 2:]
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._event(line[5:].strip(), now)

    def _event(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            data = json.loads(payload)
        except ValueError:
            raise StreamError(f"malformed stream: event is not JSON: {payload[:80]!r}") from None
        if not isinstance(data, dict):
            raise StreamError(f"malformed stream: event is {type(data).__name__}, not an object")
        usage = data.get("usage")
        if usage is not None:
            if not isinstance(usage, dict):
                raise StreamError(f"malformed usage in stream: {str(usage)[:60]!r} is not an object")
            self.usage = usage
        choices = data.get("choices")
        if "error" in data and not choices:
            raise StreamError(f"error event in stream: {str(data['error'])[:200]}")
        if not choices:
            return
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise StreamError(f"malformed stream: choices is {str(choices)[:60]!r}")
        if self.chat:
            delta = choices[0].get("delta") or {}
            if not isinstance(delta, dict) or not (delta.get("content") or delta.get("reasoning_content")
                                                   or delta.get("reasoning")):
                return  # the role preamble carries no token
        rec = self.rec
        if not self.first:
            self.first = True
            rec.ttft = now - rec.start_time
        else:
            rec.itl.append(now - self.last)
        self.last = now
        if self.keep_times:
            self.times.append(now)

    def finish(self) -> None:
        """Judge the complete stream; raises :class:`StreamError` with the reason when it is not a success."""
        if not self.first:
            raise StreamError("stream carried no content chunk (cannot measure TTFT)")
        if not self.done:
            raise StreamError("stream cut short: ended before data: [DONE]")
        if self.usage is None:
            raise StreamError("no usage report in stream: server did not count completion tokens")
        out = _count(self.usage, "completion_tokens")
        if out is None:
            raise StreamError("no usage report in stream: server did not count completion tokens")
        self.rec.output_tokens = out
        self.rec.server_prompt_tokens = _count(self.usage, "prompt_tokens") or 0


class Transport(Protocol):
    name: str

    @property
    def stamps(self) -> str:
        """What dated the reads so far: ``"kernel"`` (the socket's receive stamp) or ``"event loop"``."""
        ...

    async def stream(self, path: str, payload: Payload, rid: str, on_bytes: OnBytes) -> None:
        """POST ``payload`` to ``/v1/<path>`` and hand every body read to ``on_bytes``; raise on failure."""
        ...

    async def open(self, n: int) -> None:
        """Have ``n`` connections ready before the measured window (its first requests pay no handshake)."""
        ...

    async def close(self) -> None: ...


def require_client() -> None:
    """A clear error, not a traceback, when the OpenAI client library is missing."""
    try:
        import openai  # noqa: F401
    except ImportError:
        raise ServerError("the load generator's 'openai' transports need the 'openai' package (a dependency "
                          "of pytest-p2p and of vLLM): pip install 'openai>=1.40'") from None


def http_module() -> types.ModuleType:
    """The httpx module the installed ``openai`` SDK is built on (``httpx`` or its fork ``httpx2``)."""
    import importlib

    import openai

    for cls in getattr(openai, "DefaultAsyncHttpxClient", type(None)).__mro__[1:]:
        if cls.__name__ == "AsyncClient":
            return importlib.import_module(cls.__module__.split(".")[0])
    import httpx

    return httpx



# ----------------------------------------------------------------------------- raw


class _Stale(Exception):
    """The connection closed before a byte of the response came back: the request was not answered."""


class RawTransport:
    """HTTP/1.1 keep-alive over :class:`StampedConnection`: the least client work per streamed token."""

    name = "raw"

    def __init__(self, base_url: str, api_key: str) -> None:
        url = urllib.parse.urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ServerError(f"raw transport: base URL {base_url!r} is not http://HOST:PORT "
                              "(use transport='openai' for https)")
        self.host, self.port = url.hostname, url.port or 80
        self.prefix = url.path.rstrip("/") + "/v1/"
        self.auth = f"Authorization: Bearer {api_key}\r\n".encode()
        self.idle: list[StampedConnection] = []
        self._kernel_seen = False

    @property
    def stamps(self) -> str:
        return "kernel" if self._kernel_seen else "event loop"

    async def open(self, n: int) -> None:
        """Open connections until ``n`` are idle: at C = 64 one loop opening 56 of them inside the measured
        window was busy ~25 ms and stamped the first chunks that late (benchmarks/harness_ceiling.py)."""
        fresh = await asyncio.gather(*(self._dial() for _ in range(n - len(self.idle))), return_exceptions=True)
        # one that cannot connect is left to the request itself, which then fails and is counted with its reason
        self.idle.extend(c for c in fresh if isinstance(c, StampedConnection))

    async def _connect(self) -> tuple[StampedConnection, bool]:
        """A connection, and whether it was kept alive from an earlier request."""
        while self.idle:
            conn = self.idle.pop()
            if conn.usable:
                return conn, True
            conn.close()  # the server dropped it while idle (its keep-alive timeout)
        return await self._dial(), False

    async def _dial(self) -> StampedConnection:
        return await StampedConnection.connect(self.host, self.port)

    async def stream(self, path: str, payload: Payload, rid: str, on_bytes: OnBytes) -> None:
        body = json.dumps(payload).encode()
        head = (f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nAccept: text/event-stream\r\nx-request-id: {rid}\r\n"
                f"Content-Length: {len(body)}\r\n").encode() + self.auth + b"\r\n"
        conn, kept = await self._connect()
        reusable = False
        try:
            while True:
                try:
                    await self._send(conn, head + body)
                    reusable = await self._response(conn, on_bytes)
                    break
                except _Stale:
                    if not kept:
                        raise ConnectionError("server closed the connection before answering") from None
                # the server closed this idle keep-alive connection (its keep-alive timeout) before it read the
                # request: nothing was processed, so it is sent once more on a fresh connection, as HTTP clients do
                conn.close()
                conn, kept = await self._dial(), False
        finally:
            self._kernel_seen = self._kernel_seen or conn.stamped_by_kernel
            if reusable:
                self.idle.append(conn)
            else:
                conn.close()

    @staticmethod
    async def _send(conn: StampedConnection, request: bytes) -> None:
        try:
            await conn.write(request)
        except (BrokenPipeError, ConnectionResetError):
            raise _Stale from None  # the peer had closed it: the request never reached the server

    @staticmethod
    async def _response(reader: StampedConnection, on_bytes: OnBytes) -> bool:
        """Read one response; True when the connection can carry the next request."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise ConnectionError("server closed the connection mid-header") from None
            raise _Stale from None
        except ConnectionResetError:
            raise _Stale from None
        except asyncio.LimitOverrunError:
            raise StreamError("malformed HTTP response: no end of its header within 1 MiB") from None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            status = int(parts[1])
        except (IndexError, ValueError):
            raise StreamError(f"malformed HTTP status line {lines[0][:80]!r}") from None
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip().lower()
        chunked = "chunked" in headers.get("transfer-encoding", "")
        length = headers.get("content-length")
        if status != 200:
            raw = await reader.read(4096) if not length else await reader.readexactly(min(int(length), 1 << 16))
            raise StreamError(f"HTTP {status}: {_error_message(raw)}")
        if not chunked:
            if length is not None:
                on_bytes(await reader.readexactly(int(length)), reader.stamp)
                return headers.get("connection") != "close"
            while data := await reader.read(1 << 16):
                on_bytes(data, reader.stamp)
            return False
        buf = b""
        data_left = crlf_left = 0  # both 0: a chunk-size line is next
        while True:
            data = await reader.read(1 << 16)
            now = reader.stamp  # when its last byte reached the socket, not when this loop got to it
            if not data:
                raise ConnectionError("server closed the connection mid-response")
            buf += data
            out = []
            while buf:
                if data_left:
                    take = min(data_left, len(buf))
                    out.append(buf[:take])
                    buf, data_left = buf[take:], data_left - take
                    crlf_left = 0 if data_left else 2
                elif crlf_left:
                    take = min(crlf_left, len(buf))
                    buf, crlf_left = buf[take:], crlf_left - take
                else:
                    cut = buf.find(b"\r\n")
                    if cut < 0:
                        break
                    try:
                        n = int(buf[:cut].split(b";")[0], 16)
                    except ValueError:
                        raise StreamError(f"malformed chunked encoding: {buf[:40]!r}") from None
                    buf = buf[cut + 2:]
                    if n == 0:
                        if out:
                            on_bytes(b"".join(out), now)
                        # the empty line after the last chunk (vLLM sends no trailers); usually already here
                        while not buf.startswith(b"\r\n"):
                            more = await reader.read(1 << 10)
                            if not more:
                                return False
                            buf += more
                        return headers.get("connection") != "close" and len(buf) == 2
                    data_left = n
            if out:
                on_bytes(b"".join(out), now)

    async def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


def _error_message(raw: bytes) -> str:
    try:
        data = json.loads(raw)
        msg = data.get("message") or (data.get("error") or {}).get("message")
        return str(msg or raw[:200].decode(errors="replace"))[:200]
    except (ValueError, AttributeError):
        return raw[:200].decode(errors="replace")


# ----------------------------------------------------------------------------- openai SDK

_SDK_KEYS = ("model", "prompt", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options",
             "temperature")


class SDKTransport:
    """The ``openai`` SDK's streaming response over httpx (``openai``) or aiohttp (``aiohttp``)."""

    stamps = "event loop"  # the SDK reads the socket: a chunk is dated when its iterator yields it

    def __init__(self, base_url: str, api_key: str, *, aiohttp: bool, connections: int, timeout_s: float) -> None:
        import openai

        self.name = "aiohttp" if aiohttp else "openai"
        httpx = http_module()
        timeout = httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))
        if aiohttp:
            try:
                http = openai.DefaultAioHttpClient(timeout=timeout)
            except (RuntimeError, ImportError) as exc:
                raise ServerError(f"transport 'aiohttp' needs pip install 'openai[aiohttp]' ({exc})") from None
        else:
            limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
            http = httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)
        self.http = http
        self.client = openai.AsyncOpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key, max_retries=0,
                                         timeout=timeout, http_client=http)

    async def stream(self, path: str, payload: Payload, rid: str, on_bytes: OnBytes) -> None:
        import openai

        kwargs = {k: v for k, v in payload.items() if k in _SDK_KEYS}
        extra = {k: v for k, v in payload.items() if k not in _SDK_KEYS}
        res = self.client.chat.completions if path == "chat/completions" else self.client.completions
        try:
            async with res.with_streaming_response.create(  # type: ignore[call-overload]
                    extra_body=extra, extra_headers={"x-request-id": rid}, **kwargs) as resp:
                async for raw in resp.iter_bytes():
                    on_bytes(raw, time.perf_counter())
        except openai.APIStatusError as exc:
            raise StreamError(f"HTTP {exc.status_code}: {str(exc.message)[:200]}") from None
        except openai.APITimeoutError:
            raise asyncio.TimeoutError() from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise ConnectionError(f"{type(cause).__name__}: {str(cause)[:200]}") from None

    async def open(self, n: int) -> None:
        """The SDK's pool opens connections on demand; nothing to prepare."""
        return None

    async def close(self) -> None:
        await self.http.aclose()


def make_transport(name: str, base_url: str, api_key: str, *, connections: int, timeout_s: float) -> Transport:
    """The transport named ``name`` (one of :data:`TRANSPORTS`)."""
    if name == "raw":
        return RawTransport(base_url, api_key)
    if name in ("openai", "aiohttp"):
        return SDKTransport(base_url, api_key, aiohttp=name == "aiohttp", connections=connections,
                            timeout_s=timeout_s)
    raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {name!r}")
