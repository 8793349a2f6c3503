"""The p2p_vllm_server / p2p_openai_client / p2p_load fixtures, end to end in a pytester session on the stand-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from childsignals import default_signals

CONFTEST = """
from pathlib import Path
import pytest
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.serve.config import parse_server
from pytest_p2p.plugin.serve import ServerPlan, set_server_plan

pytest_plugins = ["pytest_p2p.plugin.serve"]

def pytest_configure(config):
    server = parse_server({{"command": ["python", "-m", "pytest_p2p.serve.standin"], "model": "tiny",
                           "args": {{"ttft-ms": 1, "tpot-ms": 0.5, "tensor-parallel-size": 2{extra}}},
                           "startup_timeout_s": 20, "teardown_timeout_s": 2,
                           "load": {{"input_len": 4, "output_len": 4, "num_prompts": 4, "warmup": 1}}}}, "rig.yaml")
    set_server_plan(config, ServerPlan(server=server, pairs=[(0, 1)],
                                       arms={{"p2p_on": PRESETS["p2p_on"], "p2p_off": PRESETS["p2p_off"]}},
                                       results_root=Path(str(config.rootpath)) / "results"))
"""

TESTS = """
import os

def test_load(p2p_load, p2p_vllm_server):
    r = p2p_load(2)
    assert r["completed"] == 4 and r["arm"] == p2p_vllm_server.arm and r["simulated"] is True

def test_client(p2p_openai_client, p2p_vllm_server):
    out = p2p_openai_client.completions.create(model=p2p_vllm_server.model, prompt="a b", max_tokens=3)
    assert out.usage.completion_tokens == 3

def test_attestation(p2p_vllm_server):
    att = p2p_vllm_server.attestation()
    expected = {"p2p_on": "P2P/CUMEM", "p2p_off": "SHM"}[p2p_vllm_server.arm]
    assert att.problems(expected) == []

def test_fails_but_server_survives(p2p_vllm_server):
    assert p2p_vllm_server.arm == "never"
"""


def _launches(root: Path) -> dict[str, int]:
    out = {}
    for log in sorted((root / "results").glob("*/server.log")):
        text = log.read_text()
        out[log.parent.name] = text.count("# pytest-p2p: launching")
        assert text.count("leftover pids none") == out[log.parent.name], text[-2000:]
    return out


def test_session_servers_parametrised_reused_and_torn_down(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.format(extra=""))
    pytester.makepyfile(test_serve=TESTS)
    result = pytester.runpytest("-v", "-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6, failed=2)
    result.stdout.fnmatch_lines(["*test_load?gpu0-gpu1-p2p_on? PASSED*", "*test_load?gpu0-gpu1-p2p_off? PASSED*"])
    # one server per arm for the whole session, each torn down cleanly even though a test failed
    assert _launches(pytester.path) == {"gpu0-gpu1-p2p_on": 1, "gpu0-gpu1-p2p_off": 1}
    saved = list((pytester.path / "results").glob("*/load-*.json"))
    assert len(saved) == 2 and all(json.loads(p.read_text())["completed"] == 4 for p in saved)


def test_server_that_cannot_start_fails_its_tests_with_the_cause(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.format(extra=', "fault": "fail-start=oom"'))
    pytester.makepyfile(test_serve="def test_x(p2p_vllm_server):\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*likely cause: out of GPU memory*"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_server_dying_under_load_keeps_results(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.format(extra=', "fault": "die-after=3"'))
    pytester.makepyfile(test_serve="def test_x(p2p_load):\n    p2p_load(1)\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "p2p_on")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*load results were saved to *, but then: server for arm p2p_on on gpu0-gpu1 "
                                 "(pid *) exited with code 70 while in use*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    (saved,) = (pytester.path / "results").glob("*/load-*.json")
    data = json.loads(saved.read_text())
    assert data["completed"] == 1 and data["failed"] == 3  # readiness + warm-up + 1 measured, then death


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupted_session_tears_servers_down(pytester: pytest.Pytester, sig: str) -> None:
    import signal
    import subprocess
    import sys
    import time

    pytester.makeconftest(CONFTEST.format(extra=', "orphan-child": True'))
    pytester.makepyfile(test_serve="import time\n\ndef test_x(p2p_vllm_server):\n"
                                   "    print('READY', p2p_vllm_server.token, flush=True)\n    time.sleep(120)\n")
    out = pytester.path / "out.txt"
    with open(out, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", "-k", "p2p_on"],
                                cwd=pytester.path, stdout=fh, stderr=subprocess.STDOUT, preexec_fn=default_signals)
    try:
        deadline = time.monotonic() + 30
        while b"READY" not in out.read_bytes():
            assert time.monotonic() < deadline and proc.poll() is None, out.read_text()
            time.sleep(0.1)
        token = out.read_text().split("READY ", 1)[1].split()[0]
        from pytest_p2p.serve.server import find_leftovers

        assert len(find_leftovers(token)) == 2  # the server and its out-of-session child
        proc.send_signal(getattr(signal, sig))
        assert proc.wait(30) != 0
        assert find_leftovers(token) == []
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "leftover pids none" in (pytester.path / "results" / "gpu0-gpu1-p2p_on" / "server.log").read_text()


def test_other_parametrize_marks_do_not_hide_the_server_parametrisation(pytester: pytest.Pytester) -> None:
    """``argnames=`` as a keyword (was an IndexError) and a name merely containing ``p2p_vllm_server``
    (was taken for the test choosing its own servers) both keep the (pair, arm) params."""
    pytester.makeconftest(CONFTEST.format(extra=""))
    pytester.makepyfile(test_serve="""
import pytest

@pytest.mark.parametrize(argnames="n", argvalues=[1])
def test_kw(p2p_vllm_server, n):
    pass

@pytest.mark.parametrize("p2p_vllm_server_note", ["x"])
def test_named(p2p_vllm_server, p2p_vllm_server_note):
    pass
""")
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*test_kw?gpu0-gpu1-p2p_on-1?", "*test_named?gpu0-gpu1-p2p_off-x?"])
    assert result.ret == 0
