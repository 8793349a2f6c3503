"""A rig applied to one machine's evidence: NVML indices for the rig's selectors, the pairs to check.

The rig file (``pytest_p2p.plugin.rig``) names GPUs by selector (NVML index, PCI bus id or UUID) and
layers expectations rig-wide < per GPU < per pair; here they meet the evidence of one machine
and become a :class:`~.expect.ResolvedRig`: the GPUs and pairs that are checked, those left out
and why, and the rig GPUs this machine does not show. The evidence stage reads a rig only
through :class:`RigSpec`, so it never imports the rig module (an integration module).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Protocol

from ..errors import ConfigError
from .expect import Expectations, ResolvedRig, auto_expectations_for_gpu, topology_supports_p2p, why_no_p2p
from .model import Evidence
from .snapshot import is_bundled_demo
from .visible import visible_gpus

Selector = int | str  # NVML index, canonical bus id, or UUID


class RigSpec(Protocol):
    """What resolution reads of a rig (:class:`pytest_p2p.plugin.rig.Rig`)."""

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def gpus(self) -> Sequence[Selector] | None: ...  # None: every GPU the machine shows

    @property
    def pairs(self) -> str | Sequence[tuple[Selector, Selector]]: ...  # "auto" | "all" | explicit

    @property
    def expect(self) -> Expectations: ...

    @property
    def gpu_expect(self) -> Mapping[Selector, Expectations]: ...

    @property
    def pair_expect(self) -> Mapping[tuple[Selector, Selector], Expectations]: ...

    @property
    def auto(self) -> bool: ...  # no rig file: expect every link at its maximum


def resolve(rig: RigSpec, evidence: Evidence, *, visible: str | None = None, use_env: bool = True) -> ResolvedRig:
    """Apply the rig to one machine's evidence.

    A rig GPU this machine does not show is recorded in ``missing`` (the presence check fails
    with it; the other GPUs are still checked) — unless the evidence is the bundled demo
    snapshot, where it means the rig belongs to another machine: a :class:`ConfigError`.
    ``visible`` (default: ``CUDA_VISIBLE_DEVICES`` for live evidence) narrows auto-detection.
    """
    if visible is None and use_env and evidence.source == "live":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    r = _Resolver(rig, evidence)
    notes: list[str] = []
    if rig.gpus is None:
        gpus = [g.index for g in evidence.gpus]
        if visible is not None:
            gpus, note = visible_gpus(evidence, visible)
            notes.append(note)
    else:
        found = [r.lookup(sel, f"gpus[{i}]") for i, sel in enumerate(rig.gpus)]
        gpus = [idx for idx in found if idx is not None]
        if visible is not None:
            notes.append(f"CUDA_VISIBLE_DEVICES={visible!r} does not narrow the rig's own 'gpus' (each probe and "
                         f"server gets its own CUDA_VISIBLE_DEVICES)")
    pairs, excluded = r.pairs(gpus)
    if r.missing and is_bundled_demo(evidence):
        raise ConfigError(rig.source, "", f"{r.missing[0]} — the evidence is the bundled DEMO snapshot, not this rig's "
                                          f"machine; run on the rig's machine or replay a snapshot recorded there "
                                          f"(--p2p-snapshot FILE)")
    gpu_expect: dict[int, Expectations] = {}
    specific_gpu = {sel: r.lookup(sel, f"gpu.{sel}") for sel in rig.gpu_expect}
    for idx in gpus:
        base = auto_expectations_for_gpu(evidence.gpu(idx)) if rig.auto else Expectations()
        exp = rig.expect.over(base)
        for sel, specific in rig.gpu_expect.items():
            if specific_gpu[sel] == idx:
                exp = specific.over(exp)
        gpu_expect[idx] = exp
    specific_pair = {}
    for sa, sb in rig.pair_expect:
        ia, ib = r.lookup(sa, f"pair.{sa}-{sb}"), r.lookup(sb, f"pair.{sa}-{sb}")
        specific_pair[(sa, sb)] = tuple(sorted((ia, ib))) if ia is not None and ib is not None else None
    pair_expect: dict[tuple[int, int], Expectations] = {}
    for pair in pairs:
        ev = evidence.pair(*pair)
        base = Expectations(peer_access=topology_supports_p2p(ev.topology) or None, topology=ev.topology) \
            if rig.auto else Expectations()
        exp = rig.expect.over(base)
        for key, specific in rig.pair_expect.items():
            if specific_pair[key] == pair:
                exp = specific.over(exp)
        pair_expect[pair] = exp
    return ResolvedRig(rig_name=rig.name, source=rig.source, gpus=gpus, pairs=pairs, gpu_expect=gpu_expect,
                       pair_expect=pair_expect, excluded=excluded, missing=r.missing, notes=notes)


class _Resolver:
    """Selector lookups for one rig on one machine, collecting the GPUs that are not there."""

    def __init__(self, rig: RigSpec, evidence: Evidence) -> None:
        self.rig = rig
        self.evidence = evidence
        self.missing: list[str] = []
        self._missing_sel: set[Selector] = set()

    def lookup(self, sel: Selector, path: str) -> int | None:
        for g in self.evidence.gpus:
            if (isinstance(sel, int) and g.index == sel) or sel in (g.bus_id, g.uuid):
                return g.index
        if sel not in self._missing_sel:
            self._missing_sel.add(sel)
            present = ", ".join(f"{g.index}={g.bus_id}" for g in self.evidence.gpus) or "none"
            kind = "index" if isinstance(sel, int) else ("UUID" if str(sel).upper().startswith("GPU-") else "bus id")
            self.missing.append(f"{path}: no GPU with {kind} {sel} on this machine ({self.evidence.label}); "
                                f"GPUs present: {present}")
        return None

    def pairs(self, gpus: list[int]) -> tuple[list[tuple[int, int]], dict[tuple[int, int], str]]:
        rig, evidence, source = self.rig, self.evidence, self.rig.source
        recorded = {(p.a, p.b) for p in evidence.pairs}  # live: every pair; a snapshot may hold fewer
        ordered = sorted(gpus)
        all_pairs = [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1:] if (a, b) in recorded]
        excluded: dict[tuple[int, int], str] = {}
        if rig.pairs == "all":
            return all_pairs, excluded
        if rig.pairs == "auto":
            pairs = []
            for p in all_pairs:
                why = why_no_p2p(evidence, evidence.pair(*p))
                if why is None:
                    pairs.append(p)
                else:
                    excluded[p] = why
            return pairs, excluded
        pairs = []
        for i, (sa, sb) in enumerate(rig.pairs):
            ia, ib = self.lookup(sa, f"pairs[{i}]"), self.lookup(sb, f"pairs[{i}]")
            if ia is None or ib is None:
                continue  # a GPU of the pair is not on this machine: reported in ``missing``
            a, b = sorted((ia, ib))
            if a not in gpus or b not in gpus:
                raise ConfigError(source, f"pairs[{i}]", f"GPU {a if a not in gpus else b} is not in 'gpus'")
            if (a, b) in pairs:
                raise ConfigError(source, f"pairs[{i}]", f"GPUs {a} and {b} are listed as a pair twice")
            if (a, b) not in recorded:
                raise ConfigError(source, f"pairs[{i}]", f"the evidence ({evidence.label}) holds nothing about "
                                                         f"the pair of GPUs {a} and {b}")
            pairs.append((a, b))
        return pairs, excluded


__all__ = ["RigSpec", "Selector", "resolve"]
