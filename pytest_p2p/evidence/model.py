"""The evidence data model: plain, typed, JSON-round-trippable.

One model for both backends (live NVML and recorded snapshot) so that every check,
the doctor table, the fingerprint and the report read the same fields whatever the
source. ``None`` always means "not reported by this machine or this recording", never
a guessed default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TypedDict

from ..jsontypes import JSONObject

# nvidia-smi topo -m classes, best first. NV# is represented as "NV<n>".
TOPOLOGY_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
TOPOLOGY_LEGEND = {
    "NV": "a bonded set of NVLinks",
    "PIX": "at most a single PCIe bridge",
    "PXB": "multiple PCIe bridges without the PCIe host bridge",
    "PHB": "PCIe and a PCIe host bridge (typically the CPU)",
    "NODE": "PCIe and the interconnect between host bridges within a NUMA node",
    "SYS": "PCIe and the SMP interconnect between NUMA nodes (QPI/UPI)",
}

# NVML P2P status codes (nvmlGpuP2PStatus_t) as nvidia-smi topo -p2p prints them.
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DIS", 5: "NS", 6: "U"}
P2P_STATUS_TEXT = {
    "OK": "supported",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "DIS": "disabled by registry key",
    "NS": "not supported",
    "U": "unknown",
}


def topology_rank(cls: str) -> int:
    """Lower is better: NV# < PIX < PXB < PHB < NODE < SYS."""
    base = "NV" if cls.startswith("NV") else cls
    return TOPOLOGY_ORDER.index(base) if base in TOPOLOGY_ORDER else len(TOPOLOGY_ORDER)


@dataclass
class PcieReading:
    """One reading of a GPU's PCIe link: generation and lane width."""

    gen: int | None
    width: int | None

    def label(self) -> str:
        g = f"Gen{self.gen}" if self.gen is not None else "Gen?"
        w = f"x{self.width}" if self.width is not None else "x?"
        return f"{g} {w}"


@dataclass
class PcieLink:
    """PCIe state of one GPU.

    ``idle`` is read with the GPU as found (an idle GPU drops to Gen1 to save power),
    ``loaded`` while the evidence layer keeps the GPU busy (``None`` if it could not),
    ``max`` is the best the GPU *and* the platform allow, ``gpu_max`` the GPU alone.
    """

    idle: PcieReading
    loaded: PcieReading | None
    max: PcieReading
    gpu_max: PcieReading
    replay_counter: int | None = None
    load_method: str = "none"  # "cuda-load (N NVML samples ...)", or "none[: why not]": how ``loaded`` was read


@dataclass
class NvLinkState:
    link: int
    active: bool
    version: int | None = None
    remote_bus_id: str | None = None
    remote_type: str | None = None  # "gpu", "switch", "ibmnpu", None when unknown
    crc_errors: int | None = None  # flit CRC + data CRC error counters summed, None if unreadable
    replay_errors: int | None = None


@dataclass
class GpuEvidence:
    index: int  # NVML index (PCI bus order)
    name: str
    uuid: str
    bus_id: str  # canonical 0000:0A:00.0
    pcie: PcieLink
    nvlinks: list[NvLinkState] = field(default_factory=list)
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    energy_mj: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temperature_c: int | None = None
    pstate: int | None = None
    throttle_reasons: int | None = None
    cuda_index: int | None = None  # index under CUDA_DEVICE_ORDER=PCI_BUS_ID, mapped by bus id
    mig_mode: bool | None = None  # MIG enabled: CUDA has no peer access to or from MIG instances

    @property
    def active_nvlinks(self) -> list[NvLinkState]:
        return [link for link in self.nvlinks if link.active]

    def label(self) -> str:
        return f"GPU {self.index} ({self.bus_id}, {self.name})"


@dataclass
class PairEvidence:
    """What the platform says about one ordered-agnostic GPU pair (a < b by NVML index)."""

    a: int
    b: int
    topology: str | None  # "NV18", "PHB", ... as nvidia-smi topo -m names it
    nvml_topology_level: int | None = None  # nvmlGpuTopologyLevel_t of the common ancestor
    nvlinks_between: int = 0
    p2p_read: str | None = None  # P2P_STATUS codes, both directions agree in NVML
    p2p_write: str | None = None
    p2p_nvlink: str | None = None
    p2p_atomics: str | None = None
    cuda_peer_ab: bool | None = None  # cudaDeviceCanAccessPeer(a, b)
    cuda_peer_ba: bool | None = None

    @property
    def key(self) -> str:
        return f"gpu{self.a}-gpu{self.b}"

    @property
    def peer_access(self) -> bool | None:
        """Peer access both ways: CUDA's answer where known, else NVML's read+write status."""
        if self.cuda_peer_ab is not None and self.cuda_peer_ba is not None:
            return self.cuda_peer_ab and self.cuda_peer_ba
        known = [s for s in (self.p2p_read, self.p2p_write) if s is not None]
        if any(s != "OK" for s in known):
            return False
        return True if len(known) == 2 else None


@dataclass
class Evidence:
    """Everything the hardware said, with where it came from."""

    source: str  # "live" or "snapshot"
    origin: str  # host name for live; the snapshot path for a replay
    recorded_at: str  # ISO-8601 UTC
    host: str
    driver_version: str | None
    nvml_version: str | None
    cuda_driver_version: int | None  # e.g. 13000
    gpus: list[GpuEvidence]
    pairs: list[PairEvidence]
    notes: list[str] = field(default_factory=list)  # provenance and caveats, shown to the user
    simulated: bool = False  # True for demo data that no machine produced as-is

    def gpu(self, index: int) -> GpuEvidence:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(index)

    def pair(self, a: int, b: int) -> PairEvidence:
        lo, hi = sorted((a, b))
        for p in self.pairs:
            if (p.a, p.b) == (lo, hi):
                return p
        raise KeyError((a, b))

    @property
    def label(self) -> str:
        if self.source == "live":
            return f"live NVML on {self.host}"
        return f"replay of {self.origin} (recorded {self.recorded_at} on {self.host})"

    def to_dict(self) -> JSONObject:
        return asdict(self)


# The shape of :meth:`Evidence.to_dict` as :func:`evidence_from_dict` reads it back (``snapshot.py``
# checks a recording against it, field by field, before it gets here).


class PcieReadingDict(TypedDict):
    gen: int | None
    width: int | None


class _PcieLinkRequired(TypedDict):
    idle: PcieReadingDict
    max: PcieReadingDict
    gpu_max: PcieReadingDict


class PcieLinkDict(_PcieLinkRequired, total=False):
    loaded: PcieReadingDict | None
    replay_counter: int | None
    load_method: str


class NvLinkDict(TypedDict):
    link: int
    active: bool
    version: int | None
    remote_bus_id: str | None
    remote_type: str | None
    crc_errors: int | None
    replay_errors: int | None


class _GpuRequired(TypedDict):
    index: int
    name: str
    uuid: str  # a hand-written recording may hold null here: it is read back as it is
    bus_id: str
    pcie: PcieLinkDict


class GpuDict(_GpuRequired, total=False):
    nvlinks: list[NvLinkDict]
    memory_total_mib: int | None
    memory_used_mib: int | None
    energy_mj: int | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    temperature_c: int | None
    pstate: int | None
    throttle_reasons: int | None
    cuda_index: int | None
    mig_mode: bool | None


class PairDict(TypedDict):
    a: int
    b: int
    topology: str | None
    nvml_topology_level: int | None
    nvlinks_between: int
    p2p_read: str | None
    p2p_write: str | None
    p2p_nvlink: str | None
    p2p_atomics: str | None
    cuda_peer_ab: bool | None
    cuda_peer_ba: bool | None


class _EvidenceRequired(TypedDict):
    source: str
    origin: str
    recorded_at: str
    host: str
    driver_version: str | None
    nvml_version: str | None
    cuda_driver_version: int | None
    gpus: list[GpuDict]
    pairs: list[PairDict]


class EvidenceDict(_EvidenceRequired, total=False):
    notes: list[str]
    simulated: bool


def _pcie_reading(d: PcieReadingDict | None) -> PcieReading | None:
    return None if d is None else PcieReading(gen=d.get("gen"), width=d.get("width"))


def _gpu_from_dict(g: GpuDict) -> GpuEvidence:
    p = g["pcie"]
    pcie = PcieLink(
        idle=_pcie_reading(p["idle"]) or PcieReading(None, None),
        loaded=_pcie_reading(p.get("loaded")),
        max=_pcie_reading(p["max"]) or PcieReading(None, None),
        gpu_max=_pcie_reading(p["gpu_max"]) or PcieReading(None, None),
        replay_counter=p.get("replay_counter"),
        load_method=p.get("load_method", "none"),
    )
    links = [NvLinkState(**link) for link in g.get("nvlinks", [])]
    return GpuEvidence(
        index=g["index"], name=g["name"], uuid=g["uuid"], bus_id=g["bus_id"], pcie=pcie, nvlinks=links,
        memory_total_mib=g.get("memory_total_mib"), memory_used_mib=g.get("memory_used_mib"),
        energy_mj=g.get("energy_mj"), power_w=g.get("power_w"), power_limit_w=g.get("power_limit_w"),
        sm_clock_mhz=g.get("sm_clock_mhz"), mem_clock_mhz=g.get("mem_clock_mhz"),
        temperature_c=g.get("temperature_c"), pstate=g.get("pstate"), throttle_reasons=g.get("throttle_reasons"),
        cuda_index=g.get("cuda_index"), mig_mode=g.get("mig_mode"),
    )


def evidence_from_dict(d: EvidenceDict) -> Evidence:
    """Inverse of :meth:`Evidence.to_dict` (schema checks live in ``snapshot.py``)."""
    return Evidence(
        source=d["source"], origin=d["origin"], recorded_at=d["recorded_at"], host=d["host"],
        driver_version=d["driver_version"], nvml_version=d["nvml_version"],
        cuda_driver_version=d["cuda_driver_version"],
        gpus=[_gpu_from_dict(g) for g in d["gpus"]],
        pairs=[PairEvidence(**p) for p in d["pairs"]],
        notes=d.get("notes", []), simulated=d.get("simulated", False),
    )
