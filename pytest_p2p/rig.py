"""The rig file: which GPUs and pairs to test and what their interconnect must look like.

A rig file is YAML. ``rig.py`` validates the top level and the evidence expectations;
each later stage validates its own section (``arms``, ``probe``, ``server``,
``campaign``, ``baseline``) with the same error style. Every error names the file, the
field path and the bad value, e.g. ``rig.yaml: expect.pcie.gen: expected an integer
1..6, got 'four'``.

Expectations cascade: rig-wide ``expect`` < per-GPU ``gpu.<selector>`` < per-pair
``pair.<a>-<b>``. A field left out is not checked — except with no rig file at all,
where :func:`auto_rig` expects every link at its maximum and peer access wherever the
topology supports it.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import validate as v
from .errors import ConfigError
from .evidence.model import Evidence, GpuEvidence, topology_rank
from .util import is_bus_id, normalize_bus_id

TOP_KEYS = ("rig", "description", "gpus", "pairs", "env", "expect", "gpu", "pair",
            "arms", "probe", "server", "campaign", "baseline")
EXPECT_KEYS = ("peer_access", "topology", "pcie", "nvlink", "counters")
PCIE_KEYS = ("gen", "width", "max_gen", "max_width")
NVLINK_KEYS = ("links", "version")
COUNTER_KEYS = ("pcie_replay", "nvlink_crc", "nvlink_crc_per_s")

# Stage sections: key -> "module:parser". Each parser accepts None (section absent).
SECTION_PARSERS = {
    "arms": "pytest_p2p.probes.arms:parse_arms",
    "probe": "pytest_p2p.probes.config:parse_probe",
    "server": "pytest_p2p.serve.config:parse_server",
    "campaign": "pytest_p2p.campaign.config:parse_campaign",
    "baseline": "pytest_p2p.verdict.config:parse_baseline",
}

Selector = int | str  # NVML index, canonical bus id, or UUID


@dataclass(frozen=True)
class LinkExpect:
    """Minimum PCIe link: ``gen``/``width`` under load, ``max_gen``/``max_width`` as the platform allows."""

    gen: int | None = None
    width: int | None = None
    max_gen: int | None = None
    max_width: int | None = None


@dataclass(frozen=True)
class NvlinkExpect:
    """``links`` active NVLinks at ``version``; ``links: 0`` means the rig has no NVLink."""

    links: int | None = None
    version: int | None = None


@dataclass(frozen=True)
class Expectations:
    peer_access: bool | None = None
    topology: str | None = None
    pcie: LinkExpect = field(default_factory=LinkExpect)
    nvlink: NvlinkExpect = field(default_factory=NvlinkExpect)
    pcie_replay_budget: int | None = None
    nvlink_crc_budget: int | None = None  # growth per link over the session
    nvlink_crc_rate: float | None = None  # growth per link per second

    def over(self, base: Expectations) -> Expectations:
        """These expectations layered over ``base`` (set fields win, field by field)."""

        def pick(mine: Any, theirs: Any) -> Any:
            return theirs if mine is None else mine

        return Expectations(
            peer_access=pick(self.peer_access, base.peer_access),
            topology=pick(self.topology, base.topology),
            pcie=LinkExpect(*(pick(getattr(self.pcie, k), getattr(base.pcie, k)) for k in PCIE_KEYS)),
            nvlink=NvlinkExpect(*(pick(getattr(self.nvlink, k), getattr(base.nvlink, k)) for k in NVLINK_KEYS)),
            pcie_replay_budget=pick(self.pcie_replay_budget, base.pcie_replay_budget),
            nvlink_crc_budget=pick(self.nvlink_crc_budget, base.nvlink_crc_budget),
            nvlink_crc_rate=pick(self.nvlink_crc_rate, base.nvlink_crc_rate),
        )


@dataclass
class Rig:
    name: str
    source: str  # file path, or "<auto>" for auto-detection
    description: str = ""
    gpus: list[Selector] | None = None  # None = every visible GPU
    pairs: str | list[tuple[Selector, Selector]] = "auto"  # "auto" | "all" | explicit
    env: dict[str, str] = field(default_factory=dict)
    expect: Expectations = field(default_factory=Expectations)
    gpu_expect: dict[Selector, Expectations] = field(default_factory=dict)
    pair_expect: dict[tuple[Selector, Selector], Expectations] = field(default_factory=dict)
    sections: dict[str, Any] = field(default_factory=dict)
    digest: str = ""
    auto: bool = False

    # Stage sections, parsed by their stages.
    @property
    def arms(self) -> Any:
        return self.sections["arms"]

    @property
    def probe(self) -> Any:
        return self.sections["probe"]

    @property
    def server(self) -> Any:
        return self.sections["server"]

    @property
    def campaign(self) -> Any:
        return self.sections["campaign"]

    @property
    def baseline(self) -> Any:
        return self.sections["baseline"]


@dataclass
class ResolvedRig:
    """A rig applied to the evidence of one machine: indices instead of selectors."""

    rig: Rig
    gpus: list[int]
    pairs: list[tuple[int, int]]
    gpu_expect: dict[int, Expectations]
    pair_expect: dict[tuple[int, int], Expectations]


# --------------------------------------------------------------------------- parsing


def load_rig(path: str | Path, origin: str | None = None) -> Rig:
    """Read and validate a rig file. ``origin`` says how it was named (``--p2p-rig``, ``PYTEST_P2P_RIG``)."""
    import yaml

    p = Path(path)
    label = str(p) if origin is None else f"{p} (from {origin})"
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(label, "", "no such rig file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(label, "", f"cannot read the rig file: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(label, "", f"not valid YAML: {where}{problem}") from None
    rig = parse_rig(data, source=label, text=text, default_name=p.stem)
    rig.source = str(p)
    return rig


def parse_rig(data: Any, source: str = "rig.yaml", text: str | None = None,
              default_name: str | None = None) -> Rig:
    """Validate parsed YAML. Never raises anything but :class:`ConfigError`.

    ``default_name`` names a rig without a ``rig:`` key (default: the stem of ``source``).
    """
    try:
        return _parse_rig(data, source, text, default_name or Path(source).stem)
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(source, "", "structure nested too deeply") from None


def _parse_rig(data: Any, source: str, text: str | None, default_name: str) -> Rig:
    if data is None:
        data = {}
    top = v.mapping(data, source, "", TOP_KEYS)
    name = v.string(top.get("rig", default_name), source, "rig")
    description = top.get("description") or ""
    if not isinstance(description, str):
        raise ConfigError(source, "description", f"expected a string, got {v.show(description)}")
    gpus = _parse_gpus(top.get("gpus", "all"), source)
    pairs = _parse_pairs(top.get("pairs", "auto"), source)
    env = v.env_mapping(top.get("env"), source, "env")
    expect = parse_expectations(top.get("expect"), source, "expect")
    gpu_expect: dict[Selector, Expectations] = {}
    for key, val in v.mapping(top.get("gpu"), source, "gpu").items():
        sel = parse_selector(key, source, f"gpu.{key}")
        gpu_expect[sel] = parse_expectations(val, source, f"gpu.{key}", only=("pcie", "nvlink", "counters"))
    pair_expect: dict[tuple[Selector, Selector], Expectations] = {}
    for key, val in v.mapping(top.get("pair"), source, "pair").items():
        parts = key.split("-") if "-" in key and not is_bus_id(key) else None
        if not parts or len(parts) != 2:
            raise ConfigError(source, f"pair.{key}", "expected a key like '1-2' (two GPU selectors joined by '-')")
        a, b = (parse_selector(p, source, f"pair.{key}") for p in parts)
        pair_expect[(a, b)] = parse_expectations(val, source, f"pair.{key}", only=("peer_access", "topology"))
    sections = {key: _parse_section(key, top.get(key), source) for key in SECTION_PARSERS}
    digest_src = text if text is not None else repr(data)
    digest = hashlib.sha256(digest_src.encode("utf-8")).hexdigest()[:16]
    return Rig(name=name, source=source, description=description, gpus=gpus, pairs=pairs, env=env,
               expect=expect, gpu_expect=gpu_expect, pair_expect=pair_expect, sections=sections, digest=digest)


def _parse_section(key: str, value: Any, source: str) -> Any:
    module_name, func_name = SECTION_PARSERS[key].split(":")
    parser = getattr(importlib.import_module(module_name), func_name)
    return parser(value, source, key)


def parse_selector(value: Any, source: str, path: str) -> Selector:
    """A GPU selector: NVML index, PCI bus id (any common spelling) or UUID (``GPU-…``)."""
    if isinstance(value, bool):
        raise ConfigError(source, path, f"expected a GPU index, bus id or UUID, got {v.show(value)}")
    if isinstance(value, int):
        return v.integer(value, source, path, 0, 1023)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        if text.upper().startswith("GPU-") or text.upper().startswith("MIG-"):
            return text
        if is_bus_id(text):
            return normalize_bus_id(text)
    raise ConfigError(source, path,
                      f"expected a GPU index, PCI bus id ('0000:0A:00.0') or UUID ('GPU-…'), got {v.show(value)}")


def _parse_gpus(value: Any, source: str) -> list[Selector] | None:
    if value == "all":
        return None
    items = v.sequence(value, source, "gpus")
    if not items:
        raise ConfigError(source, "gpus", "expected 'all' or a non-empty list of GPU selectors")
    sels = [parse_selector(item, source, f"gpus[{i}]") for i, item in enumerate(items)]
    if len(set(sels)) != len(sels):
        raise ConfigError(source, "gpus", f"a GPU is listed twice: {v.show(value)}")
    return sels


def _parse_pairs(value: Any, source: str) -> str | list[tuple[Selector, Selector]]:
    if value in ("auto", "all"):
        return str(value)
    items = v.sequence(value, source, "pairs")
    out: list[tuple[Selector, Selector]] = []
    for i, item in enumerate(items):
        path = f"pairs[{i}]"
        if isinstance(item, str) and "-" in item and not is_bus_id(item):
            item = item.split("-")
        pair = v.sequence(item, source, path)
        if len(pair) != 2:
            raise ConfigError(source, path, f"expected two GPU selectors, got {v.show(item)}")
        a, b = (parse_selector(x, source, path) for x in pair)
        if a == b:
            raise ConfigError(source, path, "a pair needs two different GPUs")
        out.append((a, b))
    if not out:
        raise ConfigError(source, "pairs", "expected 'auto', 'all' or a non-empty list of pairs")
    return out


def parse_topology(value: Any, source: str, path: str) -> str:
    text = v.string(value, source, path).strip().upper()
    if text in ("PIX", "PXB", "PHB", "NODE", "SYS", "NV"):
        return text
    if text.startswith("NV") and text[2:].isdigit() and 0 < int(text[2:]) <= 72:
        return text
    raise ConfigError(source, path,
                      f"expected a topology class as 'nvidia-smi topo -m' names it (NV#, PIX, PXB, PHB, NODE, SYS), "
                      f"got {v.show(value)}")


def parse_expectations(value: Any, source: str, path: str, only: tuple[str, ...] = EXPECT_KEYS) -> Expectations:
    m = v.mapping(value, source, path, only)
    peer = v.boolean(m["peer_access"], source, v.join(path, "peer_access")) if "peer_access" in m else None
    topo = parse_topology(m["topology"], source, v.join(path, "topology")) if "topology" in m else None
    pp = v.join(path, "pcie")
    pm = v.mapping(m.get("pcie"), source, pp, PCIE_KEYS)
    pcie = LinkExpect(
        gen=v.integer(pm["gen"], source, v.join(pp, "gen"), 1, 6) if "gen" in pm else None,
        width=_width(pm["width"], source, v.join(pp, "width")) if "width" in pm else None,
        max_gen=v.integer(pm["max_gen"], source, v.join(pp, "max_gen"), 1, 6) if "max_gen" in pm else None,
        max_width=_width(pm["max_width"], source, v.join(pp, "max_width")) if "max_width" in pm else None,
    )
    np_ = v.join(path, "nvlink")
    raw_nv = m.get("nvlink")
    if raw_nv is False:
        nvlink = NvlinkExpect(links=0)
    else:
        nm = v.mapping(raw_nv, source, np_, NVLINK_KEYS)
        nvlink = NvlinkExpect(
            links=v.integer(nm["links"], source, v.join(np_, "links"), 0, 72) if "links" in nm else None,
            version=v.integer(nm["version"], source, v.join(np_, "version"), 1, 9) if "version" in nm else None,
        )
    cp = v.join(path, "counters")
    cm = v.mapping(m.get("counters"), source, cp, COUNTER_KEYS)
    return Expectations(
        peer_access=peer,
        topology=topo,
        pcie=pcie,
        nvlink=nvlink,
        pcie_replay_budget=(v.integer(cm["pcie_replay"], source, v.join(cp, "pcie_replay"), 0)
                            if "pcie_replay" in cm else None),
        nvlink_crc_budget=(v.integer(cm["nvlink_crc"], source, v.join(cp, "nvlink_crc"), 0)
                           if "nvlink_crc" in cm else None),
        nvlink_crc_rate=(v.number(cm["nvlink_crc_per_s"], source, v.join(cp, "nvlink_crc_per_s"), 0)
                         if "nvlink_crc_per_s" in cm else None),
    )


def _width(value: Any, source: str, path: str) -> int:
    if isinstance(value, str) and value.lower().startswith("x") and value[1:].isdigit():
        value = int(value[1:])
    w = v.integer(value, source, path, 1, 32)
    if w not in (1, 2, 4, 8, 12, 16, 32):
        raise ConfigError(source, path, f"expected a PCIe width (1, 2, 4, 8, 12, 16, 32), got {w}")
    return w


# --------------------------------------------------------------------------- auto-detection


def auto_rig() -> Rig:
    """The rig used when no rig file is given: every GPU, every pair, links at their maximum."""
    sections = {key: _parse_section(key, None, "<auto>") for key in SECTION_PARSERS}
    return Rig(name="auto", source="<auto>", gpus=None, pairs="all", sections=sections, auto=True,
               digest="auto")


def topology_supports_p2p(topology: str | None) -> bool:
    """NVLink or PCIe within one host bridge: P2P is possible; across NUMA nodes (NODE/SYS) usually not."""
    return topology is not None and topology_rank(topology) <= topology_rank("PHB")


def auto_expectations_for_gpu(gpu: GpuEvidence) -> Expectations:
    links = len(gpu.nvlinks)
    versions = [link.version for link in gpu.nvlinks if link.version]
    return Expectations(
        pcie=LinkExpect(gen=gpu.pcie.max.gen, width=gpu.pcie.max.width),
        nvlink=NvlinkExpect(links=links if links else None, version=max(versions) if versions else None),
        pcie_replay_budget=0,
        # NVLink CRC growth is reported but not judged without a rig budget: corrected (replayed) CRC
        # errors are routine on NVLink 4+; our H200 pair logs a few per link per session.
    )


# --------------------------------------------------------------------------- resolution


def resolve(rig: Rig, evidence: Evidence) -> ResolvedRig:
    """Apply the rig to one machine's evidence; unknown selectors are errors naming what exists."""
    source = rig.source

    def find(sel: Selector, path: str) -> int:
        for g in evidence.gpus:
            if (isinstance(sel, int) and g.index == sel) or sel in (g.bus_id, g.uuid):
                return g.index
        present = ", ".join(f"{g.index}={g.bus_id}" for g in evidence.gpus) or "none"
        kind = "index" if isinstance(sel, int) else ("UUID" if str(sel).upper().startswith(("GPU-", "MIG-"))
                                                     else "bus id")
        raise ConfigError(source, path, f"no GPU with {kind} {sel} on this machine ({evidence.label}); "
                                        f"GPUs present: {present}")

    if rig.gpus is None:
        gpus = [g.index for g in evidence.gpus]
    else:
        gpus = [find(sel, f"gpus[{i}]") for i, sel in enumerate(rig.gpus)]
    recorded = {(p.a, p.b) for p in evidence.pairs}  # live: every pair; a snapshot may hold fewer
    all_pairs = [(a, b) for i, a in enumerate(sorted(gpus)) for b in sorted(gpus)[i + 1:] if (a, b) in recorded]
    if rig.pairs == "all":
        pairs = all_pairs
    elif rig.pairs == "auto":
        # unknown peer access (a recording without the P2P status) is kept: the peer-access check says so
        pairs = [p for p in all_pairs if evidence.pair(*p).peer_access is not False]
    else:
        pairs = []
        for i, (sa, sb) in enumerate(rig.pairs):
            a, b = sorted((find(sa, f"pairs[{i}]"), find(sb, f"pairs[{i}]")))
            if a not in gpus or b not in gpus:
                raise ConfigError(source, f"pairs[{i}]", f"GPU {a if a not in gpus else b} is not in 'gpus'")
            if (a, b) in pairs:
                raise ConfigError(source, f"pairs[{i}]", f"GPUs {a} and {b} are listed as a pair twice")
            if (a, b) not in recorded:
                raise ConfigError(source, f"pairs[{i}]", f"the evidence ({evidence.label}) holds nothing about "
                                                         f"the pair of GPUs {a} and {b}")
            pairs.append((a, b))
    gpu_expect: dict[int, Expectations] = {}
    for idx in gpus:
        base = auto_expectations_for_gpu(evidence.gpu(idx)) if rig.auto else Expectations()
        exp = rig.expect.over(base)
        for sel, specific in rig.gpu_expect.items():
            if find(sel, f"gpu.{sel}") == idx:
                exp = specific.over(exp)
        gpu_expect[idx] = exp
    pair_expect: dict[tuple[int, int], Expectations] = {}
    for pair in pairs:
        ev = evidence.pair(*pair)
        base = Expectations(peer_access=topology_supports_p2p(ev.topology) or None, topology=ev.topology) \
            if rig.auto else Expectations()
        exp = rig.expect.over(base)
        for (sa, sb), specific in rig.pair_expect.items():
            if tuple(sorted((find(sa, f"pair.{sa}-{sb}"), find(sb, f"pair.{sa}-{sb}")))) == pair:
                exp = specific.over(exp)
        pair_expect[pair] = exp
    return ResolvedRig(rig=rig, gpus=gpus, pairs=pairs, gpu_expect=gpu_expect, pair_expect=pair_expect)


def rig_to_yaml_dict(evidence: Evidence, name: str = "my-rig") -> dict[str, Any]:
    """What ``gen-config`` writes: today's machine made explicit, to edit and commit."""
    gpu_block: dict[str, Any] = {}
    for g in evidence.gpus:
        loaded = g.pcie.loaded or g.pcie.max
        entry: dict[str, Any] = {"pcie": {k: val for k, val in (
            ("gen", loaded.gen), ("width", loaded.width),
            ("max_gen", g.pcie.max.gen), ("max_width", g.pcie.max.width)) if val is not None}}
        active = g.active_nvlinks
        if g.nvlinks:
            versions = [link.version for link in active if link.version]
            entry["nvlink"] = {"links": len(active), **({"version": max(versions)} if versions else {})}
        entry["counters"] = {"pcie_replay": 0}
        gpu_block[g.bus_id] = entry
    pair_block: dict[str, Any] = {}
    for p in evidence.pairs:
        item: dict[str, Any] = {}
        if p.topology:
            item["topology"] = p.topology
        if p.peer_access is not None:
            item["peer_access"] = bool(p.peer_access)
        pair_block[f"{p.a}-{p.b}"] = item
    return {
        "rig": name,
        "description": f"generated by pytest-p2p gen-config from {evidence.label}",
        "gpus": [g.index for g in evidence.gpus],
        "pairs": "auto",
        "gpu": gpu_block,
        "pair": pair_block,
    }


__all__ = ["Rig", "ResolvedRig", "Expectations", "LinkExpect", "NvlinkExpect", "load_rig", "parse_rig",
           "auto_rig", "resolve", "parse_selector", "rig_to_yaml_dict", "topology_supports_p2p"]
