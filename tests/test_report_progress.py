"""The campaign's progress line reaches a real terminal without ``-s`` (issue 14 item 3).

The line is written during fixture setup, where pytest captures output at the file
descriptor; it is visible only because Progress suspends capture for each write, as
pytest's live logging does. The control case writes the same line with capture left on
and shows that it is swallowed, so the first test cannot pass by accident.
"""

from __future__ import annotations

import pytest

CONFTEST = """
import pytest
from pytest_p2p.plugin.campaign import progress_for

@pytest.fixture
def campaign(request):
    p = progress_for(request.config, "demo gpu0-gpu1", 2)
    if request.config.getoption("--no-suspend", default=False):
        p.capture = None
    p.update("p2p_on-c1", 1, 1)
    p.step()
    p.update("p2p_off-c1", 1, 1, "starting server")
    p.step()
    p.finish("[p2p] demo: campaign complete")
    return p

def pytest_addoption(parser):
    parser.addoption("--no-suspend", action="store_true")
"""

TEST = """
def test_uses_campaign(campaign):
    assert campaign.done == 2
"""


def _run(pytester: pytest.Pytester, *args: str) -> str:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_progress=TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    assert result.ret == 0
    return result.stdout.str()


def test_progress_is_visible_without_dash_s(pytester: pytest.Pytester) -> None:
    out = _run(pytester)
    assert "[p2p] demo gpu0-gpu1: scenario 1/2 p2p_on-c1 rep 1/1" in out
    assert "scenario 2/2 p2p_off-c1 rep 1/1 starting server" in out
    assert "ETA" in out and "[p2p] demo: campaign complete" in out


def test_without_suspending_capture_the_line_is_swallowed(pytester: pytest.Pytester) -> None:
    out = _run(pytester, "--no-suspend")
    assert "scenario 1/2" not in out


def test_quiet_and_workers_print_nothing(pytester: pytest.Pytester) -> None:
    out = _run(pytester, "-qq")
    assert "scenario 1/2" not in out


class _Terminal:
    """A terminal reporter that records lines and tells the test when a heartbeat was written."""

    isatty = False

    def __init__(self) -> None:
        import threading

        self.lines: list[str] = []
        self.beat = threading.Event()

    def write_line(self, line: str, **markup: bool) -> None:
        self.lines.append(line)
        if " ... " in line:
            self.beat.set()

    def rewrite(self, line: str, **markup: bool) -> None:
        self.write_line(line)


def test_a_long_silent_phase_says_what_it_waits_for_and_how_long() -> None:
    """Issue 26: the line stopped for 27 s without a message during a server start.

    The phase blocks until the heartbeat has spoken (no timing threshold: the event is the
    signal); afterwards the heartbeat thread is gone, and the next line is the phase's work.
    """
    import threading

    from pytest_p2p.campaign.progress import Progress

    term = _Terminal()
    p = Progress(label="gpu0-gpu1", total=4, reporter=term)
    with p.waiting("start 2", 1, 4, "starting 2 servers (resident)", every_s=0.01) as beat:
        assert term.beat.wait(60), "no heartbeat while the phase was silent"
    assert beat.thread is not None and not beat.thread.is_alive()
    assert "p2p-progress-heartbeat" not in {t.name for t in threading.enumerate()}
    beats = [ln for ln in term.lines if "starting 2 servers (resident) ... " in ln]
    assert beats and beats[0].startswith("[p2p] gpu0-gpu1: scenario 1/4 start 2 rep 1/4 starting 2 servers "
                                         "(resident) ... ") and beats[0].split(" ... ")[1].split(" s")[0].isdigit()
    n = len(term.lines)
    p.update("p2p_on-c1", 1, 4)
    assert term.lines[n:] == [p.lines[-1]]  # nothing more from the stopped phase


def test_the_heartbeat_stops_when_the_phase_work_begins_or_fails() -> None:
    from pytest_p2p.campaign.progress import Progress

    term = _Terminal()
    p = Progress(label="gpu0-gpu1", total=1, reporter=term)
    with pytest.raises(RuntimeError), p.waiting("p2p_on-c1", 1, 1, "starting server", every_s=0.01) as beat:
        raise RuntimeError("server died")
    assert beat.thread is not None and not beat.thread.is_alive()
    with p.waiting("p2p_on-c1", 1, 1, "starting server", every_s=3600) as beat:
        beat.stop()  # as the campaign does once the server is up
        assert beat.thread is not None and not beat.thread.is_alive()


def test_quiet_progress_starts_no_heartbeat_thread() -> None:
    from pytest_p2p.campaign.progress import Progress

    p = Progress(label="gpu0-gpu1", total=1, reporter=None)
    with p.waiting("start 1", 1, 1, "waiting for free VRAM", every_s=0.01) as beat:
        assert beat.thread is None
    assert len(p.lines) == 1 and p.lines[0].startswith("[p2p] gpu0-gpu1: scenario 1/1 start 1 rep 1/1 waiting for "
                                                        "free VRAM | elapsed ")
