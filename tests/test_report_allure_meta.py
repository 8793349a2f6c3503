"""environment.properties, categories.json, executor.json, summary HTML, stable identities (issue 14 item 1)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pytest_p2p.plugin.allure_item import multiline_message, readable, stable_identity
from pytest_p2p.report.allure_meta import executor_from_env, markdown_to_html, properties_text, write_allure_meta

GITHUB = {"GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": "123", "GITHUB_RUN_NUMBER": "7", "GITHUB_REPOSITORY": "o/r",
          "GITHUB_SERVER_URL": "https://github.com", "GITHUB_WORKFLOW": "p2p-nightly", "RUNNER_NAME": "gpu-box-1"}


def test_executor_from_github_actions_and_nothing_elsewhere() -> None:
    ex = executor_from_env(GITHUB)
    assert ex == {"name": "GitHub Actions (gpu-box-1)", "type": "github", "url": "https://github.com/o/r",
                  "buildOrder": 7, "buildName": "p2p-nightly #7",
                  "buildUrl": "https://github.com/o/r/actions/runs/123"}
    assert executor_from_env({}) is None


def test_meta_files_written_and_user_categories_kept(tmp_path: Path) -> None:
    written = write_allure_meta(tmp_path, {"rig": "h200", "GPUs": "GPU0 H200 0000:00:06.0", "empty": ""}, GITHUB)
    assert {p.name for p in written} == {"environment.properties", "categories.json", "executor.json"}
    props = (tmp_path / "environment.properties").read_text()
    assert props == "rig=h200\nGPUs=GPU0 H200 0000\\:00\\:06.0\n"
    names = [c["name"] for c in json.loads((tmp_path / "categories.json").read_text())]
    assert "Infrastructure (server, probe or GPU could not run)" in names and "Uplift threshold not met" in names
    (tmp_path / "categories.json").write_text("[]")
    write_allure_meta(tmp_path, {}, {})
    assert (tmp_path / "categories.json").read_text() == "[]"
    assert properties_text({"a b": "x=y\nz"}) == "a_b=x\\=y z\n"


def test_summary_markdown_as_html() -> None:
    md = "# T\n\n> **SIMULATED**: demo\n\n| A | B |\n|---|---|\n| 1 | 2 |\n\n- x `y`\n\n```\nNCCL INFO via P2P\n```\n"
    out = markdown_to_html(md)
    assert "<h1>T</h1>" in out and "<table><tr><th>A</th><th>B</th></tr>" in out and "<td>2</td>" in out
    assert "<li>x <code>y</code></li>" in out and "<pre>NCCL INFO via P2P</pre>" in out
    assert "<blockquote><b>SIMULATED</b>: demo</blockquote>" in out and "|---|" not in out


def _item(module: str, nodeid: str, param_id: str) -> Any:
    return SimpleNamespace(module=SimpleNamespace(__name__=module), cls=None, originalname="test_topology",
                           name=f"test_topology[{param_id}]", nodeid=nodeid, callspec=SimpleNamespace(id=param_id))


def test_identity_does_not_move_with_the_rootdir() -> None:
    a = stable_identity(_item("pytest_p2p.checks.test_evidence", "checks/test_evidence.py::test_topology[x]", "x"))
    b = stable_identity(_item("pytest_p2p.checks.test_evidence", "test_evidence.py::test_topology[x]", "x"))
    c = stable_identity(_item("pytest_p2p.checks.test_evidence", "test_evidence.py::test_topology[y]", "y"))
    assert a == b and a.full_name == "pytest_p2p.checks.test_evidence#test_topology"
    assert c.history_id != a.history_id and c.test_case_id == a.test_case_id


def test_readable_parameters_and_messages() -> None:
    arm = SimpleNamespace(name="p2p_on")
    assert readable((0, 1)) == "gpu0-gpu1" and readable(SimpleNamespace(pair=(2, 3), arm=arm)) == "gpu2-gpu3 p2p_on"
    assert readable(SimpleNamespace(arm="p2p_off", point="c8")) == "p2p_off-c8"
    msg = "regression vs baseline 'accepted': output_throughput -9 % | mean_tpot_ms +8 % | p99_itl_ms +12 %"
    assert multiline_message(msg) == ("regression vs baseline 'accepted':\n  - output_throughput -9 %\n"
                                      "  - mean_tpot_ms +8 %\n  - p99_itl_ms +12 %")
    assert multiline_message("one | two") == "one | two"
