"""JUnit properties with the numbers, and no PytestWarning under the default xunit2 family (issue 14 item 4)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_p2p.plugin.junit_props import campaign_properties

TESTS = """
import pytest

@pytest.mark.p2p
def test_busbw(request):
    request.node.user_properties.append(("p2p.busbw_gbs", 261.4))
    request.node.user_properties.append(("p2p_probe_source", "replay"))

def test_other(record_testsuite_property):
    record_testsuite_property("unrelated", "kept")
"""


def _run(pytester: pytest.Pytester, *args: str) -> ET.Element:
    pytester.makepyfile(TESTS)
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest("-p", "pytest_p2p.plugin.report", f"--junitxml={xml}", "-p", "no:cacheprovider",
                                "-W", "error:record_property:pytest.PytestWarning", *args)
    result.assert_outcomes(passed=2)
    assert "PytestWarning" not in result.stdout.str()
    return ET.parse(xml).getroot()


def test_xunit2_numbers_are_suite_properties(pytester: pytest.Pytester) -> None:
    root = _run(pytester)
    suite = root.find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["test_busbw p2p.busbw_gbs"] == "261.4"
    assert props["test_busbw p2p_probe_source"] == "replay" and props["unrelated"] == "kept"
    assert all(tc.find("properties") is None for tc in suite.iter("testcase"))  # the xunit2 schema


def test_xunit1_keeps_them_on_the_testcase(pytester: pytest.Pytester) -> None:
    root = _run(pytester, "-o", "junit_family=xunit1")
    case = next(tc for tc in root.iter("testcase") if tc.get("name") == "test_busbw")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props == {"p2p.busbw_gbs": "261.4", "p2p_probe_source": "replay"}


def test_campaign_properties_name_uplift_verdict_and_throughput() -> None:
    summary = {"pair": {"key": "gpu0-gpu1"}, "kind": "model", "simulated": True,
               "uplift": [{"point": "c8", "estimate": 0.139, "passed": True},
                          {"point": "c1", "estimate": None, "passed": None}],
               "scenarios": [{"arm": "p2p_on", "point": "c8", "metrics": {"output_throughput": {"mean": 190.88}}}]}
    props = dict(campaign_properties(summary))
    assert props == {"p2p.gpu0-gpu1.c8.uplift": "+13.90%", "p2p.gpu0-gpu1.c8.verdict": "pass",
                     "p2p.gpu0-gpu1.c1.verdict": "inconclusive", "p2p.gpu0-gpu1.c8.p2p_on.output_throughput": "190.9",
                     "p2p.gpu0-gpu1.simulated": "true"}


def _published_run(tmp_path: Path, **meta: object) -> Path:
    """A one-point run dir (+10 % at c1), as a campaign leaves it before any render."""
    from pytest_p2p.results.write import RunDir

    rd = RunDir.create(tmp_path, "rig", "gpu0-gpu1", "model", run_id="run1")
    rd.write_run_meta({"arms": {"p2p_on": {}, "p2p_off": {}}, "points": ["c1"], "reps": 1, "status": "complete",
                       **meta})
    rd.write_rep("p2p_on", "c1", 1, {"output_throughput": 110.0})
    rd.write_rep("p2p_off", "c1", 1, {"output_throughput": 100.0})
    return rd.path


def _publishing_conftest(run_dir: Path, prelude: str = "") -> str:
    """A conftest whose ``published`` fixture fires ``pytest_p2p_campaign_finished`` for ``run_dir``."""
    return f"""
import pytest
from pathlib import Path
from pytest_p2p.plugin import hookspecs
from pytest_p2p.campaign.outcome import CampaignOutcome
{prelude}
def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(hookspecs)

@pytest.fixture
def published(request):
    request.config.hook.pytest_p2p_campaign_finished(
        config=request.config,
        outcome=CampaignOutcome(run_dir=Path({str(run_dir)!r}), pair_key="gpu0-gpu1", status="complete",
                                simulated=False))
"""


def test_campaign_finished_renders_and_records(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Contract 6 from the subscriber's side: the hook renders the run dir and the terminal shows it."""
    run_dir = _published_run(tmp_path)
    pytester.makeconftest(_publishing_conftest(run_dir))
    pytester.makepyfile("def test_x(published):\n    pass\n")
    xml = pytester.path / "j.xml"
    result = pytester.runpytest("-p", "pytest_p2p.plugin.report", f"--junitxml={xml}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*= p2p results at a glance =*", "c1 *| p2p_on / p2p_off |  +10.0 % |*INCONCLUSIVE"])
    assert (run_dir / "summary.md").is_file()
    assert 'name="p2p.gpu0-gpu1.c1.uplift" value="+10.00%"' in xml.read_text()


def test_the_summary_is_rendered_once_after_the_probes(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Issue 26: in the default order the probes land after the campaign; the summary was rendered twice.

    The campaign publishes in one test, a probe result for its pair is written by a later
    one, and the Allure/terminal readers run in between: one render, at the end, after the probe.
    """
    run_dir = _published_run(tmp_path, pair={"key": "gpu0-gpu1"})
    probes = tmp_path / "probes" / "gpu0-gpu1"
    pytester.makeconftest(_publishing_conftest(run_dir, prelude=f"""from pytest_p2p.report import render

_real = render.render_report

def counting(run_dir, **kw):
    with open({str(tmp_path / "renders.txt")!r}, "a") as f:
        f.write(f"{{Path({str(probes)!r}).is_dir()}} ")
    return _real(run_dir, **kw)

render.render_report = counting
"""))
    pytester.makepyfile(f"""
from pathlib import Path
from pytest_p2p.plugin.report import judged_numbers

def test_campaign(published):
    assert "+10.0 %" in judged_numbers(Path({str(run_dir)!r}), "c1")  # read mid-session, not rendered

def test_probes_after():
    Path({str(probes)!r}).mkdir(parents=True)
    (Path({str(probes)!r}) / "allreduce.json").write_text("{{}}")
""")
    # a subprocess: the counting wrapper must be the render_report of a fresh interpreter
    result = pytester.runpytest_subprocess("-p", "pytest_p2p.plugin.report", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*= p2p results at a glance =*", "c1 *| p2p_on / p2p_off |  +10.0 % |*"])
    assert (tmp_path / "renders.txt").read_text() == "True "  # once, after the probe result existed
    assert (run_dir / "summary.md").is_file()
