"""Issue 10 for the campaign: a rig where no pair can be compared (one GPU, MIG, no P2P-capable pair) ends in
campaign checks that SKIP with the reason — never an INTERNALERROR (``'NotSetType' object is not subscriptable``
at campaign/hooks.py, seen with a one-GPU snapshot replayed on a CPU box and live on a one-GPU H100)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots" / "h200x2-nvlink.snapshot.json"


def _one_gpu(path: Path) -> Path:
    env = json.loads(H200.read_text())
    ev = env["evidence"]
    ev["gpus"] = ev["gpus"][:1]
    ev["pairs"] = []
    ev["notes"] = ["one-GPU variant of the H200 recording (GPU 1 and the pair removed), for issue 10"]
    path.write_text(json.dumps(env))
    return path


def _mig(path: Path) -> Path:
    env = json.loads(H200.read_text())
    for g in env["evidence"]["gpus"]:
        g["mig_mode"] = True
    env["evidence"]["notes"] = ["MIG variant of the H200 recording (MIG enabled on both GPUs), for issue 10"]
    path.write_text(json.dumps(env))
    return path


def _no_p2p(path: Path) -> Path:
    env = json.loads(H200.read_text())
    pair = copy.deepcopy(env["evidence"]["pairs"][0])
    pair.update(topology="SYS", nvml_topology_level=50, nvlinks_between=0, p2p_read="NS", p2p_write="NS",
                p2p_nvlink="NS", p2p_atomics="NS", cuda_peer_ab=False, cuda_peer_ba=False)
    env["evidence"]["pairs"] = [pair]
    for g in env["evidence"]["gpus"]:
        g["nvlinks"] = []
    env["evidence"]["notes"] = ["dual-socket variant of the H200 recording (SYS, no peer access), for issue 10"]
    path.write_text(json.dumps(env))
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("PYTEST_P2P_RIG", "PYTEST_P2P_SNAPSHOT", "PYTEST_P2P_CAMPAIGN", "PYTEST_P2P_REPS",
                "PYTEST_P2P_ARMS", "PYTEST_P2P_RESULTS", "PYTEST_P2P_DB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTEST_P2P_LOCK_DIR", str(tmp_path / "locks"))


@pytest.mark.parametrize("make", [_one_gpu, _mig, _no_p2p], ids=["one-gpu", "mig", "no-p2p-pair"])
def test_campaign_checks_skip_with_the_reason_when_there_is_no_pair(
        pytester: pytest.Pytester, clean_env: None, tmp_path: Path, make: object) -> None:
    snap = make(pytester.path / "snap.json")  # type: ignore[operator]
    r = pytester.runpytest_subprocess("-p", "pytest_p2p.plugin.campaign", "-p", "no:cacheprovider", "-m", "p2p",
                                      "--pyargs", "pytest_p2p.checks.test_campaign", "--p2p-snapshot", str(snap),
                                      "--p2p-results", str(tmp_path / "res"), "-rs", timeout=120)
    out = r.stdout.str() + r.stderr.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    assert r.ret == pytest.ExitCode.OK, out[-3000:]
    outcomes = r.parseoutcomes()
    assert outcomes.get("skipped", 0) >= 1 and not outcomes.get("failed") and not outcomes.get("errors"), out
    assert "no GPU pair" in out or "cannot do P2P" in out or "MIG" in out, out[-3000:]
    assert "got empty parameter set" not in out  # pytest's generic reason replaced by ours
    assert not (tmp_path / "res").exists()  # no campaign ran, so no run directory
