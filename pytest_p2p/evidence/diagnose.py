"""Judging evidence against expectations, with failures that read as a diagnosis.

Each ``judge_*`` returns a list of problems (empty = pass) and a list of notes (how the
judgement was made, e.g. "read under load" or "judged on the max-link field"). Messages
name the GPU by index, bus id and model and say what the symptom usually points at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .expect import Expectations, topology_supports_p2p
from .model import P2P_STATUS_TEXT, TOPOLOGY_LEGEND, Evidence, GpuEvidence, PairEvidence, PcieReading


@dataclass
class Judgement:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None  # reason, when there was nothing to judge

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        lines = list(self.problems)
        if self.notes:
            lines.append("(" + "; ".join(self.notes) + ")")
        return "\n".join(lines)


def _lt(have: int | None, want: int | None) -> bool:
    return want is not None and (have is None or have < want)


def judge_pcie(gpu: GpuEvidence, exp: Expectations) -> Judgement:
    j = Judgement()
    e = exp.pcie
    if all(x is None for x in (e.gen, e.width, e.max_gen, e.max_width)):
        j.skipped = f"the rig sets no PCIe expectation for {gpu.label()}"
        return j
    if gpu.pcie.loaded is not None:
        reading, how = gpu.pcie.loaded, "under load"
        j.notes.append(f"read under load: {gpu.pcie.load_method}")
    else:
        reading = gpu.pcie.max
        how = "at most (max-link field)"
        why = gpu.pcie.load_method if gpu.pcie.load_method != "none" else "no reading under load in this evidence"
        j.notes.append(f"judged on the max-link field, not a reading under load ({why}); the idle link reads "
                       f"{gpu.pcie.idle.label()} because idle GPUs train down to save power")
    want = PcieReading(e.gen, e.width)
    if _lt(reading.gen, e.gen) or _lt(reading.width, e.width):
        cause = _downtrain_cause(reading, want, gpu)
        j.problems.append(f"{gpu.label()} runs PCIe {reading.label()} {how}; the rig expects at least "
                          f"{_want_label(want)} — {cause}")
    max_want = PcieReading(e.max_gen, e.max_width)
    if _lt(gpu.pcie.max.gen, e.max_gen) or _lt(gpu.pcie.max.width, e.max_width):
        j.problems.append(f"{gpu.label()}'s link can reach at most {gpu.pcie.max.label()} on this platform; the rig "
                          f"expects a maximum of at least {_want_label(max_want)} — the slot, riser, BIOS link-speed "
                          f"setting or adapter caps it")
    return j


def _want_label(r: PcieReading) -> str:
    parts = []
    if r.gen is not None:
        parts.append(f"Gen{r.gen}")
    if r.width is not None:
        parts.append(f"x{r.width}")
    return " ".join(parts)


def _downtrain_cause(have: PcieReading, want: PcieReading, gpu: GpuEvidence) -> str:
    if _lt(have.gen, want.gen):
        cause = "a link that trains down points at the cable or a missing retimer"
        if gpu.pcie.max.gen is not None and want.gen is not None and gpu.pcie.max.gen < want.gen:
            cause += (f"; the platform's max-link field reads Gen{gpu.pcie.max.gen} too, so also check the BIOS "
                      f"link-speed setting and what the slot/adapter is rated for")
        return cause
    return "a link that trains to fewer lanes points at the slot, riser or cable seating (or bifurcation settings)"


def judge_nvlink(gpu: GpuEvidence, exp: Expectations) -> Judgement:
    j = Judgement()
    e = exp.nvlink
    if e.links is None and e.version is None:
        j.skipped = f"the rig sets no NVLink expectation for {gpu.label()}"
        return j
    active = gpu.active_nvlinks
    if e.links == 0:
        if active:
            j.problems.append(f"{gpu.label()} has {len(active)} active NVLinks; the rig expects none")
        return j
    if e.links is not None and len(active) < e.links:
        down = [str(link.link) for link in gpu.nvlinks if not link.active]
        detail = f" (inactive: link {', '.join(down)})" if down else ""
        if not gpu.nvlinks:
            detail = " (NVML reports no NVLink on this GPU: bridge missing, or a PCIe-only board)"
        j.problems.append(f"{gpu.label()} has {len(active)} of {e.links} expected NVLinks active{detail} — "
                          f"a down link points at a bridge/baseboard fault or a fabric-manager problem")
    if e.version is not None and not active and not j.problems:  # nothing to compare is no pass
        j.problems.append(f"{gpu.label()} has no active NVLink; the rig expects NVLink {e.version} — a bridge "
                          f"missing, links down or a fabric-manager problem")
    elif e.version is not None:
        old = sorted({link.version for link in active if link.version is not None and link.version < e.version})
        if old:
            j.problems.append(f"{gpu.label()} runs NVLink version {', '.join(map(str, old))} on some links; the rig "
                              f"expects NVLink {e.version}")
        if active and all(link.version is None for link in active):
            j.notes.append("NVML does not report the NVLink version on this GPU")
    return j


def judge_counters(gpu: GpuEvidence, start: GpuEvidence, exp: Expectations,
                   elapsed_s: float | None = None) -> Judgement:
    """Replay/CRC counters must not grow more than the budget between ``start`` and ``gpu``.

    NVLink CRC growth is always reported in the notes; it fails only against a rig budget
    (``counters.nvlink_crc`` per link per session, ``counters.nvlink_crc_per_s`` per link
    per second), because corrected CRC errors are routine on NVLink 4+.
    """
    j = Judgement()
    crc_budgets = (exp.nvlink_crc_budget, exp.nvlink_crc_rate)
    if exp.pcie_replay_budget is None and all(b is None for b in crc_budgets) and not gpu.nvlinks:
        j.skipped = f"the rig sets no error-counter budget for {gpu.label()}"
        return j
    if exp.pcie_replay_budget is not None:
        a, b = start.pcie.replay_counter, gpu.pcie.replay_counter
        if a is None or b is None:
            j.notes.append("NVML does not report the PCIe replay counter")
        elif b - a > exp.pcie_replay_budget:
            j.problems.append(f"{gpu.label()}'s PCIe replay counter grew by {b - a} during the session ({a} -> {b}; "
                              f"budget {exp.pcie_replay_budget}) — replays mean a marginal link: reseat or shorten "
                              f"the cable, add a retimer, or lower the link speed")
    before = {link.link: link.crc_errors for link in start.nvlinks}
    grown: dict[int, int] = {}
    for link in gpu.nvlinks:
        a2, b2 = before.get(link.link), link.crc_errors
        if a2 is not None and b2 is not None:
            grown[link.link] = b2 - a2
    if grown:
        span = f" in {elapsed_s:.0f} s" if elapsed_s else ""
        j.notes.append(f"NVLink CRC growth per link{span}: max {max(grown.values())}, total {sum(grown.values())}")
    for link_no, delta in sorted(grown.items()):
        rate = delta / elapsed_s if elapsed_s else None
        if exp.nvlink_crc_budget is not None and delta > exp.nvlink_crc_budget:
            j.problems.append(f"{gpu.label()} NVLink {link_no} CRC errors grew by {delta} during the session "
                              f"(budget {exp.nvlink_crc_budget} per link) — a marginal NVLink lane or bridge")
        elif exp.nvlink_crc_rate is not None and rate is not None and rate > exp.nvlink_crc_rate:
            j.problems.append(f"{gpu.label()} NVLink {link_no} CRC errors grew at {rate:.2f}/s ({delta} in "
                              f"{elapsed_s:.0f} s; budget {exp.nvlink_crc_rate}/s per link) — a marginal NVLink "
                              f"lane or bridge")
    if not j.problems and exp.pcie_replay_budget is None and all(b is None for b in crc_budgets):
        j.notes.append("no budget set in the rig: counters reported, not judged")
    return j


def judge_peer_access(ev: Evidence, pair: PairEvidence, exp: Expectations) -> Judgement:
    j = Judgement()
    want = exp.peer_access
    if want is None:
        j.skipped = f"the rig sets no peer-access expectation for GPU {pair.a} <-> GPU {pair.b}"
        return j
    a, b = ev.gpu(pair.a), ev.gpu(pair.b)
    have = pair.peer_access
    facts = _peer_facts(pair)
    if have is None:
        j.problems.append(f"peer access between {a.label()} and {b.label()} is unknown in this evidence "
                          f"(no CUDA peer query and no NVML P2P status)")
        return j
    if pair.cuda_peer_ab is None:
        j.notes.append("CUDA can-access-peer not queried (no torch with CUDA); judged on NVML's P2P read/write status")
    if want and not have:
        hint = ("on GeForce cards P2P needs the P2P-enabled kernel module: a driver update may have replaced it; "
                "on servers check IOMMU/ACS settings (ACS redirects peer traffic through the root complex)")
        if not topology_supports_p2p(pair.topology):
            hint = f"the GPUs connect through {pair.topology} ({TOPOLOGY_LEGEND.get(pair.topology or '', '?')}), " \
                   f"where P2P is usually unavailable"
        j.problems.append(f"no peer access between {a.label()} and {b.label()}: {facts}; the rig expects peer "
                          f"access both ways — {hint}")
    elif have and not want:
        j.problems.append(f"{a.label()} and {b.label()} have peer access ({facts}) but the rig expects none")
    return j


def _peer_facts(pair: PairEvidence) -> str:
    def yn(x: bool | None) -> str:
        return "?" if x is None else ("yes" if x else "no")

    def status(code: str | None) -> str:
        return "?" if code is None else f"{code} ({P2P_STATUS_TEXT.get(code, code)})"

    return (f"CUDA can-access-peer {pair.a}->{pair.b} {yn(pair.cuda_peer_ab)}, {pair.b}->{pair.a} "
            f"{yn(pair.cuda_peer_ba)}; NVML P2P read {status(pair.p2p_read)}, write {status(pair.p2p_write)}")


def judge_topology(ev: Evidence, pair: PairEvidence, exp: Expectations) -> Judgement:
    j = Judgement()
    want = exp.topology
    if want is None:
        j.skipped = f"the rig sets no topology expectation for GPU {pair.a} <-> GPU {pair.b}"
        return j
    have = pair.topology or "unknown"
    match = have.startswith("NV") if want == "NV" else have == want
    if not match:
        a, b = ev.gpu(pair.a), ev.gpu(pair.b)
        if want.startswith("NV") and have.startswith("NV"):
            cause = "fewer NVLinks than expected points at a link that is down or a bridge/baseboard change" \
                if int(have[2:] or 0) < int(want[2:] or 0) else "the NVLink count changed: a different board or bridge"
        elif want.startswith("NV"):
            cause = "NVLink is not used between them: bridge missing, links down, or NVLink P2P disabled"
        else:
            cause = "the GPUs moved to different PCIe slots/switches, or the BIOS/ACS topology changed"
        legend = TOPOLOGY_LEGEND.get("NV" if have.startswith("NV") else have, "unknown")
        j.problems.append(f"{a.label()} and {b.label()} connect through {have} ({legend}); the rig expects {want} "
                          f"— {cause}")
    return j
