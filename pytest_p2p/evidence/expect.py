"""Hardware expectations: what a GPU's links and a pair's peer access must look like.

They belong to the evidence stage (the checks in :mod:`.diagnose` judge evidence against
them); the rig file (``rig.py``) parses its ``expect``/``gpu``/``pair`` blocks with
:func:`parse_expectations` and hands the result here, so evidence never imports the rig.
:class:`ResolvedRig` is the rig applied to one machine (made by :func:`.resolve.resolve`): NVML
indices instead of selectors, which GPUs and pairs are checked, and why the others are not.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TypeVar

from ..errors import ConfigError
from ..schema import bounded, flag, key, load, real, rig_keys, whole

# names, not 'from . import validate': that form reads a stale module off the package object when
# pytester re-imports the package in-process, and its ConfigError would be another class
from ..validate import integer, join, show, string
from .model import P2P_STATUS_TEXT, Evidence, GpuEvidence, PairEvidence, topology_rank

T = TypeVar("T")


def parse_topology(value: object, source: str, path: str) -> str:
    text = string(value, source, path).strip().upper()
    if text in ("PIX", "PXB", "PHB", "NODE", "SYS", "NV"):
        return text
    if text.startswith("NV") and text[2:].isdigit() and 0 < int(text[2:]) <= 72:
        return text
    raise ConfigError(source, path,
                      f"expected a topology class as 'nvidia-smi topo -m' names it (NV#, PIX, PXB, PHB, NODE, SYS), "
                      f"got {show(value)}")


def _width(value: object, source: str, path: str) -> int:
    if isinstance(value, str) and value.lower().startswith("x") and value[1:].isdigit():
        value = int(value[1:])
    w = integer(value, source, path, 1, 32)
    if w not in (1, 2, 4, 8, 12, 16, 32):
        raise ConfigError(source, path, f"expected a PCIe width (1, 2, 4, 8, 12, 16, 32), got {w}")
    return w


@dataclass(frozen=True)
class LinkExpect:
    """Minimum PCIe link: ``gen``/``width`` under load, ``max_gen``/``max_width`` as the platform allows."""

    gen: int | None = key(None, bounded(1, 6))
    width: int | None = key(None, _width, accepts="1, 2, 4, 8, 12, 16, 32 (or `x16`)")
    max_gen: int | None = key(None, bounded(1, 6))
    max_width: int | None = key(None, _width, accepts="1, 2, 4, 8, 12, 16, 32 (or `x16`)")


@dataclass(frozen=True)
class NvlinkExpect:
    """``links`` active NVLinks at ``version``; ``links: 0`` (or ``nvlink: false``) means the rig has no NVLink."""

    links: int | None = key(None, bounded(0, 72))
    version: int | None = key(None, bounded(1, 9))


@dataclass(frozen=True)
class _Counters:
    """The ``counters:`` block, read into :class:`Expectations`' budget fields."""

    pcie_replay: int | None = key(None, whole(0, 10**9))
    nvlink_crc: int | None = key(None, whole(0, 10**12))  # growth per link over the session
    nvlink_crc_per_s: float | None = key(None, real(0, 1e9))  # growth per link per second


def _nvlink(value: object, source: str, path: str) -> NvlinkExpect:
    return NvlinkExpect(links=0) if value is False else load(NvlinkExpect, value, source, path)[0]


@dataclass(frozen=True)
class Expectations:
    peer_access: bool | None = key(None, flag)
    topology: str | None = key(None, parse_topology, accepts="`NV#`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`")
    pcie: LinkExpect = key(LinkExpect(), lambda v, s, p: load(LinkExpect, v, s, p)[0], accepts="see `expect.pcie`")
    nvlink: NvlinkExpect = key(NvlinkExpect(), _nvlink, accepts="see `expect.nvlink`; `false`: no NVLink")
    pcie_replay_budget: int | None = None
    nvlink_crc_budget: int | None = None  # growth per link over the session
    nvlink_crc_rate: float | None = None  # growth per link per second

    def over(self, base: Expectations) -> Expectations:
        """These expectations layered over ``base`` (set fields win, field by field)."""

        def pick(mine: T | None, theirs: T | None) -> T | None:
            return theirs if mine is None else mine

        return Expectations(
            peer_access=pick(self.peer_access, base.peer_access),
            topology=pick(self.topology, base.topology),
            pcie=LinkExpect(gen=pick(self.pcie.gen, base.pcie.gen), width=pick(self.pcie.width, base.pcie.width),
                            max_gen=pick(self.pcie.max_gen, base.pcie.max_gen),
                            max_width=pick(self.pcie.max_width, base.pcie.max_width)),
            nvlink=NvlinkExpect(links=pick(self.nvlink.links, base.nvlink.links),
                                version=pick(self.nvlink.version, base.nvlink.version)),
            pcie_replay_budget=pick(self.pcie_replay_budget, base.pcie_replay_budget),
            nvlink_crc_budget=pick(self.nvlink_crc_budget, base.nvlink_crc_budget),
            nvlink_crc_rate=pick(self.nvlink_crc_rate, base.nvlink_crc_rate),
        )


PCIE_KEYS = tuple(rig_keys(LinkExpect))
NVLINK_KEYS = tuple(rig_keys(NvlinkExpect))
COUNTER_KEYS = tuple(rig_keys(_Counters))
EXPECT_KEYS = (*rig_keys(Expectations), "counters")


def parse_expectations(value: object, source: str, path: str, only: tuple[str, ...] = EXPECT_KEYS) -> Expectations:
    counters = ("counters",) if "counters" in only else ()
    exp, body = load(Expectations, value, source, path, only=only, also=counters)
    c = load(_Counters, body.get("counters"), source, join(path, "counters"))[0]
    return replace(exp, pcie_replay_budget=c.pcie_replay, nvlink_crc_budget=c.nvlink_crc,
                   nvlink_crc_rate=c.nvlink_crc_per_s)


@dataclass
class ResolvedRig:
    """A rig applied to the evidence of one machine: indices instead of selectors.

    ``excluded`` names the pairs left out and why (auto-detection keeps only pairs that can
    do P2P); ``missing`` holds one message per rig GPU that this machine does not show (a
    GPU gone from the bus): the presence check fails with them; ``notes`` say how the
    selection was made (``CUDA_VISIBLE_DEVICES``, MIG).
    """

    rig_name: str
    source: str
    gpus: list[int]
    pairs: list[tuple[int, int]]
    gpu_expect: dict[int, Expectations]
    pair_expect: dict[tuple[int, int], Expectations]
    excluded: dict[tuple[int, int], str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def no_pairs_reason(self) -> str | None:
        """Why no pair is checked (a skip reason for every pair check), or ``None`` when some pair is."""
        if self.pairs:
            return None
        if len(self.gpus) < 2:
            which = ", ".join(f"gpu{g}" for g in self.gpus) or "none"
            return f"no GPU pair to check: the rig selects {len(self.gpus)} GPU(s) on this machine ({which})"
        if self.excluded:
            why = "; ".join(f"gpu{a}-gpu{b}: {reason}" for (a, b), reason in sorted(self.excluded.items()))
            return f"no GPU pair can do P2P here, so none is checked ({why}); name pairs in a rig file to check them"
        return "no GPU pair to check: the evidence holds no pair of the rig's GPUs"


def topology_supports_p2p(topology: str | None) -> bool:
    """NVLink or PCIe within one host bridge: P2P is possible; across NUMA nodes (NODE/SYS) usually not."""
    return topology is not None and topology_rank(topology) <= topology_rank("PHB")


def auto_expectations_for_gpu(gpu: GpuEvidence) -> Expectations:
    """No rig file: every link at the maximum this GPU reports, no PCIe replays."""
    links = len(gpu.nvlinks)
    versions = [link.version for link in gpu.nvlinks if link.version]
    return Expectations(
        pcie=LinkExpect(gen=gpu.pcie.max.gen, width=gpu.pcie.max.width),
        nvlink=NvlinkExpect(links=links if links else None, version=max(versions) if versions else None),
        pcie_replay_budget=0,
        # NVLink CRC growth is reported but not judged without a rig budget: corrected (replayed) CRC
        # errors are routine on NVLink 4+; our H200 pair logs a few per link per session.
    )


def why_no_p2p(ev: Evidence, pair: PairEvidence) -> str | None:
    """Why this pair cannot do P2P on this machine, or ``None`` when it can (or may: not reported).

    Auto-detection and ``gen-config`` select pairs with this. A pair whose NVML P2P status
    says OK both ways is kept even when CUDA says no: the hardware claims P2P, so the peer
    check runs and reports the conflict (IOMMU/ACS, a replaced kernel module).
    """
    mig = [g for g in (ev.gpu(pair.a), ev.gpu(pair.b)) if g.mig_mode]
    if mig:
        return (f"MIG is enabled on {' and '.join(g.label() for g in mig)}: CUDA gives MIG instances no peer "
                f"access")
    if pair.peer_access is not False or (pair.p2p_read == "OK" and pair.p2p_write == "OK"):
        return None
    facts = []
    if pair.cuda_peer_ab is not None or pair.cuda_peer_ba is not None:
        facts.append(f"CUDA can-access-peer {_yn(pair.cuda_peer_ab)}/{_yn(pair.cuda_peer_ba)}")
    for name, code in (("read", pair.p2p_read), ("write", pair.p2p_write)):
        if code is not None:
            facts.append(f"NVML P2P {name} {code} ({P2P_STATUS_TEXT.get(code, code)})")
    return "no peer access (" + ", ".join(facts or ["not reported"]) + ")"


def _yn(x: bool | None) -> str:
    return "?" if x is None else ("yes" if x else "no")
