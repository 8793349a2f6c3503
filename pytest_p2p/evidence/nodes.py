"""What one node's kernel says about its network path to the GPUs: NICs, RDMA ports, GIDs, peermem, PCI topology.

A multi-node rig fails silently in ways NVML cannot see: an RDMA port that trained at half
rate, a RoCE GID index that does not exist (``NCCL_IB_GID_INDEX=3`` on a port with three
GIDs), ``nvidia_peermem`` not loaded (NCCL then stages through host memory and says
nothing), a NIC on the other socket from the GPU. All of it is in sysfs and ``/proc``, so
:func:`read_node` reads it from a *root* directory: ``/`` on a live node (inside a Ray
task pinned to that node), or a recorded tree (``fixtures/sysfs/<node>/``) in tests.

The sources, as the kernel lays them out (the layout the recorded trees keep)::

    sys/class/infiniband/<dev>/ports/<p>/{state,phys_state,rate,link_layer}
    sys/class/infiniband/<dev>/ports/<p>/gids/<i>, gid_attrs/{types,ndevs}/<i>
    sys/class/infiniband/<dev>/device          -> the NIC's PCI function (a symlink into sys/devices)
    sys/class/net/<if>/{speed,operstate}, sys/class/net/<if>/device
    sys/bus/pci/devices/<bdf>/{class,vendor,numa_node}   (GPUs: vendor 0x10de, class 0x03xxxx)
    proc/modules

Every reader is total: a file that is missing or unreadable gives ``None`` (never a guessed
default) and the node's ``problems`` say what could not be read.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..util import is_bus_id, normalize_bus_id

NVIDIA_VENDOR = "0x10de"
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")  # the in-driver module, and the old out-of-tree one
_RATE_RE = re.compile(r"^\s*(?P<n>\d{1,6}(?:\.\d{1,3})?)\s*Gb/sec")
_BDF_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
MAX_ENTRIES = 256  # devices, ports, GIDs read per directory (a strange tree cannot make this unbounded)
MAX_FILE = 65536


@dataclass(frozen=True)
class Gid:
    """One GID table entry of an RDMA port (RoCE: the address NCCL_IB_GID_INDEX picks)."""

    index: int
    gid: str
    type: str | None  # "IB/RoCE v1" | "RoCE v2" (gid_attrs/types)
    ndev: str | None  # the net device it belongs to (gid_attrs/ndevs)


@dataclass(frozen=True)
class RdmaPort:
    port: int
    state: str | None  # "ACTIVE", "DOWN", ... (the word after "4: ")
    phys_state: str | None  # "LinkUp", "Disabled", ...
    rate_gbps: float | None  # from "200 Gb/sec (4X HDR)"
    rate_text: str | None
    link_layer: str | None  # "Ethernet" (RoCE) | "InfiniBand"
    gids: tuple[Gid, ...] = ()

    def gid(self, index: int) -> Gid | None:
        return next((g for g in self.gids if g.index == index), None)


@dataclass(frozen=True)
class PciPlace:
    """Where a PCI function sits: its bus id, NUMA node and the chain of bridges from its root complex."""

    bus_id: str | None
    numa: int | None
    path: tuple[str, ...]  # ("pci0000:40", "0000:40:01.1", "0000:41:00.0"); () when not known


@dataclass(frozen=True)
class RdmaDevice:
    name: str
    place: PciPlace
    netdevs: tuple[str, ...]
    ports: tuple[RdmaPort, ...]

    def port(self, number: int) -> RdmaPort | None:
        return next((p for p in self.ports if p.port == number), None)


@dataclass(frozen=True)
class NetIf:
    name: str
    speed_mbps: int | None  # /sys/class/net/<if>/speed (-1 or absent: None)
    operstate: str | None
    place: PciPlace


@dataclass(frozen=True)
class NodeEvidence:
    """One node as its kernel shows it; ``root`` is ``/`` live or the recorded tree's directory."""

    node: str
    host: str
    root: str
    rdma: tuple[RdmaDevice, ...] = ()
    nets: tuple[NetIf, ...] = ()
    gpus: tuple[PciPlace, ...] = ()
    modules: tuple[str, ...] | None = None  # None: /proc/modules unreadable
    problems: tuple[str, ...] = field(default=())

    @property
    def peermem_loaded(self) -> bool | None:
        """GPUDirect RDMA's kernel side: ``nvidia_peermem`` (or ``nv_peer_mem``) loaded; None: not known."""
        if self.modules is None:
            return None
        return any(m in self.modules for m in PEERMEM_MODULES)

    def rdma_device(self, name: str) -> RdmaDevice | None:
        return next((d for d in self.rdma if d.name == name), None)

    def net(self, name: str) -> NetIf | None:
        return next((n for n in self.nets if n.name == name), None)

    def gpu(self, bus_id: str) -> PciPlace | None:
        want = normal_bdf(bus_id)
        return next((g for g in self.gpus if g.bus_id == want), None)


# --------------------------------------------------------------------------- small readers


def _text(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_FILE).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _int(text: str | None, base: int = 10) -> int | None:
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))[:MAX_ENTRIES]
    except OSError:
        return []


def normal_bdf(bus_id: str) -> str:
    """``0000:41:00.0``: sysfs's spelling (lower case, 4-digit domain) of any bus id ``util`` reads."""
    return normalize_bus_id(bus_id).lower() if is_bus_id(bus_id) else bus_id.strip().lower()


def after_colon(text: str | None) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE`` (sysfs port state files carry the number and the word)."""
    if text is None:
        return None
    word = text.split(":", 1)[-1].strip()
    return word or None


def parse_rate(text: str | None) -> float | None:
    """``200 Gb/sec (4X HDR)`` -> 200.0; anything else None."""
    if text is None:
        return None
    m = _RATE_RE.match(text)
    return float(m["n"]) if m else None


def parse_modules(text: str) -> tuple[str, ...]:
    """Module names of ``/proc/modules`` (the first word of each line), sorted."""
    return tuple(sorted({line.split()[0] for line in text.splitlines() if line.split()}))


def place_of(root: Path, dev_dir: Path) -> PciPlace:
    """The PCI place of a sysfs ``device`` link (or a ``sys/bus/pci/devices/<bdf>`` entry) under ``root``.

    The link is resolved *inside* ``root`` (a recorded tree keeps the kernel's relative
    links); the chain of bridges is the path below ``sys/devices``.
    """
    try:
        real = Path(os.path.realpath(dev_dir))
        rel = real.relative_to(Path(os.path.realpath(root)) / "sys" / "devices")
    except (OSError, ValueError):
        rel = None
    path: tuple[str, ...] = ()
    bus_id: str | None = None
    if rel is not None:
        parts = rel.parts
        path = tuple(p for p in parts if p.startswith("pci") or _BDF_RE.match(p))
        bdfs = [p for p in path if _BDF_RE.match(p)]
        bus_id = normal_bdf(bdfs[-1]) if bdfs else None
    if bus_id is None:  # no resolvable link: the uevent file still names the slot
        uevent = _text(dev_dir / "uevent") or ""
        m = re.search(r"^PCI_SLOT_NAME=(\S+)$", uevent, re.MULTILINE)
        bus_id = normal_bdf(m[1]) if m else None
    numa = _int(_text(dev_dir / "numa_node"))
    return PciPlace(bus_id, None if numa is None or numa < 0 else numa, path)


# --------------------------------------------------------------------------- the node


def read_node(root: str | os.PathLike[str] = "/", node: str = "", host: str = "") -> NodeEvidence:
    """Read one node's NICs, RDMA ports, GIDs, GPUs (by PCI id), modules and topology under ``root``."""
    base = Path(root)
    problems: list[str] = []
    rdma = _read_rdma(base, problems)
    nets = _read_nets(base)
    gpus = _read_gpus(base)
    mods_text = _text(base / "proc" / "modules")
    if mods_text is None:
        problems.append(f"{base / 'proc' / 'modules'}: unreadable (nvidia_peermem cannot be judged)")
    if not (base / "sys" / "class" / "infiniband").is_dir():
        problems.append(f"{base / 'sys/class/infiniband'}: absent (no RDMA device, or the rdma core is not loaded)")
    return NodeEvidence(node=node, host=host or node, root=str(base), rdma=rdma, nets=nets, gpus=gpus,
                        modules=None if mods_text is None else parse_modules(mods_text), problems=tuple(problems))


def _read_rdma(base: Path, problems: list[str]) -> tuple[RdmaDevice, ...]:
    ib = base / "sys" / "class" / "infiniband"
    out = []
    for name in _listdir(ib):
        d = ib / name
        ports = []
        for p in _listdir(d / "ports"):
            number = _int(p)
            if number is None:
                continue
            pd = d / "ports" / p
            rate_text = _text(pd / "rate")
            if rate_text is None:
                problems.append(f"{pd / 'rate'}: unreadable")
            ports.append(RdmaPort(number, after_colon(_text(pd / "state")), after_colon(_text(pd / "phys_state")),
                                  parse_rate(rate_text), rate_text, _text(pd / "link_layer"), _read_gids(pd)))
        netdevs = tuple(_listdir(d / "device" / "net"))
        out.append(RdmaDevice(name, place_of(base, d / "device"), netdevs, tuple(ports)))
    return tuple(out)


def _read_gids(port_dir: Path) -> tuple[Gid, ...]:
    gids = []
    for i in _listdir(port_dir / "gids"):
        index = _int(i)
        gid = _text(port_dir / "gids" / i)
        if index is None or gid is None or gid == _ZERO_GID:  # an unused slot reads as all zeros
            continue
        gids.append(Gid(index, gid, _text(port_dir / "gid_attrs" / "types" / i) or None,
                        _text(port_dir / "gid_attrs" / "ndevs" / i) or None))
    return tuple(sorted(gids, key=lambda g: g.index))


def _read_nets(base: Path) -> tuple[NetIf, ...]:
    net = base / "sys" / "class" / "net"
    out = []
    for name in _listdir(net):
        d = net / name
        if not (d / "device").exists():  # lo, bridges, veths: no hardware behind them
            continue
        speed = _int(_text(d / "speed"))
        out.append(NetIf(name, speed if speed is not None and speed > 0 else None, _text(d / "operstate"),
                         place_of(base, d / "device")))
    return tuple(out)


def _read_gpus(base: Path) -> tuple[PciPlace, ...]:
    pci = base / "sys" / "bus" / "pci" / "devices"
    out = []
    for bdf in _listdir(pci):
        d = pci / bdf
        cls = _text(d / "class") or ""
        if _text(d / "vendor") == NVIDIA_VENDOR and cls.startswith("0x03"):  # display/3D controller
            out.append(place_of(base, d))
    return tuple(out)


# --------------------------------------------------------------------------- topology


def topology_class(a: PciPlace, b: PciPlace) -> str | None:
    """``nvidia-smi topo -m``'s class between two PCI functions (PIX, PXB, PHB, NODE, SYS); None: not known.

    PIX: one bridge (a PCIe switch's ports) between them; PXB: several bridges, no host
    bridge; PHB: the same root complex; NODE: other root complexes of one NUMA node; SYS:
    across NUMA nodes (a NUMA node not reported on either side reads as one node).
    """
    if not a.path or not b.path:
        return None
    common = 0
    for x, y in zip(a.path[:-1], b.path[:-1], strict=False):
        if x != y:
            break
        common += 1
    if common >= 2:  # share a bridge below the root complex
        bridges = max(len(a.path), len(b.path)) - common - 1
        return "PIX" if bridges <= 1 else "PXB"
    if common == 1:
        return "PHB"
    if a.numa is None or b.numa is None or a.numa == b.numa:
        return "NODE"
    return "SYS"


# --------------------------------------------------------------------------- recording


RECORDED = ("proc/modules",)
_PORT_FILES = ("state", "phys_state", "rate", "link_layer")


def record_tree(root: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Copy what :func:`read_node` reads from ``root`` into ``out``, links kept relative (a fixture of this node).

    Run it on a real node (``python -c 'from pytest_p2p.evidence.nodes import record_tree;
    record_tree("/", "fixtures/sysfs/<node>")'``) to turn a rig's state into a test fixture.
    """
    src, dst = Path(root), Path(out)
    for rel in RECORDED:
        _copy(src / rel, dst / rel)
    ib = src / "sys" / "class" / "infiniband"
    for name in _listdir(ib):
        d = Path("sys/class/infiniband") / name
        _link_device(src, dst, d)
        for p in _listdir(src / d / "ports"):
            for f in _PORT_FILES:
                _copy(src / d / "ports" / p / f, dst / d / "ports" / p / f)
            for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
                for i in _listdir(src / d / "ports" / p / sub):
                    _copy(src / d / "ports" / p / sub / i, dst / d / "ports" / p / sub / i)
    for name in _listdir(src / "sys" / "class" / "net"):
        d = Path("sys/class/net") / name
        if (src / d / "device").exists():
            _link_device(src, dst, d)
            for f in ("speed", "operstate"):
                _copy(src / d / f, dst / d / f)
    for bdf in _listdir(src / "sys" / "bus" / "pci" / "devices"):
        d = src / "sys" / "bus" / "pci" / "devices" / bdf
        if _text(d / "vendor") == NVIDIA_VENDOR:
            _link_pci(src, dst, Path("sys/bus/pci/devices") / bdf)
    return dst


def _copy(a: Path, b: Path) -> None:
    text = _text(a)
    if text is not None:
        b.parent.mkdir(parents=True, exist_ok=True)
        b.write_text(text + "\n", encoding="utf-8")


def _link_pci(src: Path, dst: Path, rel: Path) -> Path | None:
    """Recreate ``rel`` (a link into sys/devices) in ``dst`` with the function's files; the target's path."""
    try:
        real = Path(os.path.realpath(src / rel)).relative_to(Path(os.path.realpath(src)))
    except (OSError, ValueError):
        return None
    target = dst / real
    target.mkdir(parents=True, exist_ok=True)
    for f in ("class", "vendor", "numa_node", "uevent"):
        _copy(src / real / f, target / f)
    link = dst / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink() if link.is_symlink() else shutil.rmtree(link)
    link.symlink_to(os.path.relpath(target, link.parent))
    return real


def _link_device(src: Path, dst: Path, rel: Path) -> None:
    real = _link_pci(src, dst, rel / "device")
    if real is None:
        return
    for netdev in _listdir(src / real / "net"):
        (dst / real / "net" / netdev).mkdir(parents=True, exist_ok=True)
