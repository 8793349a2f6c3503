"""The seed report's probe table reaches the main job's summary and terminal, also on the demo rig.

The campaign renders its summary when it ends, before the probe checks run in the default order, and a
replayed session used to write no probe results at all: the demo's summary said "no probe results". Now
the replayed recording is copied into the session's results with a REPLAYED_FROM note, and the summary is
rendered again at the end once probe results are newer than it.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def test_demo_summary_has_the_probe_table_marked_as_replay(pytester: pytest.Pytester, tmp_path: Path) -> None:
    results = tmp_path / "results"
    r = pytester.runpytest_subprocess("-m", "p2p", "--pyargs", "pytest_p2p.checks.test_campaign",
                                      "pytest_p2p.checks.test_probes", f"--p2p-results={results}",
                                      "-p", "no:cacheprovider", timeout=600)
    out = r.stdout.str()
    assert r.ret == 0, out[-3000:]
    assert "P2P copy   | P2P on (peer)" in out and "all-reduce | p2p_off" in out
    assert "probe rows are a replay of" in out and "no probe results" not in out
    (summary,) = results.glob("*_gpu0-gpu1/summary.md")
    text = summary.read_text()
    assert "| P2P copy | P2P on (peer) |" in text and "replay of" in text
    assert (results / "probes" / "gpu0-gpu1" / "REPLAYED_FROM").is_file()
