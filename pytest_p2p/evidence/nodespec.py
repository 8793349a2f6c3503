"""The rig file's ``nodes:`` section, and each node's evidence judged against it.

A multi-node rig names its hosts (GPUs by bus id, NICs by RDMA device name), the crossings
between them and what each must show. Without a ``nodes:`` section a rig is single-host,
exactly as before. The section::

    nodes:
      hosts:
        trinity-a:
          gpus: ["0000:41:00.0", "0000:c1:00.0"]
          nics: {mlx5_0: {port: 1, state: ACTIVE, rate_gbps: 200, link_layer: Ethernet,
                          gid_index: 3, gid_type: RoCE v2}}
          nvidia_peermem: true        # GPUDirect RDMA's kernel module must be loaded
          nic_gpu_topology: NODE      # the worst class allowed between the NIC and each GPU
          env: {NCCL_SOCKET_IFNAME: enp1s0f0np0}
          sysfs: fixtures/sysfs/trinity-a   # CI: read a recorded tree instead of this node's /
      crossings:
        - between: [trinity-a, trinity-b]
          nic: mlx5_0
          transport: {gdr: NET/IB/GDRDMA, no_gdr: NET/IB, socket: NET/Socket}
          busbw_min_line_rate: 85%
      stages: [trinity-a:0000:41:00.0, trinity-a:0000:c1:00.0, trinity-b:0000:01:00.0]

Why per node and per crossing: the seed's silent fallbacks live in different places — a
port at half rate and a missing module on one node, a host-staged transfer on one crossing —
and a failure must say which. Arm names in ``transport`` are checked against the rig's arms
by ``rig.py`` (this stage cannot see the arms).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..schema import each, flag, key, key_factory, load, optional, real, whole, word
from ..util import is_bus_id
from ..validate import env_mapping, join, mapping, percent, sequence, show, string
from .model import TOPOLOGY_ORDER, topology_rank
from .nodes import NodeEvidence, normal_bdf, topology_class

NODES_KEYS = ("hosts", "crossings", "stages")
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_TRANSPORT_RE = re.compile(r"^(NET|P2P|SHM|COLLNET)(/[A-Za-z0-9_ .*…-]{1,64}){0,3}$")
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"


@dataclass(frozen=True)
class NicSpec:
    name: str
    port: int = key(1, whole(1, 64, what="a port number"))
    state: str | None = key(None, word(), null=True)
    rate_gbps: float | None = key(None, real(1, 10_000, what="a line rate in Gb/s"), null=True)
    link_layer: str | None = key(None, word(), null=True)
    gid_index: int | None = key(None, whole(0, 1023), null=True)
    gid_type: str | None = key(None, word(), null=True)
    netdev: str | None = key(None, word(), null=True)


def _bus_id(value: object, source: str, path: str) -> str:
    if not isinstance(value, str) or not is_bus_id(value):
        raise ConfigError(source, path, f"expected a PCI bus id such as '0000:41:00.0' (a node's GPUs are named by "
                                        f"bus id: indices differ per node), got {show(value)}")
    return normal_bdf(value)


def _nics(value: object, source: str, path: str) -> tuple[NicSpec, ...]:
    return tuple(load(NicSpec, spec, source, join(path, name), name=name)[0]
                 for name, spec in mapping(value, source, path).items())


@dataclass(frozen=True)
class HostSpec:
    name: str
    address: str | None = key(None, word(), null=True)
    gpus: tuple[str, ...] = key((), each(_bus_id), accepts="a list of PCI bus ids")
    nics: tuple[NicSpec, ...] = key((), _nics, accepts="`{name: NIC}`, see `nodes.hosts.<host>.nics.<nic>`")
    nvidia_peermem: bool | None = key(None, flag, null=True)
    nic_gpu_topology: str | None = key(None, word(*TOPOLOGY_ORDER[1:]), null=True)
    env: Mapping[str, str] = key_factory(dict, env_mapping, accepts="`{VAR: value}`")
    sysfs: str | None = key(None, word(), null=True)

    def nic(self, name: str) -> NicSpec | None:
        return next((n for n in self.nics if n.name == name), None)


def _transport(value: object, source: str, path: str) -> dict[str, str]:
    """Arm name -> the transport label its crossing must show."""
    out = {}
    for arm, label in mapping(value, source, path).items():
        text = string(label, source, join(path, arm))
        if not _TRANSPORT_RE.match(text):
            raise ConfigError(source, join(path, arm), f"expected a transport label such as NET/IB/GDRDMA, NET/IB "
                                                       f"or NET/Socket, got {show(label)}")
        out[arm] = text
    return out


def _share(value: object, source: str, path: str) -> float:
    share = percent(value, source, path)
    if not 0 < share <= 1:
        raise ConfigError(source, path, f"expected a share of the line rate in (0 %, 100 %], got {show(value)}")
    return share


@dataclass(frozen=True)
class Crossing:
    between: tuple[str, str]
    nic: str | None = key(None, optional(word()))
    # arm name -> expected label
    transport: Mapping[str, str] = key_factory(dict, _transport, accepts="`{arm: NET/...}`")
    # a share of the line rate, 0..1
    busbw_min_line_rate: float | None = key(None, optional(_share), accepts="a share of the line rate (0 %, 100 %]")

    @property
    def key(self) -> str:
        return f"{self.between[0]}~{self.between[1]}"


@dataclass(frozen=True)
class Stage:
    host: str
    gpu: str


@dataclass(frozen=True)
class NodesSpec:
    hosts: tuple[HostSpec, ...]
    crossings: tuple[Crossing, ...] = ()
    stages: tuple[Stage, ...] = ()

    def host(self, name: str) -> HostSpec:
        return next(h for h in self.hosts if h.name == name)

    def transport_arms(self) -> set[str]:
        return {arm for c in self.crossings for arm in c.transport}


# --------------------------------------------------------------------------- parsing


def parse_nodes(value: object, source: str, path: str = "nodes") -> NodesSpec | None:
    """``None`` (no section): a single-host rig, unchanged. Errors name the file, the field and the value."""
    if value is None:
        return None
    top = mapping(value, source, path, NODES_KEYS)
    hosts_map = mapping(top.get("hosts"), source, join(path, "hosts"))
    if len(hosts_map) < 1:
        raise ConfigError(source, join(path, "hosts"), "expected at least one host (name: {gpus, nics, ...})")
    hosts = tuple(_host(name, spec, source, join(join(path, "hosts"), name)) for name, spec in hosts_map.items())
    names = [h.name for h in hosts]
    crossings = tuple(_crossing(item, names, source, join(join(path, "crossings"), i))
                      for i, item in enumerate(sequence(top.get("crossings", []), source, join(path, "crossings"))))
    stages = tuple(_stage(item, hosts, source, join(join(path, "stages"), i))
                   for i, item in enumerate(sequence(top.get("stages", []), source, join(path, "stages"))))
    return NodesSpec(hosts, crossings, stages)


def _host(name: str, spec: object, source: str, where: str) -> HostSpec:
    if not _HOST_RE.match(name):
        raise ConfigError(source, where, "a host name uses letters, digits, '_', '.' and '-' (it names the node "
                                         "in test ids and in Ray's node list)")
    return load(HostSpec, spec, source, where, name=name)[0]


def _crossing(item: object, hosts: list[str], source: str, where: str) -> Crossing:
    between = sequence(mapping(item, source, where).get("between"), source, join(where, "between"))
    if len(between) != 2 or between[0] == between[1]:
        raise ConfigError(source, join(where, "between"), f"expected two different host names, got {show(between)}")
    for i, h in enumerate(between):
        if h not in hosts:
            raise ConfigError(source, join(join(where, "between"), i),
                              f"names {show(h)}, which nodes.hosts does not define (defined: {', '.join(hosts)})")
    return load(Crossing, item, source, where, also=("between",), between=(str(between[0]), str(between[1])))[0]


def _stage(item: object, hosts: tuple[HostSpec, ...], source: str, where: str) -> Stage:
    text = string(item, source, where)
    host, _, gpu = text.partition(":")
    spec = next((h for h in hosts if h.name == host), None)
    if spec is None or not is_bus_id(gpu):
        raise ConfigError(source, where, f"expected '<host>:<GPU bus id>' with a host of nodes.hosts, got {show(item)}")
    if spec.gpus and normal_bdf(gpu) not in spec.gpus:
        raise ConfigError(source, where, f"GPU {gpu} is not among {host}'s gpus ({', '.join(spec.gpus)})")
    return Stage(host, normal_bdf(gpu))


def sysfs_root(spec: HostSpec, rig_dir: Path) -> Path:
    """Where the node's evidence is read: its recorded tree (relative to the rig file) or ``/``."""
    if spec.sysfs is None:
        return Path("/")
    p = Path(spec.sysfs).expanduser()
    return p if p.is_absolute() else rig_dir / p


# --------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class Finding:
    """One expectation of one node judged: ``pass``, ``fail`` or ``inconclusive`` (the tree does not say)."""

    node: str
    what: str
    outcome: str
    message: str


def judge_node(ev: NodeEvidence, spec: HostSpec) -> list[Finding]:
    """Every expectation of ``spec`` against what the node's kernel showed; each finding names its source."""
    out: list[Finding] = []
    node = spec.name

    def add(what: str, outcome: str, msg: str) -> None:
        out.append(Finding(node, what, outcome, f"{node}: {msg}"))

    for bus in spec.gpus:
        if ev.gpu(bus) is None:
            seen = ", ".join(g.bus_id or "?" for g in ev.gpus) or "none"
            add(f"gpu {bus}", FAIL, f"GPU {bus} not on the PCI bus (NVIDIA functions seen: {seen})")
        else:  # said, so that a node judged on its GPUs alone shows what passed
            add(f"gpu {bus}", PASS, f"GPU {bus} on the PCI bus")
    for nic in spec.nics:
        out.extend(_judge_nic(ev, spec, nic))
    if spec.nvidia_peermem is not None:
        loaded = ev.peermem_loaded
        if loaded is None:
            add("nvidia_peermem", INCONCLUSIVE,
                "cannot tell whether nvidia_peermem is loaded (/proc/modules unreadable)")
        elif loaded != spec.nvidia_peermem:
            why = ("not loaded: NCCL cannot register GPU memory with the NIC and silently stages through host "
                   "memory (no GPUDirect RDMA); 'modprobe nvidia_peermem'") if spec.nvidia_peermem else \
                "loaded, and the rig expects it absent"
            add("nvidia_peermem", FAIL, f"nvidia_peermem {why} ({ev.root.rstrip('/')}/proc/modules)")
        else:
            add("nvidia_peermem", PASS, f"nvidia_peermem {'loaded' if loaded else 'absent'} as expected")
    return out


def _judge_nic(ev: NodeEvidence, spec: HostSpec, nic: NicSpec) -> list[Finding]:
    node, out = spec.name, []

    def add(what: str, outcome: str, msg: str) -> None:
        out.append(Finding(node, f"{nic.name} {what}", outcome, f"{node}: {nic.name}: {msg}"))

    dev = ev.rdma_device(nic.name)
    if dev is None:
        seen = ", ".join(d.name for d in ev.rdma) or "none"
        add("present", FAIL, f"no RDMA device {nic.name} in /sys/class/infiniband (seen: {seen}): NCCL_IB_HCA names "
                             "a device this node does not have, or the mlx5_ib/ib_core modules are not loaded")
        return out
    port = dev.port(nic.port)
    where = f"/sys/class/infiniband/{nic.name}/ports/{nic.port}"
    if port is None:
        add("port", FAIL, f"no port {nic.port} ({where} absent; ports: {', '.join(str(p.port) for p in dev.ports)})")
        return out
    if nic.state is not None and (port.state or "").upper() != nic.state.upper():
        add("state", FAIL, f"port {nic.port} is {port.state or 'unreadable'}, expected {nic.state} ({where}/state; "
                           f"phys_state {port.phys_state or '?'})")
    if nic.rate_gbps is not None:
        if port.rate_gbps is None:
            add("rate", INCONCLUSIVE, f"port rate unreadable ({where}/rate: {port.rate_text!r})")
        elif port.rate_gbps < nic.rate_gbps:
            add("rate", FAIL, f"port {nic.port} at {port.rate_gbps:g} Gb/s, expected {nic.rate_gbps:g} Gb/s "
                              f"({port.rate_gbps / nic.rate_gbps:.0%} of it; {where}/rate: {port.rate_text!r}): "
                              "a cable, transceiver or switch port trained down")
        else:
            add("rate", PASS, f"port {nic.port} at {port.rate_gbps:g} Gb/s")
    if nic.link_layer is not None and (port.link_layer or "").lower() != nic.link_layer.lower():
        add("link_layer", FAIL, f"link layer {port.link_layer or 'unreadable'}, expected {nic.link_layer} "
                                f"({where}/link_layer)")
    if nic.gid_index is not None:
        gid = port.gid(nic.gid_index)
        if gid is None:
            have = ", ".join(f"{g.index} ({g.type or '?'})" for g in port.gids) or "none"
            add("gid", FAIL, f"no GID at index {nic.gid_index} ({where}/gids/{nic.gid_index} empty; GIDs: {have}): "
                             f"NCCL_IB_GID_INDEX={nic.gid_index} cannot connect")
        elif nic.gid_type is not None and (gid.type or "").lower() != nic.gid_type.lower():
            add("gid", FAIL, f"GID {nic.gid_index} is {gid.type or 'of unknown type'}, expected {nic.gid_type} "
                             f"({where}/gid_attrs/types/{nic.gid_index})")
        else:
            add("gid", PASS, f"GID {nic.gid_index} = {gid.gid} ({gid.type or '?'} on {gid.ndev or '?'})")
    if nic.netdev is not None and nic.netdev not in dev.netdevs:
        add("netdev", FAIL, f"net device {nic.netdev} is not this NIC's (its: {', '.join(dev.netdevs) or 'none'})")
    if spec.nic_gpu_topology is not None:
        for bus in spec.gpus:
            gpu = ev.gpu(bus)
            if gpu is None:
                continue
            cls = topology_class(gpu, dev.place)
            if cls is None:
                add("topology", INCONCLUSIVE, f"PCI path of GPU {bus} or the NIC unknown")
            elif topology_rank(cls) > topology_rank(spec.nic_gpu_topology):
                add("topology", FAIL, f"GPU {bus} <-> NIC is {cls}, expected {spec.nic_gpu_topology} or better "
                                      f"(GPU {'/'.join(gpu.path)}, NIC {'/'.join(dev.place.path)}): GPUDirect RDMA "
                                      "needs NCCL_NET_GDR_LEVEL at least this far")
            else:
                add("topology", PASS, f"GPU {bus} <-> NIC {cls}")
    return out


def line_rate_gbps(ev: NodeEvidence, nic: str | None) -> float | None:
    """The node's line rate on ``nic`` (its first RDMA port; else the first NIC's net speed), Gb/s."""
    devs = [d for d in ev.rdma if nic is None or d.name == nic]
    for d in devs:
        for p in d.ports:
            if p.rate_gbps is not None and (p.state or "").upper() == "ACTIVE":
                return p.rate_gbps
    for n in ev.nets:
        if n.speed_mbps is not None and (nic is None or any(n.name in d.netdevs for d in devs)):
            return n.speed_mbps / 1000
    return None
