"""The built-in multi-node checks, run as a user runs them, on the seed rig's recorded node trees (no Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RIG = ROOT / "fixtures" / "rigs" / "seed004-trinity-2node.yaml"


def _run(pytester: pytest.Pytester, tree_b: str) -> pytest.RunResult:
    text = RIG.read_text().replace("../sysfs/", f"{ROOT / 'fixtures' / 'sysfs'}/")
    text = text.replace("sysfs/trinity-b\n", f"sysfs/{tree_b}\n")
    rig = pytester.path / "rig.yaml"
    rig.write_text(text)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--pyargs", "pytest_p2p", "-m", "p2p",
                                         "--p2p-rig", str(rig), "-k", "test_multinode", "-rA")


def test_healthy_recorded_nodes_pass_and_probes_skip_without_a_cluster(pytester: pytest.Pytester,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    r = _run(pytester, "trinity-b")
    r.assert_outcomes(passed=1, skipped=2)
    assert "replay: node evidence read from the rig's recorded sysfs trees" in r.stdout.str()


@pytest.mark.parametrize(("tree", "text"), [("trinity-b_no_peermem", "trinity-b: nvidia_peermem not loaded"),
                                            ("trinity-b_half_rate", "port 1 at 100 Gb/s, expected 200 Gb/s")])
def test_broken_node_fails_the_evidence_check(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                              tree: str, text: str) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    r = _run(pytester, tree)
    r.assert_outcomes(failed=1, skipped=2)
    assert text in r.stdout.str() and "Traceback" not in r.stdout.str()
