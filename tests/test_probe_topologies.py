"""Probe checks on the rigs issue 10 names: one GPU, MIG, a recording from another machine — skips with reasons.

Run through pytester against the snapshot corpus (fixtures/snapshots), so the real session,
rig resolution and probe hooks decide; never an INTERNALERROR.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_p2p.evidence.snapshot import load_snapshot
from pytest_p2p.probes.replay import recording_mismatch

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "fixtures" / "snapshots"
REPLAY = Path(__file__).resolve().parent / "data" / "probes"


def run(pytester: pytest.Pytester, snapshot: str, *args: str, replay: Path = REPLAY) -> pytest.RunResult:
    argv = ["-p", "pytest_p2p.plugin.probes", "--pyargs", "pytest_p2p.checks.test_probes", "-p", "no:cacheprovider",
            "-rs", "-p", "no:randomly", "--p2p-snapshot", str(SNAPSHOTS / snapshot),
            "--p2p-probe-replay", str(replay), *args]
    return pytester.runpytest(*argv)


def _outcomes(result: pytest.RunResult) -> dict[str, int]:
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    return result.parseoutcomes()


def test_one_gpu_probe_checks_skip_with_the_reason(pytester):
    result = run(pytester, "h100x1-pcie.snapshot.json", "-k", "transport or correct or busbw or latency")
    outcomes = _outcomes(result)
    assert result.ret == pytest.ExitCode.OK
    assert outcomes.get("skipped", 0) >= 4 and "failed" not in outcomes and "error" not in outcomes
    result.stdout.fnmatch_lines(["*probes skipped: no GPU pair to check: the rig selects 1 GPU(s)*gpu0*"])


def test_mig_probe_checks_skip_naming_mig(pytester):
    result = run(pytester, "a100x2-mig.snapshot.json", "-k", "transport or correct")
    outcomes = _outcomes(result)
    assert result.ret == pytest.ExitCode.OK and "failed" not in outcomes and "error" not in outcomes
    result.stdout.fnmatch_lines(["*probes skipped*MIG*"])


def test_recording_of_another_machine_is_not_replayed(pytester, tmp_path):
    replay = tmp_path / "probes"
    shutil.copytree(REPLAY, replay)
    for path in replay.rglob("allreduce.json"):  # a recording that says where it was made, as real runs write
        data = json.loads(path.read_text())
        data.setdefault("meta", {})["device_names"] = ["NVIDIA H200", "NVIDIA H200"]
        path.write_text(json.dumps(data))
    result = run(pytester, "rtx4090x4-p2p-patched.snapshot.json", "-k", "transport and gpu0-gpu1", replay=replay)
    outcomes = _outcomes(result)
    assert "passed" not in outcomes and "failed" not in outcomes
    result.stdout.fnmatch_lines(["*the recording was made on NVIDIA H200 + NVIDIA H200*RTX 4090*"])


def test_recording_mismatch_rules():
    h200 = load_snapshot(str(SNAPSHOTS / "h200x2-nvlink.snapshot.json"))
    assert recording_mismatch(["NVIDIA H200", "NVIDIA H200"], h200, (0, 1)) is None
    assert recording_mismatch(["nvidia  h200", "H200"], h200, (0, 1)) is None
    assert recording_mismatch(None, h200, (0, 1)) is None  # an old recording that does not say
    assert recording_mismatch(["NVIDIA H200", "NVIDIA H200"], None, (0, 1)) is None
    assert "no gpu7" in (recording_mismatch(["A", "B"], h200, (0, 7)) or "")
    assert "RTX 4090" in (recording_mismatch(["NVIDIA GeForce RTX 4090", "NVIDIA H200"], h200, (0, 1)) or "")
