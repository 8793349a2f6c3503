"""evidence/nvml.py: the one door to NVML, against fakes (hermetic on a GPU machine too)."""

from __future__ import annotations

import sys
import types

import pytest

from pytest_p2p.errors import EvidenceError
from pytest_p2p.evidence import nvml


class NVMLError(Exception):
    pass


def fake(count: int = 2, *, calls: list[str] | None = None) -> types.ModuleType:
    log = calls if calls is not None else []
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    m.nvmlInit = lambda: log.append("init")
    m.nvmlShutdown = lambda: log.append("shutdown")
    m.nvmlDeviceGetCount = lambda: count

    def handle(i):
        if not 0 <= i < count:
            raise NVMLError("Invalid Argument")
        return i

    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=f"00000000:{h + 0x41:02X}:00.0".encode())
    m.nvmlDeviceGetName = lambda h: b"NVIDIA GeForce RTX 5060 Ti"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=16 << 30, used=(h + 1) << 30)
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=97, memory=40)
    m.nvmlDeviceGetPowerUsage = lambda h: 150500
    m.nvmlDeviceGetClockInfo = lambda h, c: {1: 2800, 2: 14000}[c]
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=41), types.SimpleNamespace(pid=7)]
    m.nvmlDeviceGetMigMode = lambda h: (1, 1) if h == 1 else (0, 0)
    m.nvmlSystemGetDriverVersion = lambda: b"580.95.05"
    return m


@pytest.fixture
def with_fake(monkeypatch):
    monkeypatch.delenv(nvml.ENV_SWITCH, raising=False)

    def install(m: types.ModuleType) -> types.ModuleType:
        monkeypatch.setitem(sys.modules, "pynvml", m)
        return m

    return install


def test_switched_off_reads_as_no_driver_even_with_a_working_pynvml(monkeypatch):
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake(calls=calls))
    monkeypatch.setenv(nvml.ENV_SWITCH, "off")
    with pytest.raises(nvml.NvmlUnavailable, match="PYTEST_P2P_NVML=off"), nvml.nvml_session():
        pass
    why = nvml.why_no_nvml()
    assert why is not None and "--snapshot demo" in why
    assert calls == []  # NVML never started


def test_session_starts_and_always_shuts_down(with_fake):
    calls: list[str] = []
    with_fake(fake(calls=calls))
    with pytest.raises(RuntimeError), nvml.nvml_session() as nv:
        assert nv.count() == 2
        raise RuntimeError("caller's own error passes through")
    assert calls == ["init", "shutdown"]
    assert nvml.why_no_nvml() is None


def test_typed_getters(with_fake):
    with_fake(fake())
    with nvml.nvml_session() as nv:
        g = nv.gpu(1)
        assert g.bus_id() == "0000:42:00.0" and g.name() == "NVIDIA GeForce RTX 5060 Ti"
        assert g.memory() == nvml.MemoryUse(total_mib=16384, used_mib=2048)
        assert g.utilization() == nvml.Utilization(97, 40)
        assert g.power_w() == pytest.approx(150.5)
        assert (g.sm_clock_mhz(), g.mem_clock_mhz()) == (2800, 14000)
        assert g.running_pids() == [7, 41]
        assert g.mig_mode() is True and nv.gpu(0).mig_mode() is False
        assert nv.gpu_by_bus_id("42:00.0").index == 1
        assert nv.driver_version() == "580.95.05"


def test_getters_missing_from_an_old_library_read_as_not_reported(with_fake):
    m = with_fake(fake())
    for name in ("nvmlDeviceGetMigMode", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetComputeRunningProcesses"):
        delattr(m, name)
    m.nvmlDeviceGetPowerUsage = lambda h: (_ for _ in ()).throw(NVMLError("Not Supported"))
    with nvml.nvml_session() as nv:
        g = nv.gpu(0)
        assert (g.mig_mode(), g.utilization(), g.running_pids(), g.power_w(), g.energy_mj()) == (None,) * 5
        assert nv.cuda_driver_version() is None


def test_missing_gpu_and_missing_bus_id_are_evidence_errors(with_fake):
    with_fake(fake(count=1))
    with nvml.nvml_session() as nv:
        with pytest.raises(EvidenceError, match=r"no GPU with index 1 \(Invalid Argument\); it counts 1 GPU"):
            nv.gpu(1)
        with pytest.raises(EvidenceError, match="no GPU at bus id 0000:99:00.0"):
            nv.gpu_by_bus_id("0000:99:00.0")


def test_raw_nvml_error_in_the_block_becomes_an_evidence_error(with_fake):
    m = with_fake(fake())
    with pytest.raises(EvidenceError, match="NVML failed .*GPU is lost"), nvml.nvml_session() as nv:
        nv.module.nvmlDeviceGetSomething = None
        raise m.NVMLError("GPU is lost")


def test_no_pynvml_and_no_gpu(monkeypatch, with_fake):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert "install nvidia-ml-py" in (nvml.why_no_nvml() or "")
    with_fake(fake(count=0))
    assert "reports no GPU" in (nvml.why_no_nvml() or "")


def test_only_this_module_imports_pynvml_or_starts_nvml():
    """Contract 3: NVML only through evidence/nvml.py (other stages migrate to it)."""
    import pathlib
    import re

    pkg = pathlib.Path(nvml.__file__).resolve().parent.parent
    pattern = re.compile(r"^\s*(import pynvml|from pynvml)|\.nvmlInit\(|\.nvmlShutdown\(", re.M)
    offenders = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
                       if p.name != "nvml.py" and pattern.search(p.read_text(encoding="utf-8")))
    assert offenders == [], offenders
