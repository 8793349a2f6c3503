"""SIGTERM and SIGHUP end a p2p run the way Ctrl-C does.

Why: by default SIGTERM (a CI job cancelled or timed out, ``kill``) and SIGHUP (the
terminal closed) end Python at once — no ``finally``, no fixture teardown, no ``atexit``.
The stand-in or vLLM server is then re-parented to init and keeps the GPUs, and
``run.json`` stays ``running`` for ever. Turned into ``KeyboardInterrupt`` in the main
thread, they unwind like Ctrl-C: servers are torn down, ``run.json`` says ``interrupted``
with the missing reps, and :func:`exit_status` gives the conventional ``128 + signal``
exit code of a job cancelled by that signal.

A second signal while the first one unwinds is recorded but does not raise again, so it
cannot cut a teardown short (CI follows up with SIGKILL if it must). A handler someone
else installed is left alone.

Starting a child is two steps: ``Popen`` forks and execs, then the caller records the
process where its teardown will find it. An interrupt landing between the two (Python
runs handlers between any two bytecodes, also inside ``Popen`` while it waits for the
exec) leaves a child that nobody tears down. :func:`held` closes that gap: inside it an
interrupt is recorded and raised when the block ends, after the child is recorded.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Protocol

#: the signals treated like SIGINT (SIGHUP where the platform has it)
SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None)

_received: list[int] = []
_holding: list[bool] = []  # one entry per open held() block (main thread only)
_held: list[int] = []  # interrupts that came in inside a held() block, raised when it ends


def _handler(signum: int, frame: FrameType | None) -> None:
    first = not _received
    _received.append(signum)
    if first:
        if _holding:
            _held.append(signum)
            return
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


def _hold_sigint(signum: int, frame: FrameType | None) -> None:
    _held.append(signum)


def _ours(handler: object) -> bool:
    return handler is _handler


def install() -> list[tuple[int, object]]:
    """Treat SIGTERM/SIGHUP like SIGINT from now on; returns what to :func:`restore` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    previous: list[tuple[int, object]] = []
    for sig in SIGNALS:
        current = signal.getsignal(sig)
        if current in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _handler)
            previous.append((sig, current))
    return previous


def restore(previous: list[tuple[int, object]]) -> None:
    """Put back the handlers :func:`install` replaced (only where ours is still installed)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, handler in previous:
        if _ours(signal.getsignal(sig)):
            signal.signal(sig, handler)  # type: ignore[arg-type]  # a handler getsignal returned


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM/SIGHUP raise ``KeyboardInterrupt`` inside the block (and the block's teardown runs)."""
    previous = install()
    try:
        yield
    finally:
        restore(previous)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP inside the block raise ``KeyboardInterrupt`` when it ends, not in it.

    For the few statements that start a child and record it for teardown (see the module
    docstring). Keep the block short: an interrupt waits for it. Off the main thread it
    does nothing -- Python runs signal handlers in the main thread only, so no interrupt
    can land in another thread's block.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    swapped = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if swapped:
        signal.signal(signal.SIGINT, _hold_sigint)
    _holding.append(True)
    try:
        yield
    finally:
        _holding.pop()
        if swapped:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if _held and not _holding:  # the interrupt wins over an error the block raised (kept as context)
            sig = _held[0]
            _held.clear()
            name = "SIGINT" if sig == signal.SIGINT else signal.Signals(sig).name
            raise KeyboardInterrupt(f"{name} received")


def checkpoint() -> None:
    """Raise ``KeyboardInterrupt`` again if a terminating signal came in.

    Python runs a signal handler between any two bytecodes, also inside a destructor or a
    ``weakref`` callback, where a raised exception is only printed as "unraisable" and lost.
    A campaign calls this between reps and points, so such a lost interrupt still stops it.
    """
    sig = received()
    if sig is not None:
        raise KeyboardInterrupt(f"{signal.Signals(sig).name} received")


def interrupted_by(exc: BaseException) -> bool:
    """Whether ``exc`` is how an interrupt surfaced: a ``KeyboardInterrupt`` anywhere in its
    cause/context chain, or any exception after a terminating signal came in.

    Why: Python wraps what a signal handler raises when it lands in some places — inside a
    dataclass being defined during an import it reads ``RuntimeError: Error calling
    __set_name__``. Judged by its type alone, a cancelled job would be reported as failed.
    """
    if received() is not None:
        return True
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


class TracebackEntry(Protocol):
    """What :func:`has_line` reads of pytest's ``TracebackEntry``."""

    @property
    def lineno(self) -> int: ...


def has_line(entry: TracebackEntry) -> bool:
    """Whether pytest can render this traceback entry (its ``lineno`` needs ``tb_lineno``).

    A signal handled at an instruction that has no line (Python 3.11+) leaves a frame whose
    ``tb_lineno`` is None; pytest's interrupt repr raises TypeError on it, so the campaign
    hooks filter such entries out before pytest renders a KeyboardInterrupt.
    """
    try:
        return isinstance(entry.lineno, int)
    except TypeError:
        return False


def received() -> int | None:
    """The first terminating signal received in this process, if any."""
    return _received[0] if _received else None


def exit_status() -> int | None:
    """``128 + signal`` (143 for SIGTERM, 129 for SIGHUP) after a terminating signal, else ``None``."""
    sig = received()
    return None if sig is None else 128 + sig


def reset() -> None:
    """Forget received signals (tests run several sessions in one process)."""
    _received.clear()
    _held.clear()


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """The process's SIGINT/SIGTERM/SIGHUP handlers as they were before the block, whatever it installs.

    Why: ``ray.init`` replaces the SIGTERM handler with one that exits the process, and keeps it
    after ``ray.shutdown``: a cancelled CI job would then skip tearing down servers and probes, and
    every later campaign in the process would die on SIGTERM instead of unwinding (issue 27). Main
    thread only, like every handler.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = [(sig, signal.getsignal(sig)) for sig in (signal.SIGINT, *SIGNALS)]
    try:
        yield
    finally:
        for sig, handler in saved:
            if handler is not None:
                signal.signal(sig, handler)
