"""Live evidence from NVML (through ``pynvml`` from nvidia-ml-py), read on the machine itself.

Two traps shape this module:

* An idle GPU trains its PCIe link down (Gen1 at idle, Gen3 under load in the seed's
  evidence C16 vs C15). A link check must read while the GPU is busy, so
  :func:`read_under_load` starts a small CUDA workload *in a subprocess* (host<->device
  copies plus matmuls through torch) and samples NVML meanwhile. A subprocess, not this
  process: a CUDA context left in the pytest process would itself be a "compute process
  on the pair" when a later server teardown checks that the GPUs are free.
* CUDA and NVML number GPUs differently unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; we map
  CUDA indices to NVML indices by PCI bus id, never by assuming they are equal.

pynvml quirks handled here: ``NVML_P2P_CAPS_INDEX_READ`` is the tuple ``(0,)`` in
nvidia-ml-py (a trailing comma), so literal indices are used; ``nvmlDeviceGetNvLinkVersion``
returns the ``nvmlNvlinkVersion_t`` enum, not the version number.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import SupportsIndex, SupportsInt, TypedDict

from .. import heartbeat, signals
from ..children import die_with_parent
from ..envs import subprocess_env
from ..errors import EvidenceError
from ..util import normalize_bus_id
from .model import (
    P2P_STATUS,
    Evidence,
    GpuEvidence,
    NvLinkState,
    PairEvidence,
    PcieLink,
    PcieReading,
)
from .nvml import Nvml, NvmlGpu, Pynvml, nvml_call, nvml_get, nvml_session, struct_field, text, why_no_nvml

# nvmlNvlinkVersion_t -> NVLink generation (1.0, 2.0, 2.2, 3.0, 3.1, 4.0, 5.0, 6.0)
NVLINK_VERSION = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
# nvmlGpuTopologyLevel_t -> nvidia-smi topo class
TOPOLOGY_CLASS = {0: "SELF", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# P2P caps indices (nvmlGpuP2PCapsIndex_t), literal: pynvml's READ constant is a tuple.
P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
REMOTE_TYPE = {0: "gpu", 1: "ibmnpu", 2: "switch"}
MAX_NVLINKS = 18


def nvml_available() -> tuple[bool, str]:
    """Cheap probe used to choose between live evidence and a replay, with the reason."""
    why = why_no_nvml()
    return (True, "NVML sees the GPUs") if why is None else (False, why)


def _code(value: object) -> int:
    """``int(value)`` of a raw NVML result (an enum or a counter); TypeError where ``int()`` itself refuses."""
    if isinstance(value, (str, bytes, SupportsInt, SupportsIndex)):
        return int(value)
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, not "
                    f"'{type(value).__name__}'")


def _count(value: object) -> int | None:
    """A raw NVML counter read with :func:`nvml_call` (``None``: not reported)."""
    return None if value is None else _code(value)


def clock_event_reasons(nv: Pynvml, h: object) -> int | None:
    """The clocks-event (throttle) reason mask of raw handle ``h`` (kept for callers not yet on :mod:`.nvml`)."""
    return NvmlGpu(Nvml(nv), -1, h).clock_event_reasons()


def gather_live(*, load: bool = True, load_seconds: float = 2.0) -> Evidence:
    """Everything NVML says, plus readings under load and CUDA peer access when ``load``."""
    with heartbeat.phase("evidence: reading the GPUs through NVML"), nvml_session() as session:
        evidence = _gather(session)
    if load:
        read_under_load(evidence, seconds=load_seconds)
    return evidence


def _gather(session: Nvml) -> Evidence:
    handles = session.gpus()
    gpus = []
    for h in handles:
        heartbeat.step(f"GPU {h.index} of {len(handles)}")
        gpus.append(_gpu(h))
    pairs = []
    for i in range(len(handles)):
        heartbeat.step(f"pairs of GPU {i}")
        for j in range(i + 1, len(handles)):
            pairs.append(_pair(session.module, gpus[i], gpus[j], handles[i].handle, handles[j].handle))
    return Evidence(
        source="live",
        origin=socket.gethostname(),
        recorded_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        host=socket.gethostname(),
        driver_version=session.driver_version(),
        nvml_version=session.nvml_version(),
        cuda_driver_version=session.cuda_driver_version(),
        gpus=gpus,
        pairs=pairs,
    )


def _gpu(h: NvmlGpu) -> GpuEvidence:
    mem = h.memory()
    return GpuEvidence(
        index=h.index,
        name=h.name(),
        uuid=h.uuid() or "",
        bus_id=h.bus_id(),
        pcie=PcieLink(
            idle=read_pcie(h),
            loaded=None,
            max=PcieReading(h.pcie_max_gen(), h.pcie_max_width()),
            gpu_max=PcieReading(h.gpu_max_pcie_gen(), None),
            replay_counter=h.pcie_replay_counter(),
        ),
        nvlinks=_nvlinks(h.nvml.module, h.handle),
        memory_total_mib=mem.total_mib if mem is not None else None,
        memory_used_mib=mem.used_mib if mem is not None else None,
        energy_mj=h.energy_mj(),
        power_w=h.power_w(),
        power_limit_w=h.power_limit_w(),
        sm_clock_mhz=h.sm_clock_mhz(),
        mem_clock_mhz=h.mem_clock_mhz(),
        temperature_c=h.temperature_c(),
        pstate=h.pstate(),
        throttle_reasons=h.clock_event_reasons(),
        mig_mode=h.mig_mode(),
    )


def read_pcie(h: NvmlGpu) -> PcieReading:
    return PcieReading(h.pcie_gen(), h.pcie_width())


def _nvlinks(nv: Pynvml, h: object) -> list[NvLinkState]:
    links: list[NvLinkState] = []
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", MAX_NVLINKS)):
        state = nvml_call(nv, "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            continue  # no such link (NotSupported / InvalidArgument)
        version = nvml_call(nv, "nvmlDeviceGetNvLinkVersion", h, link)
        remote = nvml_call(nv, "nvmlDeviceGetNvLinkRemotePciInfo", h, link)
        rtype = nvml_call(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
        crc = [_count(nvml_call(nv, "nvmlDeviceGetNvLinkErrorCounter", h, link, c))
               for c in (nv.NVML_NVLINK_ERROR_DL_CRC_FLIT, nv.NVML_NVLINK_ERROR_DL_CRC_DATA)]
        replay = _count(nvml_call(nv, "nvmlDeviceGetNvLinkErrorCounter", h, link, nv.NVML_NVLINK_ERROR_DL_REPLAY))
        remote_bus = None
        if remote is not None:
            remote_bus = nvml_get(normalize_bus_id, text(struct_field(remote, "busId")))
        known_crc = [c for c in crc if c is not None]
        links.append(NvLinkState(
            link=link,
            active=bool(state),
            version=NVLINK_VERSION.get(_code(version)) if version is not None else None,
            remote_bus_id=remote_bus,
            remote_type=REMOTE_TYPE.get(_code(rtype)) if rtype is not None else None,
            crc_errors=sum(known_crc) if known_crc else None,
            replay_errors=replay,
        ))
    return links


def _pair(nv: Pynvml, a: GpuEvidence, b: GpuEvidence, ha: object, hb: object) -> PairEvidence:
    level = nvml_get(lambda: nv.nvmlDeviceGetTopologyCommonAncestor(ha, hb))
    status = {}
    for name, idx in P2P_CAPS.items():
        code = nvml_call(nv, "nvmlDeviceGetP2PStatus", ha, hb, idx)
        status[name] = P2P_STATUS.get(_code(code), "U") if code is not None else None
    between = nvlinks_between(a, b, status.get("nvlink"))
    topology = f"NV{between}" if between else (TOPOLOGY_CLASS.get(int(level)) if level is not None else None)
    return PairEvidence(a=a.index, b=b.index, topology=topology,
                        nvml_topology_level=int(level) if level is not None else None, nvlinks_between=between,
                        p2p_read=status["read"], p2p_write=status["write"], p2p_nvlink=status["nvlink"],
                        p2p_atomics=status["atomics"])


def nvlinks_between(a: GpuEvidence, b: GpuEvidence, nvml_nvlink_status: str | None) -> int:
    """How many active NVLinks join ``a`` and ``b``, as ``nvidia-smi topo -m`` counts them (``NV18``).

    NVML's common-ancestor topology ignores NVLink (it says HOSTBRIDGE for our NVLinked
    H200 pair), so NV# is derived from the links: links whose remote is ``b`` directly;
    or, when the links go to an NVSwitch (or the remote is not reported) and NVML says
    the pair does P2P over NVLink, the smaller of the two GPUs' active link counts.
    """
    direct = sum(1 for link in a.active_nvlinks if link.remote_bus_id == b.bus_id)
    if direct:
        return direct
    if nvml_nvlink_status == "OK":
        def via_switch(g: GpuEvidence) -> int:
            return sum(1 for link in g.active_nvlinks if link.remote_type in ("switch", None))

        return min(via_switch(a), via_switch(b))
    return 0


# --------------------------------------------------------------------------- under load

_LOAD_SCRIPT = r"""
import json, sys, time
import torch
n = torch.cuda.device_count()
devs = []
for i in range(n):
    p = torch.cuda.get_device_properties(i)
    bus = "%04X:%02X:%02X.0" % (getattr(p, "pci_domain_id", 0), p.pci_bus_id, p.pci_device_id)
    devs.append({"cuda_index": i, "bus_id": bus, "name": p.name})
peer = [[i, j, bool(torch.cuda.can_device_access_peer(i, j))] for i in range(n) for j in range(n) if i != j]
seconds = float(sys.argv[1])
work = []
for i in range(n):
    torch.cuda.set_device(i)
    host = torch.empty(64 << 20, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(64 << 20, dtype=torch.uint8, device=i)
    a = torch.randn(2048, 2048, device=i)
    work.append((i, host, dev, a, torch.cuda.Stream(i), torch.cuda.Stream(i)))
print("LOADING", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for i, host, dev, a, s_copy, s_math in work:
        with torch.cuda.stream(s_copy):
            dev.copy_(host, non_blocking=True)
            host.copy_(dev, non_blocking=True)
        with torch.cuda.stream(s_math):
            for _ in range(8):
                a = torch.tanh(a @ a)
    for i in range(n):
        torch.cuda.synchronize(i)
print("RESULT " + json.dumps({"devices": devs, "peer": peer}), flush=True)
"""


class _LoadDevice(TypedDict):
    cuda_index: int
    bus_id: str
    name: str


class _LoadResult(TypedDict):
    """The ``RESULT`` line of :data:`_LOAD_SCRIPT`: CUDA's devices and its peer-access matrix."""

    devices: list[_LoadDevice]
    peer: list[tuple[int, int, bool]]  # [i, j, can i access j] (JSON arrays)


def read_under_load(evidence: Evidence, *, seconds: float = 2.0, python: str | None = None) -> None:
    """Fill ``pcie.loaded`` (read while a CUDA workload runs) and CUDA peer access, in place.

    Needs torch with CUDA; without it ``loaded`` stays ``None`` and ``load_method`` says
    why, so the checks judge the max-link fields instead and say that they did. A load
    process that hangs (a GPU that fell off the bus can hang CUDA init) is killed after
    ``seconds + 120`` s; its stderr goes to a file so that a chatty child cannot block on a
    full pipe while we read its stdout. It gets SIGTERM from the kernel if pytest dies, even
    by SIGKILL (:func:`pytest_p2p.children.die_with_parent`): a CUDA load must not outlive us.

    It holds every GPU's lease while it loads them: a second pytest run started on a busy
    host once ran its 2 s of copies and matmuls on all four GPUs while the first run's probes
    were timing all-reduces there (seen on 4x H100, docs/gpu-runs.md). When another run keeps
    a GPU for :data:`LOAD_LEASE_WAIT_S`, the links are read without a load and the note says why.
    """
    from ..lease import GpuLease, LeaseTimeout

    try:
        with heartbeat.phase("evidence: PCIe links under a CUDA load", "waiting for the GPUs' leases"), \
                GpuLease().hold([g.index for g in evidence.gpus], "PCIe read under a CUDA load", LOAD_LEASE_WAIT_S):
            heartbeat.step("starting the load process (CUDA init)")
            _read_under_load(evidence, seconds=seconds, python=python)
    except LeaseTimeout as exc:
        _no_load(evidence, f"another run holds a GPU, and a load now would disturb its measurements ({exc})")


#: how long the under-load read waits for the GPUs' leases before it reads the links without a load
LOAD_LEASE_WAIT_S = 30.0


def _read_under_load(evidence: Evidence, *, seconds: float, python: str | None) -> None:
    """The body of :func:`read_under_load`, under its heartbeat (a CUDA init alone can take many seconds)."""
    env = subprocess_env(None, nccl_debug=None)
    limit = seconds + 120
    samples: dict[int, list[PcieReading]] = {g.index: [] for g in evidence.gpus}
    result: _LoadResult | None = None
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as errf:
        proc: subprocess.Popen[str] | None = None
        try:
            with signals.held():  # an interrupt inside Popen would leave a CUDA load that nothing kills
                proc = subprocess.Popen([python or sys.executable, "-c", _LOAD_SCRIPT, str(seconds)], env=env,
                                        stdout=subprocess.PIPE, stderr=errf, text=True,
                                        preexec_fn=die_with_parent())
        except OSError as exc:
            _no_load(evidence, f"could not start the load process: {exc}")
            return
        except KeyboardInterrupt:  # held until Popen returned: the child (if it started) is ours to stop
            if proc is not None:
                proc.kill()
                proc.wait()
            raise
        killed = threading.Event()

        def watchdog() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(limit, watchdog)
        timer.daemon = True
        timer.start()
        try:
            with proc:  # closes the pipe and reaps the child however we leave
                try:
                    assert proc.stdout is not None
                    first = proc.stdout.readline()
                    if first.strip() == "LOADING":
                        heartbeat.step(f"sampling the links for {seconds:g} s")
                        _sample(evidence, samples, seconds)
                        heartbeat.step("waiting for the load's peer-access result")
                        for line in proc.stdout:
                            if line.startswith("RESULT "):
                                with contextlib.suppress(ValueError):
                                    result = json.loads(line[len("RESULT "):])
                except BaseException:
                    proc.kill()  # never leave a CUDA load running on the GPUs behind an error or Ctrl-C
                    raise
        finally:
            timer.cancel()
        errf.seek(0)
        err = errf.read().strip().splitlines()
    if result is None:
        why = f"killed after {limit:.0f} s without finishing" if killed.is_set() else \
            (err[-1] if err else f"exit code {proc.returncode}")
        _no_load(evidence, f"the CUDA load process failed ({why})")
        return
    for g in evidence.gpus:
        got = [s for s in samples[g.index] if s.gen is not None]
        if got:
            best = max(got, key=lambda s: ((s.gen or 0), (s.width or 0)))
            g.pcie.loaded = best
            g.pcie.load_method = f"cuda-load ({len(got)} NVML samples during {seconds:.1f}s of copies+matmuls)"
    by_bus = {g.bus_id: g for g in evidence.gpus}
    cuda_to_nvml: dict[int, int] = {}
    for dev in result["devices"]:
        match = by_bus.get(normalize_bus_id(dev["bus_id"]))
        if match is not None:
            match.cuda_index = dev["cuda_index"]
            cuda_to_nvml[dev["cuda_index"]] = match.index
    peer = {(cuda_to_nvml.get(i), cuda_to_nvml.get(j)): ok for i, j, ok in result["peer"]}
    for p in evidence.pairs:
        p.cuda_peer_ab = peer.get((p.a, p.b))
        p.cuda_peer_ba = peer.get((p.b, p.a))
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        evidence.notes.append("CUDA_VISIBLE_DEVICES was set: CUDA peer access known only for visible GPUs")


def _sample(evidence: Evidence, samples: dict[int, list[PcieReading]], seconds: float) -> None:
    """Sample every GPU's current PCIe link every 0.1 s while the load process runs."""
    try:
        with nvml_session() as nv:
            handles = {g.index: nv.gpu(g.index) for g in evidence.gpus}
            deadline = time.monotonic() + max(0.5, seconds - 0.2)
            time.sleep(min(0.3, seconds / 4))
            while time.monotonic() < deadline:
                for idx, h in handles.items():
                    samples[idx].append(read_pcie(h))
                heartbeat.tick()
                time.sleep(0.1)
    except EvidenceError as exc:
        raise EvidenceError(f"NVML failed while sampling the PCIe links under load ({exc})") from None


def _no_load(evidence: Evidence, why: str) -> None:
    for g in evidence.gpus:
        g.pcie.load_method = f"none: {why}"
    evidence.notes.append(f"PCIe links were not read under load: {why}; checks judge the max-link fields")
