"""Child processes that die with pytest, even when pytest itself is SIGKILLed.

Why: SIGINT, SIGTERM and SIGHUP unwind pytest (``signals.py``) and teardown kills every
server it started; SIGKILL cannot be caught, so without help every server (the stand-in,
vLLM), probe worker and load process we started is re-parented to init and keeps its port
and GPUs. Linux's ``prctl(PR_SET_PDEATHSIG, SIGTERM)``, set in the child between fork and
exec, makes the kernel send the child SIGTERM the moment its parent dies -- however it
dies. SIGTERM, not SIGKILL, so that vLLM's API server runs its own shutdown, which stops
its EngineCore and workers; whatever still survives (a wedged engine) carries the
``PYTEST_P2P_SERVER_TOKEN`` env marker and is swept at the next launch
(:mod:`pytest_p2p.serve.procs`).

The trap: the kernel sends the signal when the *thread* that forked the child exits, not
the process. So :func:`die_with_parent` arms it only when called from the main thread,
which lives as long as pytest does (fixtures, the campaign runner and the probe and
evidence launchers all start their children there). From any other thread -- one that may
end while its child should live on -- it returns ``None`` and the child is left to the
marker sweep and the ``atexit`` teardown, as before.

A ``preexec_fn`` runs between fork and exec, where a lock held by another thread of ours
(the campaign's telemetry thread) would never be released. This one only calls what was
looked up in the parent (``prctl`` through ctypes, ``getppid``): no import, no lock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up here in the parent: a child between fork and exec must not load libraries."""
    if not sys.platform.startswith("linux"):
        return None  # PR_SET_PDEATHSIG is Linux-only; elsewhere children rely on teardown and the marker sweep
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn: Callable[..., int] = libc.prctl
    except (OSError, AttributeError):
        return None  # a libc without prctl (musl builds have it; a stripped one may not): nothing to arm
    return fn


def set_parent_death_signal(sig: int = signal.SIGTERM, parent: int | None = None) -> bool:
    """Ask the kernel to send ``sig`` to *this* process when its parent (thread) dies; False where unsupported.

    If the parent (``parent``, the pid it had before the fork; default: the current parent)
    is already gone by the time the signal is armed, the signal would never come: then this
    process exits at once with ``128 + sig``.
    Used in a child between fork and exec (:func:`die_with_parent`), and by the stand-in to
    upgrade its own death signal (the setting survives ``exec``).
    """
    prctl = _prctl()
    if prctl is None:
        return False
    parent = os.getppid() if parent is None else parent
    if prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:
        os._exit(128 + int(sig))
    return True


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that makes the child get ``sig`` when we die; else ``None``.

    ``None`` (pass it as is: Popen's default) off Linux, without a usable ``prctl``, and
    when called from a thread other than the main one (see the module docstring). It
    combines with ``start_new_session=True``: the session is set first, then this runs.
    """
    if _prctl() is None:
        return None
    if threading.current_thread() is not threading.main_thread():
        return None  # the signal would fire when this (shorter-lived) thread ends, killing a healthy child

    parent = os.getpid()

    def arm() -> None:
        set_parent_death_signal(sig, parent)

    return arm
