"""Installed but not asked for, the plugin is inert (issue 10 item 4); asked for, it activates every stage.

Each run is a real pytest subprocess in an unrelated pytester project, so what is
imported, printed, registered and reordered is what a user of that project would get.
A conftest records, on the controller and on each test's process, which pytest_p2p
modules are imported, whether pynvml is, which stage hook modules are registered and
which plugins implement ``pytest_xdist_make_scheduler``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_p2p.options import TABLE
from pytest_p2p.plugin import STAGES, selects_p2p

RECORDER = '''
import json, os, sys
from pathlib import Path

STAGES = {stages!r}

def _state(config):
    pm = config.pluginmanager
    return {{
        "modules": sorted(m for m in sys.modules if m == "pytest_p2p" or m.startswith("pytest_p2p.")),
        "pynvml": "pynvml" in sys.modules,
        "stages": [s for s in STAGES if pm.has_plugin(s)],
        "schedulers": sorted(i.plugin_name for i in pm.hook.pytest_xdist_make_scheduler.get_hookimpls())
                      if hasattr(pm.hook, "pytest_xdist_make_scheduler") else [],
    }}

def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        Path("controller.json").write_text(json.dumps(_state(session.config)))

def pytest_runtest_call(item):
    name = "worker-" + getattr(item.config, "workerinput", {{}}).get("workerid", "main") + ".json"
    Path(name).write_text(json.dumps(_state(item.config)))
'''

TESTS = '''
import pytest

def test_error_counters():
    pass

def test_zeta():
    pass

@pytest.mark.p2p
def test_marked_p2p():
    pass
'''


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An unrelated project: no PYTEST_P2P_* setting of the option table in the environment."""
    for opt in TABLE:
        if opt.env:
            monkeypatch.delenv(opt.env, raising=False)
    pytester.makeconftest(RECORDER.format(stages=list(STAGES)))
    pytester.makepyfile(test_unrelated=TESTS)
    return pytester


def _read(project: pytest.Pytester, name: str) -> dict[str, object]:
    return json.loads((Path(project.path) / name).read_text())


def _p2p_lines(out: str) -> list[str]:
    """Lines pytest-p2p would print (the 'plugins:' line is pytest's own list of installed plugins)."""
    own = ("plugins:", "rootdir:", "configfile:", "cachedir:")  # pytest's header; the tmp path has the test name
    return [ln for ln in out.splitlines() if "p2p" in ln.lower() and not ln.startswith(own) and "::test_" not in ln]


def _assert_inert(project: pytest.Pytester, out: str, state: dict[str, object]) -> None:
    assert _p2p_lines(out) == [], out
    modules = state["modules"]
    assert isinstance(modules, list) and len(modules) <= 3, modules
    assert set(modules) <= {"pytest_p2p", "pytest_p2p.plugin", "pytest_p2p.options"}, modules
    assert state["pynvml"] is False
    assert state["stages"] == []
    assert not [s for s in state["schedulers"] if "p2p" in str(s)], state["schedulers"]  # type: ignore[attr-defined]


def test_unrelated_verbose_run_is_inert(project: pytest.Pytester) -> None:
    r = project.runpytest_subprocess("-v", "-p", "no:cacheprovider", "-p", "no:randomly")
    r.assert_outcomes(passed=3)
    out = r.stdout.str()
    _assert_inert(project, out + r.stderr.str(), _read(project, "worker-main.json"))
    _assert_inert(project, out, _read(project, "controller.json"))
    # no reordering: test_error_counters keeps its place (the p2p checks move it last)
    assert out.index("test_error_counters PASSED") < out.index("test_zeta PASSED")


def test_not_p2p_expression_is_inert(project: pytest.Pytester) -> None:
    r = project.runpytest_subprocess("-v", "-p", "no:cacheprovider", "-m", "not p2p")
    r.assert_outcomes(passed=2, deselected=1)
    _assert_inert(project, r.stdout.str(), _read(project, "worker-main.json"))


def test_xdist_keeps_its_own_scheduler_and_workers_stay_inert(project: pytest.Pytester) -> None:
    r = project.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup")
    r.assert_outcomes(passed=3)
    _assert_inert(project, r.stdout.str(), _read(project, "controller.json"))
    workers = list(Path(project.path).glob("worker-gw*.json"))
    assert workers
    for w in workers:
        _assert_inert(project, "", json.loads(w.read_text()))


@pytest.mark.parametrize("how", ["-m p2p", "flag", "env", "ini", "opt-in plugin", "p2p_enable"])
def test_a_p2p_run_activates_every_stage(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                         how: str) -> None:
    args = ["-p", "no:cacheprovider", "-p", "no:randomly"]
    results = str(Path(project.path) / "res")
    if how == "-m p2p":
        args += ["-m", "p2p"]
    elif how == "flag":
        args += ["--p2p-results", results]
    elif how == "env":
        monkeypatch.setenv("PYTEST_P2P_RESULTS", results)
    elif how == "ini":
        project.makeini(f"[pytest]\np2p_results = {results}\n")
    elif how == "opt-in plugin":
        args += ["-p", "pytest_p2p.plugin.active"]
    else:
        project.makeini("[pytest]\np2p_enable = true\n")
    r = project.runpytest_subprocess(*args)
    r.assert_outcomes(passed=1, deselected=2) if how == "-m p2p" else r.assert_outcomes(passed=3)
    assert "p2p rig:" in r.stdout.str()
    state = _read(project, "controller.json")
    assert state["stages"] == list(STAGES)
    assert any("campaign" in str(s) for s in state["schedulers"])  # type: ignore[attr-defined]


def test_p2p_enable_false_is_not_a_p2p_run(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\np2p_enable = false\n")
    r = project.runpytest_subprocess("-p", "no:cacheprovider")
    r.assert_outcomes(passed=3)
    _assert_inert(project, r.stdout.str(), _read(project, "controller.json"))


def test_xdist_workers_follow_the_controller(project: pytest.Pytester) -> None:
    r = project.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "-m", "p2p or slow")
    r.assert_outcomes(passed=1)  # xdist's summary does not count deselected tests
    assert _read(project, "controller.json")["stages"] == list(STAGES)
    workers = list(Path(project.path).glob("worker-gw*.json"))
    assert workers and all(json.loads(w.read_text())["stages"] == list(STAGES) for w in workers)


@pytest.mark.parametrize(("expr", "p2p_run"), [
    ("p2p", True), ("p2p or slow", True), ("gpu and p2p", True), ("(p2p)", True), ("not (not p2p)", True),
    ("not p2p", False), ("slow and not p2p", False), ("slow", False), ("p2p2", False), ("p2p and not p2p", False),
])
def test_mark_expression_names_p2p_positively(expr: str, p2p_run: bool) -> None:
    assert selects_p2p(expr) is p2p_run
