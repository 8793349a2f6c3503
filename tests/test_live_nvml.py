"""The live NVML backend against a fake pynvml modelled on our 2x H200 readings.

The fake reproduces the quirks the real library has (READ caps index is a tuple in
nvidia-ml-py, NVLink version is an enum, NotSupported errors), so these tests pin the
mapping logic; the real thing is exercised on the GPU machine (see docs/checks.md).
"""

from __future__ import annotations

import sys
import threading
import types

import pytest

from pytest_p2p.errors import EvidenceError
from pytest_p2p.evidence import live


class NVMLError(Exception):
    pass


def fake_pynvml(*, nvlink_remote_switch: bool = True, p2p_nvlink: int = 0, gen_cur=(5, 5)) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 0, 2, 0
    m.NVML_NVLINK_MAX_LINKS = 18
    m.NVML_NVLINK_ERROR_DL_REPLAY, m.NVML_NVLINK_ERROR_DL_CRC_FLIT, m.NVML_NVLINK_ERROR_DL_CRC_DATA = 0, 2, 3
    m.NVML_P2P_CAPS_INDEX_READ = (0,)  # the real library's trailing-comma bug
    buses = ["00000000:00:06.0", "00000000:00:07.0"]
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: 2
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlSystemGetDriverVersion = lambda: "580.159.04"
    m.nvmlSystemGetNVMLVersion = lambda: b"13.580.159.04"
    m.nvmlSystemGetCudaDriverVersion = lambda: 13000
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=buses[h].encode())
    m.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=143771 << 20, used=0)
    m.nvmlDeviceGetPowerUsage = lambda h: 78779
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700000
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 1
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: gen_cur[h]
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetGpuMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetPcieReplayCounter = lambda h: 0
    m.nvmlDeviceGetTotalEnergyConsumption = lambda h: 3125389
    m.nvmlDeviceGetClockInfo = lambda h, c: 345
    m.nvmlDeviceGetTemperature = lambda h, s: 40
    m.nvmlDeviceGetPerformanceState = lambda h: 0

    def state(h, link):
        if link >= 18:
            raise NVMLError("InvalidArgument")
        return 1

    m.nvmlDeviceGetNvLinkState = state
    m.nvmlDeviceGetNvLinkVersion = lambda h, link: 6  # nvmlNvlinkVersion_t 6 == NVLink 4.0
    if nvlink_remote_switch:
        m.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: types.SimpleNamespace(busId=b"00000000:FF:00.0")
        m.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, link: 2
    else:
        m.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: types.SimpleNamespace(busId=buses[1 - h].encode())
        m.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, link: 0
    m.nvmlDeviceGetNvLinkErrorCounter = lambda h, link, c: 0
    m.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 30

    def p2p(a, b, idx):
        if not isinstance(idx, int):
            raise TypeError("Don't know how to convert parameter 3")
        return p2p_nvlink if idx == 2 else 0

    m.nvmlDeviceGetP2PStatus = p2p
    return m


@pytest.fixture(autouse=True)
def nvml_on(monkeypatch):
    """These tests install a fake pynvml; the suite-wide PYTEST_P2P_NVML=off would hide it."""
    monkeypatch.delenv("PYTEST_P2P_NVML", raising=False)


@pytest.fixture
def use_fake(monkeypatch):
    def install(**kw):
        monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(**kw))

    return install


def test_h200_pair_reads_as_nv18_through_a_switch(use_fake):
    use_fake()
    ev = live.gather_live(load=False)
    assert [g.bus_id for g in ev.gpus] == ["0000:00:06.0", "0000:00:07.0"]
    p = ev.pair(0, 1)
    assert p.topology == "NV18" and p.nvml_topology_level == 30  # NVML alone would say PHB
    assert (p.p2p_read, p.p2p_write, p.p2p_nvlink) == ("OK", "OK", "OK")
    g = ev.gpu(0)
    assert len(g.active_nvlinks) == 18 and {link.version for link in g.nvlinks} == {4}
    assert g.nvlinks[0].remote_type == "switch"
    assert g.power_w == pytest.approx(78.779) and ev.nvml_version == "13.580.159.04"


def test_direct_nvlink_counts_links_to_the_peer(use_fake):
    use_fake(nvlink_remote_switch=False)
    assert live.gather_live(load=False).pair(0, 1).topology == "NV18"


def test_no_nvlink_p2p_falls_back_to_pcie_class(use_fake):
    use_fake(p2p_nvlink=5)
    assert live.gather_live(load=False).pair(0, 1).topology == "PHB"


def test_missing_driver_is_an_evidence_error(monkeypatch):
    m = fake_pynvml()

    def boom():
        raise NVMLError("NVML Shared Library Not Found")

    m.nvmlInit = boom
    monkeypatch.setitem(sys.modules, "pynvml", m)
    with pytest.raises(EvidenceError, match="no NVIDIA driver is loaded"):
        live.gather_live(load=False)
    assert live.nvml_available()[0] is False


def test_load_failure_is_recorded_not_raised(use_fake, tmp_path):
    use_fake()
    ev = live.gather_live(load=False)
    fake_python = tmp_path / "py"
    fake_python.write_text("#!/bin/sh\necho 'ModuleNotFoundError: torch' >&2\nexit 1\n")
    fake_python.chmod(0o755)
    live.read_under_load(ev, seconds=0.5, python=str(fake_python))
    assert ev.gpus[0].pcie.loaded is None
    assert "ModuleNotFoundError: torch" in ev.gpus[0].pcie.load_method
    assert any("judge the max-link fields" in n for n in ev.notes)


def test_load_readings_and_cuda_peer_map_by_bus_id(use_fake, tmp_path):
    """The load child reports CUDA devices in its own order; mapping must go by bus id."""
    use_fake(gen_cur=(4, 5))
    ev = live.gather_live(load=False)
    child = tmp_path / "py"
    child.write_text(
        "#!/bin/sh\necho LOADING\nsleep 0.6\n"
        "echo 'RESULT {\"devices\": [{\"cuda_index\": 0, \"bus_id\": \"0000:00:07.0\"}, "
        "{\"cuda_index\": 1, \"bus_id\": \"0000:00:06.0\"}], \"peer\": [[0, 1, true], [1, 0, false]]}'\n")
    child.chmod(0o755)
    live.read_under_load(ev, seconds=0.6, python=str(child))
    assert ev.gpu(0).cuda_index == 1 and ev.gpu(1).cuda_index == 0
    assert ev.gpu(0).pcie.loaded.gen == 4 and ev.gpu(1).pcie.loaded.gen == 5
    p = ev.pair(0, 1)  # NVML 0 == CUDA 1, NVML 1 == CUDA 0: CUDA (1->0) false is NVML 0->1
    assert p.cuda_peer_ab is False and p.cuda_peer_ba is True
    assert p.peer_access is False


def test_hung_load_process_is_killed_and_recorded(use_fake, tmp_path, monkeypatch):
    """A load child that never says LOADING (CUDA init hanging on a lost GPU) must not hang the session."""
    use_fake()
    ev = live.gather_live(load=False)
    child = tmp_path / "py"
    child.write_text("#!/bin/sh\nexec sleep 60\n")
    child.chmod(0o755)
    timer = threading.Timer
    monkeypatch.setattr(threading, "Timer", lambda _limit, fn: timer(0.5, fn))
    live.read_under_load(ev, seconds=0.1, python=str(child))
    assert ev.gpus[0].pcie.loaded is None
    assert "killed after 120 s without finishing" in ev.gpus[0].pcie.load_method


def test_chatty_stderr_does_not_block_the_reader(use_fake, tmp_path):
    """Megabytes on stderr (warnings) must not fill a pipe the reader never drains."""
    use_fake()
    ev = live.gather_live(load=False)
    child = tmp_path / "py"
    child.write_text("#!/bin/sh\nhead -c 2000000 /dev/zero | tr '\\0' x >&2\necho LOADING\n"
                     "echo 'RESULT {\"devices\": [], \"peer\": []}'\n")
    child.chmod(0o755)
    live.read_under_load(ev, seconds=0.5, python=str(child))
    assert ev.gpus[0].pcie.loaded is not None


def test_a_lost_gpu_is_an_evidence_error_not_a_traceback(monkeypatch):
    m = fake_pynvml()

    def lost(h):
        raise NVMLError("GPU is lost")

    m.nvmlDeviceGetPciInfo = lost
    monkeypatch.setitem(sys.modules, "pynvml", m)
    with pytest.raises(EvidenceError, match=r"NVML failed reading GPU 0 \(nvmlDeviceGetPciInfo: GPU is lost\)"):
        live.gather_live(load=False)
    m.nvmlDeviceGetCount = lambda: lost(None)
    ok, why = live.nvml_available()
    assert not ok and "cannot count the GPUs (GPU is lost)" in why


def test_nvml_failing_while_sampling_under_load_is_an_evidence_error(use_fake, tmp_path):
    use_fake()
    ev = live.gather_live(load=False)
    sys.modules["pynvml"].nvmlDeviceGetHandleByIndex = lambda i: (_ for _ in ()).throw(NVMLError("GPU is lost"))
    child = tmp_path / "py"
    child.write_text("#!/bin/sh\necho LOADING\nexec sleep 60\n")
    child.chmod(0o755)
    with pytest.raises(EvidenceError, match=r"under load \(NVML has no GPU with index 0 \(GPU is lost\)"):
        live.read_under_load(ev, seconds=0.5, python=str(child))


def test_an_older_nvidia_ml_py_without_newer_getters_still_gathers(monkeypatch):
    """Getters missing from the installed nvidia-ml-py read as 'not reported', never as a crash."""
    m = fake_pynvml()
    del m.nvmlDeviceGetCurrentClocksEventReasons  # added in newer NVML; older ones only have "Throttle"
    del m.nvmlDeviceGetNvLinkRemoteDeviceType
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 4
    monkeypatch.setitem(sys.modules, "pynvml", m)
    ev = live.gather_live(load=False)
    assert ev.gpu(0).throttle_reasons == 4 and ev.gpu(0).nvlinks[0].remote_type is None
    assert ev.pair(0, 1).topology == "NV18"


def test_the_load_is_not_run_on_gpus_another_run_holds(use_fake, tmp_path, monkeypatch):
    """A second run's 2 s CUDA load once ran on all GPUs while the first run's probes timed all-reduces there
    (4x H100): the load takes the GPUs' leases; held by someone else past the wait, no load, and the note says why."""
    import subprocess
    import sys as _sys

    from pytest_p2p.lease import GpuLease

    monkeypatch.setenv("PYTEST_P2P_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(live, "LOAD_LEASE_WAIT_S", 0.3)
    use_fake(gen_cur=(4, 5))
    ev = live.gather_live(load=False)
    ran = tmp_path / "ran"
    child = tmp_path / "py"
    child.write_text(f"#!/bin/sh\ntouch {ran}\necho LOADING\n")
    child.chmod(0o755)
    GpuLease(lock_dir=tmp_path / "locks")._open(1)  # the lock dir and file exist, as another run leaves them
    locks = str(tmp_path / "locks")
    holder = subprocess.Popen([_sys.executable, "-c",
                               "import sys, time\nfrom pathlib import Path\nfrom pytest_p2p.lease import GpuLease\n"
                               f"with GpuLease(lock_dir=Path({locks!r})).hold([1], 'probe of run A'):\n"
                               "    print('held', flush=True); time.sleep(60)\n"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        live.read_under_load(ev, seconds=0.5, python=str(child))
    finally:
        holder.kill()
        holder.wait()
    assert not ran.exists(), "the CUDA load ran on a GPU another run held"
    assert ev.gpus[0].pcie.loaded is None
    assert "another run holds a GPU" in ev.gpus[0].pcie.load_method
    assert "probe of run A" in ev.gpus[0].pcie.load_method
