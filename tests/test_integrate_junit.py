"""The probe fixtures' ``p2p_probe_source`` property raises no PytestWarning under junit's default xunit2 family
(it used to go through ``record_property``), and lands as a suite property where xunit2 allows it."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def test_probe_source_property_is_xunit2_clean(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    env = {**os.environ, "PYTEST_P2P_NVML": "off"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "p2p", "--pyargs", "pytest_p2p", "-p",
                           "no:cacheprovider", "-q", "-k", "test_busbw or test_p2p_copy", f"--junitxml={xml}",
                           "-W", "error:record_property:pytest.PytestWarning"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "record_property" not in out and "PytestWarning" not in out
    root = ET.parse(xml).getroot()
    assert not [p for tc in root.iter("testcase") for p in tc.iter("properties")]  # xunit2: none in a testcase
    names = {p.get("name", "") for p in root.iter("property")}
    assert any(n.endswith(" p2p_probe_source") and n.startswith("test_busbw[") for n in names), sorted(names)
