"""``signals.held``: an interrupt landing while a child is being started surfaces after it is recorded.

The CI failure this pins (stop 21): SIGHUP landed inside ``Popen`` while the campaign started
the next arm's server; the KeyboardInterrupt left ``launch`` before the server was recorded
for teardown, and a stand-in outlived the cancelled pytest.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from pytest_p2p import signals


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    """Python's own Ctrl-C handling for the test (an xdist worker ignores SIGINT), and SIGHUP at its default:
    under ``nohup`` it is ignored, and ``signals.install`` rightly leaves an ignored SIGHUP alone (a run
    started with nohup asked not to end on a hangup). Both put back afterwards."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    hup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signals.reset()
    yield
    signals.reset()
    signal.signal(signal.SIGHUP, hup)
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_an_interrupt_inside_the_block_is_raised_when_it_ends(sig: signal.Signals) -> None:
    reached: list[str] = []
    with signals.terminate_as_interrupt(), pytest.raises(KeyboardInterrupt, match=f"{sig.name} received"):
        with signals.held():
            signal.pthread_kill(threading.main_thread().ident, sig)
            reached.append("after the signal")  # a handler runs at the next bytecode: it must not raise here
        reached.append("after the block")
    assert reached == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C handling put back


def test_nested_blocks_raise_once_at_the_outermost_end() -> None:
    reached: list[str] = []
    with signals.terminate_as_interrupt(), pytest.raises(KeyboardInterrupt):
        with signals.held():
            with signals.held():
                signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
            reached.append("inner ended")
        reached.append("outer ended")
    assert reached == ["inner ended"]


def test_an_error_in_the_block_gives_way_to_the_interrupt_and_is_kept_as_context() -> None:
    with signals.terminate_as_interrupt(), pytest.raises(KeyboardInterrupt) as info, signals.held():
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        raise OSError("exec failed")
    assert isinstance(info.value.__context__, OSError)


def test_no_interrupt_no_raise_and_handlers_untouched() -> None:
    with signals.terminate_as_interrupt():
        before = signal.getsignal(signal.SIGTERM)
        with signals.held():
            pass
        assert signal.getsignal(signal.SIGTERM) is before
    assert signals.received() is None


def test_off_the_main_thread_it_holds_nothing() -> None:
    """Handlers run in the main thread only: a worker thread's block must not defer the main thread's interrupt."""
    inside = threading.Event()
    release = threading.Event()

    def worker() -> None:
        with signals.held():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert inside.wait(10)
        with signals.terminate_as_interrupt(), pytest.raises(KeyboardInterrupt):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
            for _ in range(1000):  # the handler runs at a bytecode boundary of this (main) thread
                pass
    finally:
        release.set()
        t.join(10)


def test_kept_puts_back_what_a_library_installs() -> None:
    """What ray.init does: a SIGTERM handler of its own that exits, kept after shutdown (issue 27)."""
    import signal

    from pytest_p2p import signals

    before = signal.getsignal(signal.SIGTERM)
    with signals.kept():
        signal.signal(signal.SIGTERM, lambda *_: None)
    assert signal.getsignal(signal.SIGTERM) is before
