"""A GPU lease: at most one server or probe touches a GPU at a time, across processes.

Under pytest-xdist each worker takes different pairs, but pairs can share a GPU
(gpu0-gpu1 and gpu1-gpu2), and two CI jobs can run on one host. Scheduling cannot
promise exclusivity; a lock can. Each GPU has a lock file in a directory shared by
every process on the host; a holder takes ``fcntl.flock(LOCK_EX)`` on the files of
its GPUs **in ascending index order** (so two holders can never wait on each other
in a cycle). The kernel drops a flock when its process dies, so a crashed worker
never leaves a GPU locked.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import P2PError

LOCK_DIR_ENV = "PYTEST_P2P_LOCK_DIR"


class LeaseTimeout(P2PError):
    """A GPU stayed locked by someone else past the wait limit."""


def default_lock_dir() -> Path:
    """``$PYTEST_P2P_LOCK_DIR`` or ``<tmp>/pytest-p2p-locks-<uid>``: one per host and user."""
    env = os.environ.get(LOCK_DIR_ENV)
    if env:
        return Path(env)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"pytest-p2p-locks-{uid}"


@dataclass
class GpuLease:
    """Take with :meth:`hold`; ``held`` lists the GPUs this process holds now (for tests and messages)."""

    lock_dir: Path = field(default_factory=default_lock_dir)
    poll_s: float = 0.05
    held: list[int] = field(default_factory=list)

    def _path(self, gpu: int) -> Path:
        return self.lock_dir / f"gpu{gpu}.lock"

    def holder(self, gpu: int) -> str:
        """Who last took the lock of ``gpu`` (informational: written by the holder)."""
        try:
            return self._path(gpu).read_text(encoding="utf-8").strip() or "unknown"
        except OSError:
            return "unknown"

    def _open(self, gpu: int) -> int:
        try:
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            return os.open(self._path(gpu), os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise P2PError(f"GPU lock file {self._path(gpu)} cannot be opened ({exc.strerror or exc}); "
                           f"point ${LOCK_DIR_ENV} at a writable directory shared by every process "
                           "on this host") from None

    @contextlib.contextmanager
    def hold(self, gpus: Sequence[int], what: str, timeout_s: float = 3600.0) -> Iterator[float]:
        """Hold every GPU in ``gpus`` for the ``with`` block; yields the seconds spent waiting."""
        import fcntl

        fds: list[int] = []
        start = time.monotonic()
        try:
            for gpu in sorted(set(gpus)):
                fd = self._open(gpu)
                fds.append(fd)
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() - start > timeout_s:
                            raise LeaseTimeout(
                                f"GPU {gpu} is still in use by {self.holder(gpu)} after {timeout_s:.0f} s "
                                f"(lock {self._path(gpu)}); {what} did not start"
                            ) from None
                        time.sleep(self.poll_s)
                note = f"pid {os.getpid()}: {what}\n".encode()
                os.ftruncate(fd, 0)
                os.pwrite(fd, note, 0)
                self.held.append(gpu)
            yield time.monotonic() - start
        finally:
            for fd in reversed(fds):
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            for gpu in sorted(set(gpus)):
                if gpu in self.held:
                    self.held.remove(gpu)
