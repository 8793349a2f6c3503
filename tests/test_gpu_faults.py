"""GPU-side faults simulated in CI (issue 30): the stand-in's EngineCore SIGKILLed mid-window, NVML failing
mid-campaign (GpuIsLost / Unknown), and another process holding a GPU when the server OOMs at start.

The real-GPU runs of the same faults are ``benchmarks/gpu_faults.py`` (see docs/gpu-runs.md).
"""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from test_campaign_faults import _alive, _runner
from test_live_nvml import NVMLError, fake_pynvml

from pytest_p2p.campaign import telemetry as tm


def test_engine_core_sigkilled_mid_window_is_set_aside_rerun_and_leaves_nothing(tmp_path: Path) -> None:
    # request 1 is the launcher's readiness completion; request 2 (the window's first) SIGKILLs the EngineCore
    res = _runner(tmp_path, {"PYTEST_P2P_STANDIN_FAULT": "kill-engine=1",
                             "FAULT_ONCE_MARKER": str(tmp_path / "killed-once")}).run()
    assert res.status == "complete" and res.errors == [] and res.missing == [], res.errors
    (failure,) = res.set_aside
    assert (failure.rep, failure.attempt, failure.kind) == (1, 1, "failed")
    assert "the vLLM engine core died" in failure.cause and "died unexpectedly (signal 9)" in failure.cause
    scen = res.run_dir / "scenarios" / f"{failure.arm}-c1"
    log = (scen / "server_run1.try1.failed.log").read_text()
    (engine,) = [int(p) for p in re.findall(r"SIMULATED engine core pid (\d+)", log)]
    assert json.loads((scen / "run_1.json").read_text())["meta"]["attempt"] == 2  # re-run on a fresh server
    thr = res.aggregate(failure.arm, "c1")["metrics"]["output_throughput"]  # type: ignore[index]
    assert thr["n"] == 2 and min(thr["values"]) > 0  # no number from the broken window
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 5 and not any(_alive(p) for p in [*pids, engine])  # 4 slots + 1 re-run, all reaped


def _flaky_nvml(monkeypatch: pytest.MonkeyPatch, lost_after: int, error: str) -> None:
    """A fake pynvml whose GPU 1 raises ``error`` for every getter from its ``lost_after``-th throttle read on."""
    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)
    m = fake_pynvml()
    cls = type(error, (NVMLError,), {})
    reads = {"n": 0}
    for name in [n for n in dir(m) if n.startswith("nvmlDeviceGet") and n != "nvmlDeviceGetHandleByIndex"]:
        real = getattr(m, name)

        def getter(h: int, *args: Any, _real: Any = real, _name: str = name) -> Any:
            if h == 1:
                if _name == "nvmlDeviceGetCurrentClocksEventReasons":
                    reads["n"] += 1
                if reads["n"] >= lost_after:
                    raise cls(error)
            return _real(h, *args)

        setattr(m, name, getter)
    monkeypatch.setitem(sys.modules, "pynvml", m)


@pytest.mark.parametrize("error", ["NVMLError_GpuIsLost", "NVMLError_Unknown"])
def test_nvml_failing_mid_window_names_the_missing_samples_and_leaves_the_throttle_flag_unknown(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error: str) -> None:
    _flaky_nvml(monkeypatch, lost_after=3, error=error)
    reader = tm.NvmlReader([0, 1])
    try:
        rows = [row for _ in range(5) for row in reader.read()]
    finally:
        reader.close()
    gpu1 = [r for r in rows if r["index"] == 1]
    assert [bool(r["nvml_error"]) for r in gpu1] == [False, False, True, True, True]
    assert f"nvmlDeviceGetCurrentClocksEventReasons: {error}" in str(gpu1[-1]["nvml_error"])
    assert all(r["nvml_error"] == "" for r in rows if r["index"] == 0)
    flags = tm.assess(rows, {0: (5, 16), 1: (5, 16)})
    assert flags.throttled is None  # never "not throttled" from a mask it could not read
    (missing,) = flags.missing
    assert missing.startswith("GPU 1: 3 of 5 samples not read by NVML (") and error in missing
    assert any("throttle state unknown" in d and "3 of 5 samples of GPU 1" in d for d in flags.details)
    path = tmp_path / "telemetry.csv"
    path.write_text(tm.rows_to_csv(rows))
    back = [r for r in tm.read_csv(path) if r["index"] == 1]
    assert back[-1]["throttle_reasons"] is None and error in str(back[-1]["nvml_error"])
    # a GPU that throttled in a sample it could read is throttled, whatever else was missing
    hot = [{**rows[0], "throttle_reasons": tm.REASON_HW_THERMAL}, *rows[1:]]
    assert tm.assess(hot, {}).throttled is True
    assert tm.assess([r for r in rows if not r["nvml_error"]], {}).throttled is False


def test_a_not_supported_getter_is_not_a_missing_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)
    m = fake_pynvml()

    def not_supported(h: int) -> int:
        raise type("NVMLError_NotSupported", (NVMLError,), {})("Not Supported")

    m.nvmlDeviceGetTotalEnergyConsumption = not_supported
    monkeypatch.setitem(sys.modules, "pynvml", m)
    reader = tm.NvmlReader([0])
    try:
        (row,) = reader.read()
    finally:
        reader.close()
    assert row["energy_mj"] is None and row["nvml_error"] == ""
    assert tm.assess([row], {}).missing == []


def test_oom_at_start_names_the_process_holding_the_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pytest_p2p.errors import ServerError
    from pytest_p2p.probes.arms import PRESETS
    from pytest_p2p.serve.config import parse_server
    from pytest_p2p.serve.server import launch

    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)
    m = fake_pynvml()
    hog = types.SimpleNamespace(pid=4242, usedGpuMemory=130_000 << 20)
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [hog] if h == 1 else []
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=143771 << 20,
                                                                used=(130_500 << 20) if h == 1 else 0)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    monkeypatch.setattr("pytest_p2p.serve.server.process_name", lambda pid: "memhog.py" if pid == 4242 else "?")
    cfg = parse_server({"command": [sys.executable, "-m", "pytest_p2p.serve.standin"], "model": "m",
                        "env": {"PYTEST_P2P_STANDIN_FAULT": "fail-start=oom"}, "startup_timeout_s": 30},
                       "rig.yaml")
    with pytest.raises(ServerError) as info, launch(cfg, PRESETS["p2p_on"], (0, 1), {}, tmp_path / "s.log"):
        pass
    msg = str(info.value)
    assert "out of GPU memory" in msg
    assert "gpu1: pid 4242 (memhog.py) holds 130000 MiB" in msg, msg


def test_vram_wait_names_the_process_holding_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_p2p.campaign.gpu import wait_vram_free
    from pytest_p2p.errors import CampaignError

    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)
    m = fake_pynvml()
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=4242, usedGpuMemory=9000 << 20)] \
        if h == 1 else []
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=143771 << 20, used=(9000 << 20) if h else 0)
    monkeypatch.setitem(sys.modules, "pynvml", m)
    monkeypatch.setattr("pytest_p2p.serve.server.process_name", lambda pid: "memhog.py")
    with pytest.raises(CampaignError, match=r"held by GPU 1: pid 4242 \(memhog.py\) 9000 MiB"):
        wait_vram_free([0, 1], 2000, 0.0, live=True, sleep=lambda s: None)


def test_the_gpu_fault_script_touches_only_its_own_pair() -> None:
    """benchmarks/gpu_faults.py runs beside other work on a 4-GPU machine (GPU_FAULTS_PAIR=2,3): a memory hog on a
    fixed GPU index broke a campaign on GPUs 0-1 there (4x H100, 2026-11-26). Every hog takes a GPU of PAIR."""
    import ast

    tree = ast.parse((Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_faults.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "hog"]
    assert len(calls) >= 2  # memhog and vllm-oom
    for call in calls:
        gpu = call.args[0]
        assert isinstance(gpu, ast.Subscript) and getattr(gpu.value, "id", None) == "PAIR", ast.unparse(call)
