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
from pytest_p2p.campaign.progress import Progress

@pytest.fixture
def campaign(request):
    p = Progress.for_config(request.config, "demo gpu0-gpu1", 2)
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
