"""A GPU lease: at most one server or probe touches a GPU at a time, across processes.

Under pytest-xdist each worker takes different pairs, but pairs can share a GPU
(gpu0-gpu1 and gpu1-gpu2), and two CI jobs can run on one host. Scheduling cannot
promise exclusivity; a lock can. Each GPU has a lock file in a directory shared by
every process of this user on the host; a holder takes ``fcntl.flock(LOCK_EX)`` on the
files of all its GPUs at once or none: it never keeps one while it waits for another, so
two holders never wait on each other in a cycle and a pair whose GPUs are free is never kept
waiting. The kernel drops a flock when its process dies, so a crashed worker never leaves a
GPU locked.

Why the directory is private: its name (``/tmp/pytest-p2p-locks-<uid>``) is predictable,
so on a multi-user host another user could create it first, or plant a symlink named
``gpu0.lock`` pointing at one of our files, which the holder note would then overwrite.
So the directory must be ours and writable by nobody else (created ``0700``), it is
opened without following a symlink and every lock file is opened relative to it with
``O_NOFOLLOW``; a lock file that is not a plain file of ours with one link is refused,
never truncated.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import P2PError

LOCK_DIR_ENV = "PYTEST_P2P_LOCK_DIR"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class LeaseTimeout(P2PError):
    """A GPU stayed locked by someone else past the wait limit."""


def default_lock_dir() -> Path:
    """``$PYTEST_P2P_LOCK_DIR`` or ``<tmp>/pytest-p2p-locks-<uid>``: one per host and user (private: 0700)."""
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
        """Who last took the lock of ``gpu`` (informational: written by the holder; never follows a link)."""
        try:
            fd = os.open(self._path(gpu), os.O_RDONLY | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return "unknown"
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return "unknown"
            return os.read(fd, 4096).decode("utf-8", errors="replace").strip() or "unknown"
        except OSError:
            return "unknown"
        finally:
            os.close(fd)

    def _refuse(self, what: str) -> P2PError:
        return P2PError(f"GPU lock directory {self.lock_dir}: {what}; refusing to use it (another user could "
                        f"hijack the GPU lease). Remove it, or point ${LOCK_DIR_ENV} at a directory of your own "
                        "that only you can write (mode 0700)")

    def _open_dir(self) -> int:
        """The lock directory, created 0700 if absent, checked: a real directory, ours, writable only by us."""
        d = self.lock_dir
        try:
            d.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(d, 0o700)
            dfd = os.open(d, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
        except OSError as exc:
            if os.path.islink(d):
                raise self._refuse("it is a symbolic link") from None
            raise P2PError(f"GPU lock directory {d} cannot be used ({exc.strerror or exc}); point "
                           f"${LOCK_DIR_ENV} at a writable directory of your own") from None
        st = os.fstat(dfd)
        problem = None
        if not stat.S_ISDIR(st.st_mode):
            problem = "it is not a directory"
        elif hasattr(os, "getuid") and st.st_uid != os.getuid():
            problem = f"it belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
        elif st.st_mode & 0o022:
            problem = f"others can write to it (mode {stat.S_IMODE(st.st_mode):04o})"
        if problem is not None:
            os.close(dfd)
            raise self._refuse(problem)
        return dfd

    def _open(self, gpu: int) -> int:
        """The lock file of ``gpu``: opened inside the checked directory, never through a link."""
        name = f"gpu{gpu}.lock"
        dfd = self._open_dir()
        try:
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK, 0o600,
                             dir_fd=dfd)
            except OSError as exc:
                if os.path.islink(self._path(gpu)):
                    raise self._refuse(f"{name} is a symbolic link") from None
                raise P2PError(f"GPU lock file {self._path(gpu)} cannot be opened ({exc.strerror or exc}); "
                               f"point ${LOCK_DIR_ENV} at a writable directory of your own") from None
        finally:
            os.close(dfd)
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = f"{name} is not a plain file"
        elif hasattr(os, "getuid") and st.st_uid != os.getuid():
            problem = f"{name} belongs to uid {st.st_uid}"
        elif st.st_nlink != 1:
            problem = f"{name} has {st.st_nlink} hard links"
        if problem is not None:
            os.close(fd)
            raise self._refuse(problem)
        return fd

    @contextlib.contextmanager
    def hold(self, gpus: Sequence[int], what: str, timeout_s: float = 3600.0) -> Iterator[float]:
        """Hold every GPU in ``gpus`` for the ``with`` block; yields the seconds spent waiting.

        All or none: a holder that finds one of its GPUs taken lets go of those it got and tries
        again, instead of keeping them while it waits. Kept (hold and wait), a pair waiting for
        GPU 2 behind another run's server would keep GPU 0 from a pair 0-1 whose GPUs are both
        free, for as long as that server runs.
        """
        import fcntl

        wanted = sorted(set(gpus))
        fds = [self._open(gpu) for gpu in wanted] if wanted else []
        start = time.monotonic()
        got: list[int] = []
        try:
            while True:
                busy = None
                for gpu, fd in zip(wanted, fds, strict=True):
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        got.append(fd)
                    except BlockingIOError:
                        busy = gpu
                        break
                if busy is None:
                    break
                for fd in reversed(got):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                got.clear()
                if time.monotonic() - start > timeout_s:
                    raise LeaseTimeout(
                        f"GPU {busy} is still in use by {self.holder(busy)} after {timeout_s:.0f} s "
                        f"(lock {self._path(busy)}); {what} did not start"
                    ) from None
                time.sleep(self.poll_s)
            note = f"pid {os.getpid()}: {what}\n".encode()
            for gpu, fd in zip(wanted, fds, strict=True):
                os.ftruncate(fd, 0)
                os.pwrite(fd, note, 0)
                self.held.append(gpu)
            yield time.monotonic() - start
        finally:
            for fd in reversed(fds):
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            for gpu in wanted:
                if gpu in self.held:
                    self.held.remove(gpu)
