"""The rig file: which GPUs and pairs to test and what their interconnect must look like.

A rig file is YAML. ``rig.py`` validates the top level and the evidence expectations;
each later stage validates its own section (``arms``, ``probe``, ``server``,
``campaign``, ``baseline``) with the same error style. Every error names the file, the
field path and the bad value, e.g. ``rig.yaml: expect.pcie.gen: expected an integer
1..6, got 'four'``.

Expectations cascade: rig-wide ``expect`` < per-GPU ``gpu.<selector>`` < per-pair
``pair.<a>-<b>``. A field left out is not checked — except with no rig file at all,
where :func:`auto_rig` takes the pairs that can do P2P and expects every link at its
maximum and peer access wherever the topology supports it. The expectations themselves
(and their judging) live in the evidence stage (``evidence/expect.py``), and so does
:func:`resolve`, which applies a rig to one machine's evidence (``evidence/resolve.py``;
re-exported here).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..evidence.expect import (
    COUNTER_KEYS,
    EXPECT_KEYS,
    NVLINK_KEYS,
    PCIE_KEYS,
    Expectations,
    LinkExpect,
    NvlinkExpect,
    ResolvedRig,
    parse_expectations,
    parse_topology,
    topology_supports_p2p,
)
from ..evidence.genconfig import rig_to_yaml_dict
from ..evidence.nodespec import NodesSpec, parse_nodes
from ..evidence.resolve import Selector, resolve
from ..evidence.visible import visible_gpus
from ..util import is_bus_id, normalize_bus_id

# names, not 'from . import validate': that form reads a stale module off the package object when
# pytester re-imports the package in-process, and its ConfigError would be another class
from ..validate import (
    MAX_TEXT_CHARS,
    check_bounded,
    env_mapping,
    integer,
    mapping,
    sequence,
    show,
    string,
    yaml_document,
)

if TYPE_CHECKING:  # the stages' section types; their modules are imported when a rig is parsed
    from ..campaign.config import CampaignConfig
    from ..probes.arms import Arm
    from ..probes.config import ProbeConfig
    from ..serve.config import ServerConfig
    from ..verdict.config import BaselineConfig

TOP_KEYS = ("rig", "description", "gpus", "pairs", "env", "expect", "gpu", "pair",
            "arms", "probe", "server", "campaign", "baseline", "nodes")
SECTION_KEYS = ("arms", "probe", "server", "campaign", "baseline")


@dataclass(frozen=True)
class RigSections:
    """The stage sections of a rig file, each parsed and typed by its own stage."""

    arms: dict[str, Arm]
    probe: ProbeConfig
    server: ServerConfig
    campaign: CampaignConfig
    baseline: BaselineConfig

    def get(self, key: str, default: object = None) -> object:
        """``sections.get("server")`` as the dict this used to be (prefer the typed attributes)."""
        return getattr(self, key, default) if key in SECTION_KEYS else default

    def __getitem__(self, key: str) -> object:
        if key not in SECTION_KEYS:
            raise KeyError(key)
        return getattr(self, key)


def parse_sections(top: Mapping[str, object], source: str) -> RigSections:
    """Each stage validates its own section (``None``: the section is absent, defaults apply)."""
    from ..campaign.config import parse_campaign
    from ..probes.arms import parse_arms
    from ..probes.config import parse_probe
    from ..serve.config import parse_server
    from ..verdict.config import parse_baseline

    return RigSections(
        arms=parse_arms(top.get("arms"), source, "arms"),
        probe=parse_probe(top.get("probe"), source, "probe"),
        server=parse_server(top.get("server"), source, "server"),
        campaign=parse_campaign(top.get("campaign"), source, "campaign"),
        baseline=parse_baseline(top.get("baseline"), source, "baseline"),
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
    sections: RigSections = field(default_factory=lambda: parse_sections({}, "<defaults>"))
    digest: str = ""  # what the file says (content_digest): the rig's identity in run.json and the store
    file_digest: str = ""  # the file's bytes: how runs saved before content digests named it
    auto: bool = False
    nodes: NodesSpec | None = None  # None: a single-host rig (docs/multinode.md)

    @property
    def arms(self) -> dict[str, Arm]:
        return self.sections.arms

    @property
    def probe(self) -> ProbeConfig:
        return self.sections.probe

    @property
    def server(self) -> ServerConfig:
        return self.sections.server

    @property
    def campaign(self) -> CampaignConfig:
        return self.sections.campaign

    @property
    def baseline(self) -> BaselineConfig:
        return self.sections.baseline


# --------------------------------------------------------------------------- parsing


def load_rig(path: str | Path, origin: str | None = None) -> Rig:
    """Read and validate a rig file. ``origin`` says how it was named (``--p2p-rig``, ``PYTEST_P2P_RIG``)."""
    p = Path(path)
    label = str(p) if origin is None else f"{p} (from {origin})"
    try:
        with p.open(encoding="utf-8") as fh:
            text = fh.read(MAX_TEXT_CHARS + 1)
    except FileNotFoundError:
        raise ConfigError(label, "", "no such rig file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(label, "", f"cannot read the rig file: {exc}") from None
    data = yaml_document(text, label)
    rig = parse_rig(data, source=label, text=text, default_name=p.stem)
    rig.source = str(p)
    return rig


def parse_rig(data: object, source: str = "rig.yaml", text: str | None = None,
              default_name: str | None = None) -> Rig:
    """Validate parsed YAML. Never raises anything but :class:`ConfigError`.

    ``default_name`` names a rig without a ``rig:`` key (default: the stem of ``source``).
    """
    try:
        check_bounded(data, source)
        return _parse_rig(data, source, text, default_name or Path(source).stem)
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(source, "", "structure nested too deeply") from None


def _parse_rig(data: object, source: str, text: str | None, default_name: str) -> Rig:
    if data is None:
        data = {}
    top = mapping(data, source, "", TOP_KEYS)
    name = string(top.get("rig", default_name), source, "rig")
    description = top.get("description") or ""
    if not isinstance(description, str):
        raise ConfigError(source, "description", f"expected a string, got {show(description)}")
    gpus = _parse_gpus(top.get("gpus", "all"), source)
    pairs = _parse_pairs(top.get("pairs", "auto"), source)
    env = env_mapping(top.get("env"), source, "env")
    expect = parse_expectations(top.get("expect"), source, "expect")
    gpu_expect: dict[Selector, Expectations] = {}
    for key, val in mapping(top.get("gpu"), source, "gpu").items():
        sel = parse_selector(key, source, f"gpu.{key}")
        gpu_expect[sel] = parse_expectations(val, source, f"gpu.{key}", only=("pcie", "nvlink", "counters"))
    pair_expect: dict[tuple[Selector, Selector], Expectations] = {}
    for key, val in mapping(top.get("pair"), source, "pair").items():
        parts = key.split("-") if "-" in key and not is_bus_id(key) and len(key) < 200 else None
        if not parts or len(parts) != 2:
            raise ConfigError(source, f"pair.{key}", "expected a key like '1-2' (two GPU selectors joined by '-')")
        a, b = (parse_selector(p, source, f"pair.{key}") for p in parts)
        pair_expect[(a, b)] = parse_expectations(val, source, f"pair.{key}", only=("peer_access", "topology"))
    sections = parse_sections(top, source)
    _cross_check(top, sections, source)
    nodes = parse_nodes(top.get("nodes"), source)
    undefined_arms = sorted(nodes.transport_arms() - set(sections.arms)) if nodes else []
    if undefined_arms:
        raise ConfigError(source, "nodes.crossings", f"a transport names arm {', '.join(undefined_arms)}, which this "
                                                     f"rig file does not define (defined: {', '.join(sections.arms)})")
    file_src = text if text is not None else repr(data)  # bounded by check_bounded above
    return Rig(name=name, source=source, description=description, gpus=gpus, pairs=pairs, env=env,
               expect=expect, gpu_expect=gpu_expect, pair_expect=pair_expect, sections=sections,
               digest=content_digest(data), file_digest=hashlib.sha256(file_src.encode("utf-8")).hexdigest()[:16],
               nodes=nodes)


def _canonical(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}  # json.dumps sorts them
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if value is None or isinstance(value, (str, int, float)):
        return value
    return str(value)  # a YAML date or timestamp: as it reads


def content_digest(data: object) -> str:
    """The rig file's identity: a digest of what it says, not of how it is written.

    Why not the file's bytes: a comment, a blank line or keys in another order changed the digest, and with it
    every night's identity: the next nightly comparison named "rig file" as a cause of whatever moved, and the
    earlier nights of the design were no longer lent their start spread (``verdict.store_blocks``). The committed
    7B rig's comment quoting a night moved its digest so. Runs saved before keep the file's own digest
    (:attr:`Rig.file_digest`, still written to ``run.json`` as ``rig_file_digest``), and a night is matched by
    either."""
    text = json.dumps(_canonical(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _cross_check(top: Mapping[str, object], sections: RigSections, source: str) -> None:
    """What one section says about another, named at rig-load time (not as a collection error later)."""
    undefined = [a for a in sections.campaign.arms if a not in sections.arms]
    if undefined:
        raise ConfigError(source, "campaign.arms", f"names {', '.join(undefined)}, which this rig file does not "
                                                   f"define (defined: {', '.join(sections.arms)})")
    server = sections.server
    wants_model = "server" in top or sections.campaign.kind == "model"
    if wants_model and not server.model and not server.simulated:
        raise ConfigError(source, "server.model", "missing: the model the server loads (a Hugging Face id or a "
                                                  "local path); a model campaign cannot start without it")


@dataclass(frozen=True)
class CampaignUse:
    """What a rig's campaign runs with the session's overrides: the one check pytest and ``doctor --rig`` share."""

    kind: str  # "model", "probe" or "off"
    config: CampaignConfig
    has_server: bool


def campaign_use(rig: Rig, *, mode: str | None = None, reps: int | None = None, reps_origin: str = "--p2p-reps",
                 arms: list[str] | None = None, arms_origin: str = "--p2p-arms") -> CampaignUse:
    """The campaign the rig asks for, or the :class:`ConfigError` that makes it unusable.

    Why one function: pytest refuses these at configure time (a usage error before collection)
    and ``doctor --rig`` must refuse the same files — written twice, the two would drift.
    Nothing here reads evidence, so it is cheap and machine-independent.
    """
    cfg = rig.campaign.with_overrides(reps=reps, arms=arms)
    server = rig.server
    has_server = server is not None and bool(getattr(server, "model", ""))
    kind = cfg.resolve_kind(has_server) if (mode or "auto") == "auto" else str(mode)
    if reps is not None and cfg.uplift_rule == "ci_lower" and cfg.reps < 2:
        raise ConfigError(reps_origin, "", f"uplift_rule ci_lower needs reps >= 2, got {cfg.reps}")
    if kind == "model" and not has_server:
        raise ConfigError(rig.source, "server.model", "a model campaign needs the rig's server section "
                                                      "(server.model); or run --p2p-campaign=probe")
    missing = [a for a in cfg.arms if a not in rig.arms]
    if missing:
        src, path = (arms_origin, "") if arms else (rig.source, "campaign.arms")
        raise ConfigError(src, path, f"names {', '.join(missing)}, which the rig {rig.source} does not define "
                                     f"(defined: {', '.join(rig.arms)})")
    return CampaignUse(kind=kind, config=cfg, has_server=has_server)


def parse_selector(value: object, source: str, path: str) -> Selector:
    """A GPU selector: NVML index, PCI bus id (any common spelling) or UUID (``GPU-…``)."""
    if isinstance(value, bool):
        raise ConfigError(source, path, f"expected a GPU index, bus id or UUID, got {show(value)}")
    if isinstance(value, int):
        return integer(value, source, path, 0, 1023)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        if text.upper().startswith("MIG-"):
            raise ConfigError(source, path, f"{show(value)} is a MIG instance: CUDA gives MIG instances no peer "
                                            f"access, so a P2P rig names whole GPUs (index, bus id or GPU- UUID)")
        if text.upper().startswith("GPU-"):
            return text
        if is_bus_id(text):
            return normalize_bus_id(text)
    raise ConfigError(source, path,
                      f"expected a GPU index, PCI bus id ('0000:0A:00.0') or UUID ('GPU-…'), got {show(value)}")


def _parse_gpus(value: object, source: str) -> list[Selector] | None:
    if value == "all":
        return None
    items = sequence(value, source, "gpus")
    if not items:
        raise ConfigError(source, "gpus", "expected 'all' or a non-empty list of GPU selectors")
    sels = [parse_selector(item, source, f"gpus[{i}]") for i, item in enumerate(items)]
    if len(set(sels)) != len(sels):
        raise ConfigError(source, "gpus", f"a GPU is listed twice: {show(value)}")
    return sels


def _parse_pairs(value: object, source: str) -> str | list[tuple[Selector, Selector]]:
    if value in ("auto", "all"):
        return str(value)
    items = sequence(value, source, "pairs")
    out: list[tuple[Selector, Selector]] = []
    for i, item in enumerate(items):
        path = f"pairs[{i}]"
        if isinstance(item, str) and "-" in item and not is_bus_id(item):
            item = item.split("-")
        pair = sequence(item, source, path)
        if len(pair) != 2:
            raise ConfigError(source, path, f"expected two GPU selectors, got {show(item)}")
        a, b = (parse_selector(x, source, path) for x in pair)
        if a == b:
            raise ConfigError(source, path, "a pair needs two different GPUs")
        out.append((a, b))
    if not out:
        raise ConfigError(source, "pairs", "expected 'auto', 'all' or a non-empty list of pairs")
    return out


# --------------------------------------------------------------------------- auto-detection


def auto_rig() -> Rig:
    """The rig used when no rig file is given: every GPU, every pair that can do P2P, links at their maximum."""
    return Rig(name="auto", source="<auto>", gpus=None, pairs="auto", sections=parse_sections({}, "<auto>"),
               auto=True, digest="auto", file_digest="auto")


__all__ = ["COUNTER_KEYS", "EXPECT_KEYS", "NVLINK_KEYS", "PCIE_KEYS", "Expectations", "LinkExpect", "NvlinkExpect",
           "ResolvedRig", "Rig", "RigSections", "Selector", "auto_rig", "load_rig", "parse_expectations",
           "parse_rig", "parse_selector", "parse_topology", "resolve", "rig_to_yaml_dict", "topology_supports_p2p",
           "visible_gpus"]
