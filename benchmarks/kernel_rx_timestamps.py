"""Can the kernel stamp a chunk's arrival for us? SO_TIMESTAMPNS on a TCP socket against a late reader.

Why: the load generator stamps a chunk when its event loop gets to the socket, so a busy
loop stamps late (docs/performance.md: the 1 ms goal at C = 64 depends on the machine's
scheduling noise). Linux can record when each segment arrived (``SO_TIMESTAMPNS``,
returned by ``recvmsg`` as ancillary data, CLOCK_REALTIME). This measures, on loopback, a
writer that stamps each send and a reader that reads ``--late-ms`` later: the kernel's
stamp minus the send time against the reader's own stamp minus the send time.

    python benchmarks/kernel_rx_timestamps.py [--sends 500] [--late-ms 2]

One read returns the stamp of the last segment it took, so a reader late by more than the
gap between two chunks of one stream gets one stamp for both: the stamp is exact only
while the lateness stays below the inter-token gap (5-20 ms on a real server).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value where Python does not name it


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sends", type=int, default=500)
    p.add_argument("--late-ms", type=float, default=2.0)
    args = p.parse_args(argv)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    reader = socket.create_connection(listener.getsockname())
    writer, _ = listener.accept()
    reader.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    kernel: list[float] = []
    loop: list[float] = []
    for _ in range(args.sends):
        offset = time.time() - time.perf_counter()  # realtime -> perf_counter, taken per send (no drift)
        sent = time.perf_counter()
        writer.send(b"data: {}\n\n")
        time.sleep(args.late_ms / 1e3)
        _, ancillary, _, _ = reader.recvmsg(4096, socket.CMSG_SPACE(16))
        now = time.perf_counter()
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", data[:16])
                kernel.append((sec + nsec * 1e-9 - offset - sent) * 1e6)
                loop.append((now - sent) * 1e6)
    if not kernel:
        print("no SO_TIMESTAMPNS ancillary data: this kernel or socket does not stamp receives")
        return 1
    for name, xs in (("kernel stamp", kernel), ("reader's stamp", loop)):
        xs.sort()
        p99 = xs[int(0.99 * (len(xs) - 1))]
        print(f"{name:15s} minus send: p50 {statistics.median(xs):8.1f} us  p99 {p99:8.1f} us  "
              f"max {xs[-1]:8.1f} us  ({len(xs)} sends, reader late by {args.late_ms:g} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
