"""A killed xdist worker (issue 28 item 4): the crash is named in the p2p summary, its run marked abandoned.

On 4x H100 a worker SIGKILLed mid-campaign left its run directory saying ``running`` forever, and the
summary said nothing of it: only pytest's own "worker 'gw0' crashed". Here a test opens a run the way a
campaign does and then its worker dies (``os._exit``: no teardown, no finally), under real xdist.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("xdist")

DIES = """
import os
from pathlib import Path

from pytest_p2p.results.write import RunDir


def test_dies_mid_campaign():
    RunDir.create(Path(os.environ["RESULTS"]), "crash-rig", "gpu0-gpu1", "probe")
    os._exit(1)


def test_other():
    pass
"""


def test_a_killed_worker_is_named_and_its_run_marked_abandoned(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    results = pytester.path / "results"
    monkeypatch.setenv("RESULTS", str(results))
    pytester.makepyfile(test_dies=DIES)
    r = pytester.runpytest_subprocess("-p", "pytest_p2p.plugin.active", "-n", "2", "-p", "no:cacheprovider",
                                      f"--p2p-results={results}")
    out = r.stdout.str()
    assert "crashed while running" in out
    assert "p2p workers" in out and "abandoned mid-campaign" in out
    (run,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "abandoned"
    assert any("test_dies.py::test_dies_mid_campaign" in e for e in meta["errors"])
