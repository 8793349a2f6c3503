"""Allure helpers: real labels/attachments with allure-pytest, silent no-ops without allure."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_p2p.report import allure_attach


class _FakeAllure(types.ModuleType):
    """Records calls the way the allure API receives them."""

    def __init__(self) -> None:
        super().__init__("allure")
        self.calls: list[tuple[str, Any, Any]] = []
        outer = self

        class _Dynamic:
            @staticmethod
            def label(name: str, value: str) -> None:
                outer.calls.append(("label", name, value))

        class _Attach:
            def __call__(self, body: str, name: str, attachment_type: str) -> None:
                outer.calls.append(("attach", name, (body, attachment_type)))

            @staticmethod
            def file(source: str, name: str, attachment_type: str) -> None:
                outer.calls.append(("file", name, (Path(source).name, attachment_type)))

        self.dynamic = _Dynamic()
        self.attach = _Attach()
        self.attachment_type = types.SimpleNamespace(PNG="png", CSV="csv", JSON="json", TEXT="text", HTML="html",
                                                     SVG="svg")


@pytest.fixture
def fake_allure(monkeypatch: pytest.MonkeyPatch) -> _FakeAllure:
    fake = _FakeAllure()
    monkeypatch.setitem(sys.modules, "allure", fake)
    return fake


@pytest.fixture
def no_allure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "allure", None)  # import allure -> ImportError


def _run_dir(tmp_path: Path) -> Path:
    sc = tmp_path / "scenarios" / "p2p_on-c8"
    (tmp_path / "plots").mkdir(parents=True)
    sc.mkdir(parents=True)
    (tmp_path / "summary.md").write_text("# t\n")
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "plots" / "uplift.png").write_bytes(b"\x89PNG")
    (sc / "transport_proof.json").write_text("{}")
    (sc / "telemetry_run1.csv").write_text("wall_epoch\n")
    (sc / "telemetry_run2.csv").write_text("wall_epoch\n")
    return tmp_path


def test_labels_and_attachments_reach_allure(fake_allure: _FakeAllure, tmp_path: Path) -> None:
    assert allure_attach.available()
    assert allure_attach.labels(rig="demo-h200", pair="gpu0-gpu1", arm="p2p_on", concurrency=8, point=None) == 4
    assert allure_attach.attach_json({"transport": "P2P/CUMEM"}, "transport proof")
    run = _run_dir(tmp_path)
    assert allure_attach.attach_scenario(run, "p2p_on", "c8") == 3  # no aggregate.json on disk
    assert allure_attach.attach_run_dir(run) == 3  # no summary.csv on disk
    assert fake_allure.calls[:4] == [("label", "rig", "demo-h200"), ("label", "pair", "gpu0-gpu1"),
                                     ("label", "arm", "p2p_on"), ("label", "concurrency", "8")]
    assert fake_allure.calls[4] == ("attach", "transport proof", ('{\n  "transport": "P2P/CUMEM"\n}', "json"))
    files = [(c[1], c[2][1]) for c in fake_allure.calls if c[0] == "file"]
    assert files == [("p2p_on-c8/transport_proof.json", "json"), ("p2p_on-c8/telemetry_run1.csv", "csv"),
                     ("p2p_on-c8/telemetry_run2.csv", "csv"), ("summary.md", "text"), ("summary.json", "json"),
                     ("plots/uplift.png", "png")]


def test_everything_is_a_noop_without_allure(no_allure: None, tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    assert not allure_attach.available()
    assert allure_attach.labels(rig="x", arm="y") == 0
    assert allure_attach.attach_file(run / "summary.md") is False
    assert allure_attach.attach_json({}, "x") is False
    assert allure_attach.attach_scenario(run, "p2p_on", "c8") == 0
    assert allure_attach.attach_run_dir(run) == 0


def test_missing_file_is_skipped(fake_allure: _FakeAllure, tmp_path: Path) -> None:
    assert allure_attach.attach_file(tmp_path / "absent.png") is False
    assert fake_allure.calls == []


P2P_TESTS = """
import pytest
from pytest_p2p.report import allure_attach

@pytest.mark.p2p(rig="demo-h200")
@pytest.mark.parametrize("arm", ["p2p_on", "p2p_off"])
@pytest.mark.parametrize("concurrency", [8])
def test_uplift(arm, concurrency, tmp_path):
    p = tmp_path / "transport_proof.json"
    p.write_text('{"transport": "P2P/CUMEM"}')
    assert allure_attach.attach_file(p)

def test_plain():
    pass

@pytest.mark.p2p
@pytest.mark.parametrize("pair", [(0, 1)])
@pytest.mark.parametrize("scenario", ["p2p_off-s8KiB"])
def test_scenario(pair, scenario):
    pass
"""


def test_hooks_label_p2p_tests_in_real_allure_results(pytester: pytest.Pytester) -> None:
    pytest.importorskip("allure_pytest")
    pytester.makepyfile(P2P_TESTS)
    out_dir = pytester.path / "allure-results"
    result = pytester.runpytest_subprocess("-p", "pytest_p2p.plugin.report", f"--alluredir={out_dir}",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    results = [json.loads(p.read_text()) for p in out_dir.glob("*-result.json")]
    by_name = {r["name"]: r for r in results}
    labelled = [r for r in results if r["fullName"].endswith("#test_uplift")]
    assert len(labelled) == 2
    for r in labelled:
        labels = {lab["name"]: lab["value"] for lab in r["labels"]}
        assert labels["rig"] == "demo-h200" and labels["concurrency"] == "8"
        assert labels["arm"] in ("p2p_on", "p2p_off")
        assert [a["name"] for a in r["attachments"]] == ["transport_proof.json"]
        assert r["name"] == f"uplift (p2p) — {labels['arm']} · 8"  # readable, unique: every parameter in it
        assert {p["name"]: p["value"] for p in r["parameters"]}["arm"] == labels["arm"]  # unquoted
        assert labels["epic"] == "p2p" and labels["feature"] == "uplift" and labels["severity"] == "critical"
    scen_result = next(r for r in results if r["fullName"].endswith("#test_scenario"))
    scen = {lab["name"]: lab["value"] for lab in scen_result["labels"]}
    assert {k: scen.get(k) for k in ("pair", "arm", "point", "size")} == {
        "pair": "gpu0-gpu1", "arm": "p2p_off", "point": "s8KiB", "size": "8KiB"}
    plain = {lab["name"] for lab in by_name["test_plain"]["labels"]}
    assert not plain & {"rig", "arm", "concurrency"}


def test_tests_pass_without_allure_installed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(P2P_TESTS.replace("assert allure_attach.attach_file(p)",
                                          "assert not allure_attach.attach_file(p)"))
    pytester.makeconftest("import sys\nsys.modules['allure'] = None\n")
    result = pytester.runpytest_subprocess("-p", "pytest_p2p.plugin.report", "-p", "no:allure_pytest",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_a_passed_probe_check_shows_its_numbers_in_allure(pytester: pytest.Pytester) -> None:
    """Issue 26: a passed busbw/latency/uplift/copy check showed no number in Allure; the failure message did.

    Through real allure-pytest: the probe checks' decision step writes the verdict and each
    judged line (estimate, interval, threshold) into the test's description, pass or fail.
    """
    pytest.importorskip("allure_pytest")
    pytester.makepyfile(test_probe_like="""
from pytest_p2p.checks.test_probes import _decide
from pytest_p2p.probes.judge import Judgement
from pytest_p2p.stats.decide import Outcome

def test_busbw_like(request):
    _decide(request.config, "arm p2p_on: busbw against probe.thresholds.busbw_min_gbs",
            [Judgement(Outcome.PASS,
                       "256 MiB: busbw 190.1 GB/s (95 % CI 188.2 .. 191.9 GB/s, 20 trials) >= min 150 GB/s")])

def test_uplift_like(request):
    _decide(request.config, "uplift of p2p_on over p2p_off against the rig's margin",
            [Judgement(Outcome.FAIL, "8 KiB: uplift +2.0 % (95 % CI +1.0 % .. +3.0 %, 20 trials) < min 10 %")])
""")
    out = pytester.path / "allure-results"
    result = pytester.runpytest_subprocess(f"--alluredir={out}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    described = {}
    for f in out.glob("*-result.json"):
        data = json.loads(f.read_text())
        described[data["name"]] = data.get("description", "")
    assert described["test_busbw_like"].startswith("PASS: arm p2p_on: busbw")
    assert "PASS: 256 MiB: busbw 190.1 GB/s (95 % CI 188.2 .. 191.9 GB/s" in described["test_busbw_like"]
    assert "FAIL: 8 KiB: uplift +2.0 % (95 % CI +1.0 % .. +3.0 %" in described["test_uplift_like"]


def test_describe_judged_is_a_no_op_without_allure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "allure", None)  # import allure -> ImportError
    assert allure_attach.describe_judged("x", "pass", [("pass", "1 GB/s")]) is False
