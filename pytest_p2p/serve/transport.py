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
import ipaddress
import json
import ssl
import time
import types
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Mapping
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
    """Server-sent events of one completion -> a :class:`RequestRecord` (times from ``perf_counter``).

    Lines end in LF, CRLF or CR (all three are legal SSE; sse-starlette, behind many
    OpenAI-compatible servers, writes CRLF); an event is the ``data:`` lines up to a blank
    line, joined by newlines as the SSE spec says. The text of the content chunks is kept
    so that a stream without a usage report can still be counted: bench re-tokenises the
    generated text then, and so does :func:`~.loadgen.generate_load` after the run.
    """

    rec: RequestRecord
    chat: bool
    keep_times: bool = False
    buf: bytes = b""
    last: float = 0.0
    first: bool = False
    done: bool = False
    usage: Mapping[str, object] | None = None
    times: list[float] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    cr: bool = False  # a CR was seen: line ends are normalised from then on
    #: content events that came in one read behind another of this stream (their stamp is the later one's)
    merged: int = 0
    events: int = 0

    def feed(self, data: bytes, now: float) -> None:
        """All events completed by one network read share its arrival time (as in vLLM's client)."""
        buf = self.buf + data
        if self.cr or b"\r" in data:
            self.cr = True
            hold = buf.endswith(b"\r")  # a CRLF cut between two reads: wait for its LF
            body = buf[:-1] if hold else buf
            buf = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (b"\r" if hold else b"")
        content = 0
        while True:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            event, buf = buf[:cut], buf[cut + 2:]
            content += self._lines(event, now)
        self.buf = buf
        if content > 1:
            self.merged += content - 1
        self.events += content

    def _lines(self, event: bytes, now: float) -> int:
        """Dispatch one event; 1 when it carried a content chunk."""
        parts = [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
        if not parts:
            return 0  # a comment (": ping"), an id:/event:/retry: line, or a blank keep-alive
        payload = parts[0].strip() if len(parts) == 1 else b"\n".join(p.removeprefix(b" ") for p in parts).strip()
        return self._event(payload, now)

    def _event(self, payload: bytes, now: float) -> int:
        if payload == b"[DONE]":
            self.done = True
            return 0
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
            return 0
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise StreamError(f"malformed stream: choices is {str(choices)[:60]!r}")
        if self.chat:
            delta = choices[0].get("delta") or {}
            if not isinstance(delta, dict):
                raise StreamError(f"malformed stream: delta is {str(delta)[:60]!r}")
            piece = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
            if not piece:
                return 0  # the role preamble carries no token
        else:
            piece = choices[0].get("text")
        if isinstance(piece, str):
            self.text.append(piece)
        rec = self.rec
        if not self.first:
            self.first = True
            rec.ttft = now - rec.start_time
        else:
            rec.itl.append(now - self.last)
        self.last = now
        if self.keep_times:
            self.times.append(now)
        return 1

    def finish(self) -> None:
        """Judge the complete stream; raises :class:`StreamError` with the reason when it is not a success.

        A last event the server ended without its blank line is read as bench reads it. A
        stream without a usage report succeeds with its text kept
        (``rec.generated_text``, ``rec.output_tokens = -1``): the caller counts its tokens.
        """
        rest = self.buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n").strip(b"\n")
        self.buf = b""
        if rest:
            self._lines(rest, self.last)
        if not self.first:
            raise StreamError("stream carried no content chunk (cannot measure TTFT)")
        if not self.done:
            raise StreamError("stream cut short: ended before data: [DONE]")
        out = _count(self.usage, "completion_tokens") if self.usage is not None else None
        self.rec.merged_chunks = self.merged
        if out is None:
            self.rec.output_tokens = -1  # counted by the caller with the tokenizer, as bench does
            self.rec.generated_text = "".join(self.text)
            return
        self.rec.output_tokens = out
        self.rec.server_prompt_tokens = (_count(self.usage, "prompt_tokens") or 0) if self.usage else 0


class Transport(Protocol):
    name: str

    @property
    def stamps(self) -> str:
        """What dated the reads so far: ``"kernel"`` (the socket's receive stamp) or ``"event loop"``."""
        ...

    @property
    def read_lags(self) -> list[float]:
        """Per socket read in kernel-stamped transports: how late (s) the loop read what the kernel had stamped."""
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



# ----------------------------------------------------------------------------- options


@dataclass(frozen=True)
class ClientOptions:
    """How to reach a user-supplied endpoint (the rig's ``server.load`` keys of the same names).

    ``proxy``: ``"env"`` honours ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` as curl does, except
    that a loopback host is always reached directly (a proxy there would be measured too);
    ``"none"`` never uses one; a URL ``http://HOST:PORT`` is used for every host. ``ca_file``:
    a PEM file of CAs to trust for https (without it the system's, which honours
    ``SSL_CERT_FILE``/``SSL_CERT_DIR``). ``headers`` go on every request after ours (one of
    the same name replaces ours, e.g. ``Authorization``).
    """

    headers: tuple[tuple[str, str], ...] = ()
    ca_file: str | None = None
    proxy: str = "env"
    connect_timeout_s: float = 10.0


def ssl_context(options: ClientOptions) -> ssl.SSLContext:
    """The TLS context of every transport: the CA file when given, else the system's trust (``SSL_CERT_FILE``)."""
    try:
        return ssl.create_default_context(cafile=options.ca_file) if options.ca_file else ssl.create_default_context()
    except (OSError, ssl.SSLError) as exc:
        raise ServerError(f"load.ca_file {options.ca_file!r}: cannot be read as PEM CA certificates ({exc})") from None


def _loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def proxy_for(base_url: str, setting: str) -> str | None:
    """The proxy URL a request to ``base_url`` goes through under ``setting`` (see :class:`ClientOptions`)."""
    url = urllib.parse.urlsplit(base_url)
    host = url.hostname or ""
    if setting == "none":
        return None
    if setting != "env":
        return setting
    if _loopback(host) or urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies_environment().get(url.scheme) or None


# ----------------------------------------------------------------------------- raw


class _Stale(Exception):
    """The connection closed before a byte of the response came back: the request was not answered."""


class ConnectTimeout(ConnectionError):
    """No connection within the connect timeout (a full accept queue, a black-holed address)."""


class _Conn:
    """A stamped socket and the HTTP/1.1 state of the exchange on it (h11: framing, chunks, trailers)."""

    __slots__ = ("http", "sock")

    def __init__(self, sock: StampedConnection) -> None:
        import h11

        self.sock = sock
        self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)


_MAX_HEAD = 1 << 20  # a response header longer than this is malformed (the asyncio reader's limit)
_MAX_ERROR_BODY = 1 << 16


class RawTransport:
    """HTTP/1.1 keep-alive over :class:`StampedConnection`, framed by h11: the least client work per token.

    Why h11: the hand-written framing failed real servers (trailers timed out every
    request); h11 is the parser httpx uses, made for exactly this (chunked bodies,
    trailers, close-delimited bodies, keep-alive cycles), and it is fed the stamped
    socket's reads unchanged, so every read keeps its kernel stamp.
    """

    name = "raw"

    def __init__(self, base_url: str, api_key: str, options: ClientOptions | None = None) -> None:
        opts = options or ClientOptions()
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ServerError(f"raw transport: base URL {base_url!r} is not http(s)://HOST:PORT")
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
        except ValueError:
            raise ServerError(f"raw transport: base URL {base_url!r} has no valid port") from None
        self.host, self.port = url.hostname, port
        self.tls = ssl_context(opts) if url.scheme == "https" else None
        self.timeout = opts.connect_timeout_s
        authority = f"[{self.host}]:{port}" if ":" in self.host else f"{self.host}:{port}"  # IPv6 literal
        self.prefix = url.path.rstrip("/") + "/v1/"
        proxy = proxy_for(base_url, opts.proxy)
        self.dial_host, self.dial_port, self.tunnel = self.host, self.port, ""
        if proxy:
            purl = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
            if purl.scheme != "http" or not purl.hostname:
                raise ServerError(f"raw transport: proxy {proxy!r} is not http://HOST:PORT")
            self.dial_host, self.dial_port = purl.hostname, purl.port or 80
            if self.tls is not None:
                self.tunnel = authority  # https through the proxy: a CONNECT tunnel, TLS inside it
            else:
                self.prefix = f"http://{authority}{self.prefix}"  # absolute form: the proxy forwards it
        ours = {"host": authority, "content-type": "application/json", "accept": "text/event-stream",
                "accept-encoding": "identity", "authorization": f"Bearer {api_key}"}
        extra = {k.lower(): (k, v) for k, v in opts.headers}
        self.headers = [(k, v) for k, v in ours.items() if k not in extra] + list(extra.values())
        self.idle: list[_Conn] = []
        self.read_lags: list[float] = []  # per read: how late the loop read it after the kernel stamped it (s)
        self._kernel_seen = False

    @property
    def stamps(self) -> str:
        return "kernel" if self._kernel_seen else "event loop"

    async def open(self, n: int) -> None:
        """Open connections until ``n`` are idle: at C = 64 one loop opening 56 of them inside the measured
        window was busy ~25 ms and stamped the first chunks that late (benchmarks/harness_ceiling.py).
        Each is bounded by the connect timeout: a server that does not accept cannot hold the run."""
        fresh = await asyncio.gather(*(self._dial() for _ in range(n - len(self.idle))), return_exceptions=True)
        # one that cannot connect is left to the request itself, which then fails and is counted with its reason
        self.idle.extend(c for c in fresh if isinstance(c, _Conn))

    async def _connect(self) -> tuple[_Conn, bool]:
        """A connection, and whether it was kept alive from an earlier request."""
        while self.idle:
            conn = self.idle.pop()
            if conn.sock.usable:
                return conn, True
            conn.sock.close()  # the server dropped it while idle (its keep-alive timeout)
        return await self._dial(), False

    async def _dial(self) -> _Conn:
        where = f"{self.dial_host}:{self.dial_port}"
        try:
            sock = await asyncio.wait_for(
                StampedConnection.connect(self.dial_host, self.dial_port, tls=self.tls, server_hostname=self.host,
                                          tunnel=self.tunnel), self.timeout)
        except (asyncio.TimeoutError, TimeoutError):
            raise ConnectTimeout(f"no connection to {where} within {self.timeout:g} s") from None
        sock.read_lags = self.read_lags
        return _Conn(sock)

    async def stream(self, path: str, payload: Payload, rid: str, on_bytes: OnBytes) -> None:
        import h11

        body = json.dumps(payload).encode()
        request = h11.Request(method="POST", target=self.prefix + path,
                              headers=[*self.headers, ("x-request-id", rid), ("content-length", str(len(body)))])
        conn, kept = await self._connect()
        reusable = False
        try:
            while True:
                try:
                    await self._send(conn, request, body)
                    reusable = await self._response(conn, on_bytes)
                    break
                except _Stale:
                    if not kept:
                        raise ConnectionError("server closed the connection before answering") from None
                # the server closed this idle keep-alive connection (its keep-alive timeout) before it read the
                # request: nothing was processed, so it is sent once more on a fresh connection, as HTTP clients do
                conn.sock.close()
                conn, kept = await self._dial(), False
        finally:
            self._kernel_seen = self._kernel_seen or conn.sock.stamped_by_kernel
            if reusable:
                self.idle.append(conn)
            else:
                conn.sock.close()

    @staticmethod
    async def _send(conn: _Conn, request: object, body: bytes) -> None:
        import h11

        assert isinstance(request, h11.Request)
        http = conn.http
        data = (http.send(request) or b"") + (http.send(h11.Data(data=body)) or b"") + (
            http.send(h11.EndOfMessage()) or b"")
        try:
            await conn.sock.write(data)
        except (BrokenPipeError, ConnectionResetError):
            raise _Stale from None  # the peer had closed it: the request never reached the server

    @staticmethod
    async def _response(conn: _Conn, on_bytes: OnBytes) -> bool:
        """Read one response; True when the connection can carry the next request.

        All body bytes of one socket read go to ``on_bytes`` in one call with that read's
        stamp, however many chunks they were framed in.
        """
        import h11

        http, sock = conn.http, conn.sock
        status, got = 0, False
        decoder: zlib._Decompress | None = None
        error_body = bytearray()
        while True:
            try:
                data = await sock.read()
            except ConnectionResetError:
                if not got:
                    raise _Stale from None
                raise ConnectionError("server reset the connection mid-response") from None
            if not data and not got:
                raise _Stale
            got = True
            now = sock.stamp  # when its last byte reached the socket, not when this loop got to it
            out: list[bytes] = []
            try:
                http.receive_data(data)
                while True:
                    ev = http.next_event()
                    if ev is h11.NEED_DATA:
                        break
                    if isinstance(ev, h11.Response):
                        status = ev.status_code
                        decoder = _decoder(ev.headers) if 200 <= status < 300 else None
                    elif isinstance(ev, h11.Data):
                        if 200 <= status < 300:
                            out.append(decoder.decompress(ev.data) if decoder else bytes(ev.data))
                        elif len(error_body) < _MAX_ERROR_BODY:
                            error_body += ev.data
                        else:
                            raise StreamError(f"HTTP {status}: {_error_message(bytes(error_body))}")
                    elif isinstance(ev, h11.EndOfMessage):  # its trailers, if any, are not needed
                        if out:
                            on_bytes(b"".join(out), now)
                        if not 200 <= status < 300:
                            raise StreamError(f"HTTP {status}: {_error_message(bytes(error_body))}")
                        if http.our_state is h11.DONE and http.their_state is h11.DONE:
                            http.start_next_cycle()
                            return True
                        return False
                    elif isinstance(ev, h11.ConnectionClosed):
                        raise ConnectionError("server closed the connection mid-response")
                    # InformationalResponse (100 Continue, 103): the real response follows
            except h11.RemoteProtocolError as exc:
                if not data:
                    raise ConnectionError("server closed the connection mid-response") from None
                raise StreamError(f"malformed HTTP response: {str(exc)[:120]}") from None
            except zlib.error as exc:
                raise StreamError(f"malformed compressed body: {exc}") from None
            if out:
                on_bytes(b"".join(out), now)

    async def close(self) -> None:
        for conn in self.idle:
            conn.sock.close()
        self.idle.clear()


def _decoder(headers: Iterable[tuple[bytes, bytes]]) -> zlib._Decompress | None:
    """A decompressor for a body the server compressed although we asked for ``identity``."""
    encoding = b",".join(v for k, v in headers if k == b"content-encoding").strip().lower()
    if encoding in (b"", b"identity"):
        return None
    if encoding in (b"gzip", b"x-gzip", b"deflate"):
        return zlib.decompressobj(47)  # 32 + 15: a gzip or zlib header, whichever it is
    raise StreamError(f"response body is {encoding.decode('latin-1')[:40]}-encoded, which the raw transport "
                      "cannot decode (it asks for identity)")


def _error_message(raw: bytes) -> str:
    try:
        data = json.loads(raw)
        msg = data.get("message") or (data.get("error") or {}).get("message")
        return str(msg or raw[:200].decode(errors="replace"))[:200]
    except (ValueError, AttributeError):
        return " ".join(raw[:200].decode(errors="replace").split()) or "(no body)"


# ----------------------------------------------------------------------------- openai SDK

_SDK_KEYS = ("model", "prompt", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options",
             "temperature")


class SDKTransport:
    """The ``openai`` SDK's streaming response over httpx (``openai``) or aiohttp (``aiohttp``)."""

    stamps = "event loop"  # the SDK reads the socket: a chunk is dated when its iterator yields it
    read_lags: list[float] = []  # noqa: RUF012 - never written: the SDK's reads carry no kernel stamp

    def __init__(self, base_url: str, api_key: str, *, aiohttp: bool, connections: int, timeout_s: float,
                 options: ClientOptions | None = None) -> None:
        import openai

        opts = options or ClientOptions()
        self.name = "aiohttp" if aiohttp else "openai"
        self.headers = dict(opts.headers)
        httpx = http_module()
        timeout = httpx.Timeout(timeout_s, connect=min(opts.connect_timeout_s, timeout_s))
        # trust and proxy are decided here, the same way for every transport (ClientOptions), not by each
        # library's own reading of the environment: httpx without trust_env ignored SSL_CERT_FILE, aiohttp with
        # it sent loopback traffic through HTTP_PROXY
        verify = ssl_context(opts) if base_url.startswith("https:") else True
        proxy = proxy_for(base_url, opts.proxy)
        if aiohttp:
            try:
                http = openai.DefaultAioHttpClient(timeout=timeout, verify=verify, proxy=proxy, trust_env=False)
            except (RuntimeError, ImportError) as exc:
                raise ServerError(f"transport 'aiohttp' needs pip install 'openai[aiohttp]' ({exc})") from None
        else:
            limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
            http = httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False, verify=verify, proxy=proxy)
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
                    extra_body=extra, extra_headers={**self.headers, "x-request-id": rid}, **kwargs) as resp:
                async for raw in resp.iter_bytes():
                    on_bytes(raw, time.perf_counter())
        except openai.APIStatusError as exc:
            try:  # the server's own words, as the raw transport gives them ("Error code: 500" says nothing)
                said = _error_message(await exc.response.aread())
            except Exception:  # noqa: BLE001 - the body is a courtesy: the status is the failure
                said = str(exc.message)
            raise StreamError(f"HTTP {exc.status_code}: {said[:200]}") from None
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


def make_transport(name: str, base_url: str, api_key: str, *, connections: int, timeout_s: float,
                   options: ClientOptions | None = None) -> Transport:
    """The transport named ``name`` (one of :data:`TRANSPORTS`)."""
    if name == "raw":
        return RawTransport(base_url, api_key, options)
    if name in ("openai", "aiohttp"):
        return SDKTransport(base_url, api_key, aiohttp=name == "aiohttp", connections=connections,
                            timeout_s=timeout_s, options=options)
    raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {name!r}")
