"""The suite is hermetic (issue 10 item 3): NVML off for every child, tests marked gpu run only when asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")
TESTS = """
import os
import pytest

def test_nvml_switch():
    print("NVML=" + os.environ.get("PYTEST_P2P_NVML", "<unset>"))

@pytest.mark.gpu
def test_needs_a_gpu():
    pass
"""


def test_this_session_and_its_children_have_nvml_off() -> None:
    if os.environ.get("P2P_TEST_REAL_GPU") == "1":
        pytest.skip("P2P_TEST_REAL_GPU=1: the suite reads the real driver on purpose")
    assert os.environ.get("PYTEST_P2P_NVML") == "off"


@pytest.mark.parametrize("real_gpu", [False, True])
def test_gpu_marked_tests_skip_unless_asked(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                            real_gpu: bool) -> None:
    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)  # what a fresh CI shell has; the conftest sets it
    if real_gpu:
        monkeypatch.setenv("P2P_TEST_REAL_GPU", "1")
    else:
        monkeypatch.delenv("P2P_TEST_REAL_GPU", raising=False)
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_hermetic=TESTS)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "-s")
    out = r.stdout.str()
    if real_gpu:
        r.assert_outcomes(passed=2)
        assert "NVML=<unset>" in out
    else:
        r.assert_outcomes(passed=1, skipped=1)
        assert "NVML=off" in out
        assert "run with P2P_TEST_REAL_GPU=1" in out
