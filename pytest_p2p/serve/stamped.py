"""A TCP connection whose reads say when their bytes arrived: the kernel's receive stamp.

Why: a chunk's arrival time is what TTFT and ITL are made of, and a client stamping it
when its event loop gets round to the socket is late by however busy that loop is -- at
C = 64 the loop's lateness, not the server, set the 1 ms timestamp error (issue 12,
docs/performance.md). Linux records when each TCP segment reached the socket
(``SO_TIMESTAMPNS``); ``recvmsg`` returns that stamp of the last segment it read as
ancillary data. asyncio's own transports read with ``recv`` and drop it, so this reads
the socket itself, from the event loop's reader callback.

What the stamp means: one read takes everything queued, and its stamp is the arrival of
its *last* segment. Chunks that queued behind a late loop share that stamp -- never
earlier than any of them arrived, so the error is bounded by the loop's lateness as
before, and zero for the chunk that arrived last. A loop late by less than one stream's
inter-token gap (5-20 ms on a real server) gets exact stamps.

Where the kernel gives no stamp (not Linux, an old kernel, a platform without the
option) the read is stamped when the loop's callback runs, which is still before the
task that parses the bytes is resumed; :attr:`StampedConnection.kernel_stamps` says which.
Linux switches stamping on for the first socket that asks through a deferred work item, so
on a host where no socket had it yet the first segments may arrive unstamped: those reads
are dated by the loop too. The load generator opens its connections and runs its warm-up
before the measured window, so by then the stamps flow.
Over TLS the socket still carries the stamps: the ciphertext is read here and decrypted in
memory (:class:`ssl.SSLObject`), so the plaintext of a read keeps its read's stamp.
Stamps are converted from ``CLOCK_REALTIME`` to ``time.perf_counter`` (the clock of every
other time in a request record) at the read; a realtime clock step between the arrival and
the read is clamped so that a stamp never lies in the future or before the previous one.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import sys
import time

from ..errors import ServerError

#: Linux's ``SO_TIMESTAMPNS`` where Python does not name it (it is 35 on every Linux architecture)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_READ_SIZE = 1 << 16
_TIMESPEC64, _TIMESPEC32 = struct.Struct("qq"), struct.Struct("ii")
_MAX_AGE_NS = 10_000_000_000  # a stamp older than 10 s is a clock step, not an arrival: use the read time


def _kernel_age_ns(ancillary: list[tuple[int, int, bytes]], realtime_ns: int) -> int | None:
    """How long ago (ns) the last segment of this read arrived, from its ``SO_TIMESTAMPNS`` message."""
    for level, kind, data in ancillary:
        if level != socket.SOL_SOCKET or kind != SO_TIMESTAMPNS:
            continue
        if len(data) >= 16:
            sec, nsec = _TIMESPEC64.unpack_from(data)
        elif len(data) >= 8:
            sec, nsec = _TIMESPEC32.unpack_from(data)  # a 32-bit timespec
        else:
            return None
        age = realtime_ns - (sec * 1_000_000_000 + nsec)
        return age if 0 <= age <= _MAX_AGE_NS else 0
    return None


class StampedConnection:
    """One non-blocking TCP socket, read with ``recvmsg`` as data comes in; :attr:`stamp` dates what was read.

    The reading side mirrors the part of :class:`asyncio.StreamReader` the raw transport
    uses (``read``, ``readexactly``, ``readuntil``) and raises the same exceptions.
    """

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock, self.loop = sock, loop
        self._tls: ssl.SSLObject | None = None
        self._tls_ready = False
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._reads = 0
        #: per read: perf_counter time the loop read it minus its kernel stamp (how late the loop was), seconds
        self.read_lags: list[float] = []
        sock.setblocking(False)
        # the option's number is Linux's: elsewhere the same number may mean another option
        self.kernel_stamps = sys.platform.startswith("linux") and _CMSG_SPACE > 0 and hasattr(sock, "recvmsg")
        if self.kernel_stamps:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                self.kernel_stamps = False
        self._seen_kernel = False
        self._buf = bytearray()
        self._stamp = 0.0  # perf_counter time the newest buffered byte arrived
        self._eof = False
        self._error: OSError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        loop.add_reader(sock.fileno(), self._readable)

    @classmethod
    async def connect(cls, host: str, port: int, *, tls: ssl.SSLContext | None = None, server_hostname: str = "",
                      tunnel: str = "") -> StampedConnection:
        """Connect like ``asyncio.open_connection`` (every address ``host`` resolves to, in turn), TCP_NODELAY.

        ``tunnel`` (``"host:port"``): ``host:port`` is an HTTP proxy; ask it for a tunnel there
        first (``CONNECT``). ``tls``: then speak TLS, checking the certificate against
        ``server_hostname``. Failures are ``ConnectionError`` with a one-line reason.
        """
        conn = await cls._tcp(host, port)
        try:
            if tunnel:
                await conn._connect_tunnel(tunnel)
            if tls is not None:
                await conn._start_tls(tls, server_hostname or host)
        except BaseException:
            conn.close()
            raise
        return conn

    async def _connect_tunnel(self, target: str) -> None:
        await self.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        try:
            head = await self.readuntil(b"\r\n\r\n", limit=1 << 16)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            raise ConnectionError(f"proxy gave no answer to CONNECT {target}") from None
        status = head.split(b"\r\n", 1)[0].decode("latin-1")
        if status.split(" ")[1:2] != ["200"]:
            raise ConnectionError(f"proxy refused CONNECT {target}: {status[:80]!r}")

    async def _start_tls(self, context: ssl.SSLContext, hostname: str) -> None:
        self._tls = context.wrap_bio(self._in, self._out, server_side=False, server_hostname=hostname)
        if self._buf:  # bytes that came after a proxy's CONNECT answer are the server's first TLS records
            self._in.write(bytes(self._buf))
            self._buf.clear()
        while True:
            seen = self._reads
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLCertVerificationError as exc:
                raise ConnectionError(f"TLS: the server's certificate is not trusted ({exc.verify_message}); "
                                      "give its CA as load.ca_file or SSL_CERT_FILE") from None
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS handshake failed: {exc.reason or exc}") from None
            await self._flush_tls()
            if self._reads == seen:
                if self._eof:
                    raise ConnectionError("TLS handshake: the server closed the connection")
                await self._more()
        await self._flush_tls()
        self._tls_ready = True
        self._buf += self._decrypt()  # application data that came with the handshake's last flight

    async def _flush_tls(self) -> None:
        if self._out.pending:
            await self.loop.sock_sendall(self.sock, self._out.read())

    def _decrypt(self) -> bytes:
        tls = self._tls
        assert tls is not None
        out = bytearray()
        while True:
            try:
                piece = tls.read(_READ_SIZE)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except ssl.SSLZeroReturnError:
                self._eof = True
                break
            except ssl.SSLError as exc:
                self._error = ConnectionError(f"TLS: {exc.reason or exc}")
                break
            if not piece:
                self._eof = True
                break
            out += piece
        return bytes(out)

    @classmethod
    async def _tcp(cls, host: str, port: int) -> StampedConnection:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        last: OSError = OSError(f"cannot resolve {host}:{port}")
        for family, kind, proto, _, addr in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, addr)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            try:
                return cls(sock, loop)
            except NotImplementedError:  # Windows' proactor loop cannot watch a socket for reads
                sock.close()
                raise ServerError("raw transport: this event loop cannot watch sockets (Windows' proactor "
                                  "loop); use transport='openai'") from None
        raise last

    # ------------------------------------------------------------------ the loop's side

    def _readable(self) -> None:
        try:
            if self.kernel_stamps:
                data, ancillary, _, _ = self.sock.recvmsg(_READ_SIZE, _CMSG_SPACE)
            else:
                data, ancillary = self.sock.recv(_READ_SIZE), []
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._error = exc
            self._stop_reading()
            self._wake()
            return
        realtime_ns = time.time_ns()  # realtime first: a preemption before the next read makes the loop
        now = time.perf_counter()  # look late; the other order counted it as kernel age (bytes before sent)
        self._reads += 1
        if not data:
            self._eof = True
            self._stop_reading()
            self._wake()
            return
        age = _kernel_age_ns(ancillary, realtime_ns) if ancillary else None
        if age is not None:
            self._seen_kernel = True
            now -= age * 1e-9
            self.read_lags.append(age * 1e-9)
        if self._tls is not None:
            self._in.write(data)
            if not self._tls_ready:
                self._wake()  # the handshake reads the BIO itself
                return
            data = self._decrypt()
            if not data:
                if self._eof or self._error is not None:
                    self._stop_reading()
                    self._wake()
                return  # a record cut between reads, or a session ticket: no plaintext yet
        self._stamp = max(now, self._stamp)
        self._buf += data
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _stop_reading(self) -> None:
        if not self._closed:
            with contextlib.suppress(ValueError, OSError):  # ValueError: the fd is already closed
                self.loop.remove_reader(self.sock.fileno())

    async def _more(self) -> None:
        """Wait for the next read (bytes, end of stream or an error)."""
        if self._error is not None:
            raise self._error
        if self._eof:
            return
        self._waiter = self.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    # ------------------------------------------------------------------ the reader's side

    @property
    def stamp(self) -> float:
        """``perf_counter`` time the newest byte read so far arrived (the kernel's stamp where there is one)."""
        return self._stamp

    @property
    def usable(self) -> bool:
        """False once the peer closed the connection or it failed (an idle keep-alive the server dropped)."""
        return not (self._eof or self._closed or self._error is not None)

    @property
    def stamped_by_kernel(self) -> bool:
        """Whether any read so far carried the kernel's stamp."""
        return self._seen_kernel

    def _take(self, n: int) -> bytes:
        if n >= len(self._buf):  # the usual case: everything that came in (one copy, not two)
            out = bytes(self._buf)
            self._buf.clear()
            return out
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def read(self, n: int = _READ_SIZE) -> bytes:
        """Up to ``n`` bytes as soon as there are any; ``b""`` at the end of the stream."""
        while not self._buf and not self._eof:
            await self._more()
        return self._take(n)

    async def readexactly(self, n: int) -> bytes:
        while len(self._buf) < n and not self._eof:
            await self._more()
        if len(self._buf) < n:
            raise asyncio.IncompleteReadError(self._take(len(self._buf)), n)
        return self._take(n)

    async def readuntil(self, separator: bytes, limit: int = 1 << 20) -> bytes:
        """Up to and including ``separator``; ``LimitOverrunError`` when ``limit`` bytes came without it."""
        start = 0
        while (cut := self._buf.find(separator, start)) < 0:
            if self._eof:
                raise asyncio.IncompleteReadError(self._take(len(self._buf)), None)
            if len(self._buf) > limit:
                raise asyncio.LimitOverrunError(f"no {separator!r} in {len(self._buf)} bytes", len(self._buf))
            start = max(0, len(self._buf) - len(separator) + 1)
            await self._more()
        return self._take(cut + len(separator))

    async def write(self, data: bytes) -> None:
        if self._tls is not None and self._tls_ready:
            self._tls.write(data)
            await self._flush_tls()
            return
        await self.loop.sock_sendall(self.sock, data)

    def close(self) -> None:
        if self._closed:
            return
        self._stop_reading()
        self._closed = True
        self.sock.close()
        self._eof = True
        self._wake()
