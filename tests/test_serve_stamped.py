"""The raw transport's socket: reads dated by the kernel's receive stamp, not by when the loop got to them."""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time

import pytest

from pytest_p2p.serve import stamped
from pytest_p2p.serve.stamped import SO_TIMESTAMPNS, StampedConnection, _kernel_age_ns

LINUX = sys.platform.startswith("linux")


def _timespec(ns: int) -> list[tuple[int, int, bytes]]:
    return [(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("qq", ns // 1_000_000_000, ns % 1_000_000_000))]


def test_kernel_age_is_read_from_the_timestamp_message() -> None:
    now = 1_700_000_000_123_456_789
    assert _kernel_age_ns(_timespec(now - 2_500_000), now) == 2_500_000
    assert _kernel_age_ns(_timespec(now + 5_000), now) == 0  # a realtime step backwards: never in the future
    assert _kernel_age_ns(_timespec(now - 60_000_000_000), now) == 0  # a minute old: a clock step, not an arrival
    assert _kernel_age_ns([(socket.SOL_SOCKET, SO_TIMESTAMPNS + 1, b"\0" * 16)], now) is None
    assert _kernel_age_ns([(socket.SOL_SOCKET, SO_TIMESTAMPNS, b"\0" * 4)], now) is None


async def _late_read(server: socket.socket, client: socket.socket, late_s: float) -> tuple[float, float, float, bool]:
    """Send, keep the loop busy for ``late_s``, then read: (before send, after the busy spell, stamp, by kernel)."""
    conn = StampedConnection(client, asyncio.get_running_loop())
    try:
        t0 = time.perf_counter()
        server.sendall(b"data: 1\n\n")
        time.sleep(late_s)  # the loop is blocked: a loop-time stamp could not be earlier than now
        t2 = time.perf_counter()
        assert await conn.read() == b"data: 1\n\n"
        return t0, t2, conn.stamp, conn.stamped_by_kernel
    finally:
        conn.close()


@pytest.mark.skipif(not LINUX, reason="SO_TIMESTAMPNS receive stamps are Linux's")
def test_a_late_loop_still_dates_the_read_when_its_bytes_arrived(loopback_pair: tuple[socket.socket, socket.socket],
                                                                  kernel_rx_stamps: bool) -> None:
    assert kernel_rx_stamps, "this Linux gives TCP sockets no receive stamps (SO_TIMESTAMPNS)"
    t0, t2, stamp, by_kernel = asyncio.run(_late_read(*loopback_pair, late_s=0.05))
    assert by_kernel
    assert t0 <= stamp < t2  # arrived during the busy spell, before the loop could read it


class _PreemptedAfterPerfCounter:
    """``time`` for the connection, with the thread preempted right after every ``perf_counter`` read."""

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    @staticmethod
    def perf_counter() -> float:
        now = time.perf_counter()
        time.sleep(0.2)  # what a loaded box does between two clock reads, made certain
        return now


@pytest.mark.skipif(not LINUX, reason="SO_TIMESTAMPNS receive stamps are Linux's")
def test_a_preemption_between_the_clock_reads_never_dates_bytes_before_they_were_sent(
        loopback_pair: tuple[socket.socket, socket.socket], kernel_rx_stamps: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel stamp (realtime) becomes a perf_counter time through a pair of clock reads. Read
    perf_counter first and a preemption between the two counts as kernel age: the bytes are dated
    before they were sent (the flake seen on a loaded 2-core box). Read realtime first and it only
    makes the loop look late."""
    assert kernel_rx_stamps, "this Linux gives TCP sockets no receive stamps (SO_TIMESTAMPNS)"
    monkeypatch.setattr(stamped, "time", _PreemptedAfterPerfCounter())
    t0, _, stamp, by_kernel = asyncio.run(_late_read(*loopback_pair, late_s=0.0))
    assert by_kernel and stamp >= t0


def test_without_kernel_stamps_the_read_is_dated_by_the_loop(loopback_pair: tuple[socket.socket, socket.socket],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stamped.sys, "platform", "darwin")  # the option's number is Linux's: not used elsewhere
    t0, t2, stamp, by_kernel = asyncio.run(_late_read(*loopback_pair, late_s=0.02))
    assert not by_kernel and stamp >= t2


def test_reads_like_a_stream_reader(loopback_pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = loopback_pair

    async def main() -> None:
        conn = StampedConnection(client, asyncio.get_running_loop())
        try:
            server.sendall(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody12345")
            assert await conn.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n"
            assert await conn.readexactly(4) == b"body"
            assert await conn.read(3) == b"123"
            assert conn.usable
            server.shutdown(socket.SHUT_WR)
            assert await conn.read() == b"45"
            assert await conn.read() == b""
            assert not conn.usable
            with pytest.raises(asyncio.IncompleteReadError):
                await conn.readexactly(1)
            with pytest.raises(asyncio.IncompleteReadError):
                await conn.readuntil(b"\n")
        finally:
            conn.close()
            conn.close()  # twice is harmless

    asyncio.run(main())


def test_a_reset_connection_raises_connection_reset(loopback_pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = loopback_pair
    server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST

    async def main() -> None:
        conn = StampedConnection(client, asyncio.get_running_loop())
        try:
            server.close()
            with pytest.raises(ConnectionResetError):
                await conn.readuntil(b"\r\n\r\n")
        finally:
            conn.close()

    asyncio.run(main())


def test_connect_tries_every_address_and_names_the_last_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused

        async def main() -> None:
            await StampedConnection.connect("127.0.0.1", port)

        with pytest.raises(ConnectionRefusedError):
            asyncio.run(main())


def test_a_loop_that_cannot_watch_sockets_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_p2p.errors import ServerError

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        async def main() -> None:
            loop = asyncio.get_running_loop()

            def no_readers(*a: object) -> None:
                raise NotImplementedError

            monkeypatch.setattr(loop, "add_reader", no_readers)
            await StampedConnection.connect("127.0.0.1", port)

        with pytest.raises(ServerError, match="cannot watch sockets.*transport='openai'"):
            asyncio.run(main())


def test_a_header_without_an_end_stops_at_the_limit(loopback_pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = loopback_pair

    async def main() -> None:
        conn = StampedConnection(client, asyncio.get_running_loop())
        try:
            server.sendall(b"X-Junk: " + b"a" * 5000)
            with pytest.raises(asyncio.LimitOverrunError):
                await conn.readuntil(b"\r\n\r\n", limit=4096)
        finally:
            conn.close()

    asyncio.run(main())
