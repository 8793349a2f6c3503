"""The ``doctor`` view: a table a person reads in ten seconds, like the seed's check-env.

It shows what the evidence says (GPUs, links, NVLinks, pairs, topology, peer access,
versions) and, given a rig file, the verdict of each built-in evidence check.
"""

from __future__ import annotations

from dataclasses import dataclass

from .diagnose import Judgement, judge_nvlink, judge_pcie, judge_peer_access, judge_topology
from .expect import ResolvedRig
from .model import Evidence


@dataclass
class CheckResult:
    check: str
    target: str
    judgement: Judgement

    @property
    def status(self) -> str:
        if self.judgement.skipped:
            return "skip"
        return "pass" if self.judgement.ok else "FAIL"

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"

    def to_dict(self) -> dict[str, object]:
        j = self.judgement
        return {"check": self.check, "target": self.target, "status": self.status.lower(),
                "problems": j.problems, "notes": j.notes, "skipped": j.skipped}


def judge_all(ev: Evidence, rr: ResolvedRig) -> list[CheckResult]:
    out = [CheckResult("gpu_present", "rig", Judgement(problems=[f"{rr.source}: {m}"])) for m in rr.missing]
    for idx in rr.gpus:
        g = ev.gpu(idx)
        out.append(CheckResult("pcie_link", f"gpu{idx}", judge_pcie(g, rr.gpu_expect[idx])))
        out.append(CheckResult("nvlink", f"gpu{idx}", judge_nvlink(g, rr.gpu_expect[idx])))
    for a, b in rr.pairs:
        p = ev.pair(a, b)
        out.append(CheckResult("peer_access", f"gpu{a}-gpu{b}", judge_peer_access(ev, p, rr.pair_expect[(a, b)])))
        out.append(CheckResult("topology", f"gpu{a}-gpu{b}", judge_topology(ev, p, rr.pair_expect[(a, b)])))
    return out


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _opt(x: object) -> str:
    return "?" if x is None else str(x)


def seen_value(ev: Evidence, r: CheckResult) -> str:
    """What a passed check saw, so a ``pass`` row says why (issue 26: pass rows showed no values)."""
    try:
        if r.target.startswith("gpu") and "-" not in r.target:
            g = ev.gpu(int(r.target[3:]))
            if r.check == "pcie_link":
                loaded = g.pcie.loaded.label() if g.pcie.loaded else "not read under load"
                return f"{loaded} under load (max {g.pcie.max.label()})"
            if r.check == "nvlink":
                return f"{len(g.active_nvlinks)}/{len(g.nvlinks)} NVLinks up" if g.nvlinks else "no NVLink"
        elif "-" in r.target:
            a, b = (int(x[3:]) for x in r.target.split("-", 1))
            p = ev.pair(a, b)
            if r.check == "peer_access":
                yes = {True: "yes", False: "no", None: "?"}
                return f"CUDA peer {yes[p.cuda_peer_ab]}/{yes[p.cuda_peer_ba]}, NVML read {_opt(p.p2p_read)}"
            if r.check == "topology":
                return f"{_opt(p.topology)}, {p.nvlinks_between} NVLinks between"
    except (ValueError, KeyError, LookupError, AttributeError):
        return ""
    return "; ".join(r.judgement.notes)


def doctor_table(ev: Evidence, results: list[CheckResult] | None = None, resolved: ResolvedRig | None = None) -> str:
    out = [f"pytest-p2p doctor — {ev.label}",
           f"driver {_opt(ev.driver_version)} · NVML {_opt(ev.nvml_version)} · CUDA driver "
           f"{_opt(ev.cuda_driver_version)}", ""]
    rows = [["GPU", "name", "bus id", "PCIe idle", "PCIe under load", "PCIe max", "GPU max gen", "replays",
             "NVLink", "W", "°C", "P"]]
    for g in ev.gpus:
        nv = "-"
        if g.nvlinks:
            versions = sorted({link.version for link in g.active_nvlinks if link.version})
            nv = f"{len(g.active_nvlinks)}/{len(g.nvlinks)} up" + (f" v{'/'.join(map(str, versions))}" if versions
                                                                     else "")
        loaded = g.pcie.loaded.label() if g.pcie.loaded else "not read"
        name = g.name + (" (MIG on)" if g.mig_mode else "")
        rows.append([str(g.index), name, g.bus_id, g.pcie.idle.label(), loaded, g.pcie.max.label(),
                     _opt(g.pcie.gpu_max.gen), _opt(g.pcie.replay_counter), nv,
                     f"{g.power_w:.0f}" if g.power_w is not None else "?", _opt(g.temperature_c),
                     f"P{g.pstate}" if g.pstate is not None else "?"])
    out += _table(rows)
    out.append("")
    prow = [["pair", "topology", "NVLinks", "CUDA peer a->b", "CUDA peer b->a", "NVML read", "NVML write",
             "NVML nvlink", "NVML atomics"]]

    def yn(x: bool | None) -> str:
        return "?" if x is None else ("yes" if x else "no")

    for p in ev.pairs:
        prow.append([f"gpu{p.a}-gpu{p.b}", _opt(p.topology), str(p.nvlinks_between), yn(p.cuda_peer_ab),
                     yn(p.cuda_peer_ba), _opt(p.p2p_read), _opt(p.p2p_write), _opt(p.p2p_nvlink), _opt(p.p2p_atomics)])
    out += _table(prow) if ev.pairs else ["(one GPU: no pairs)"]
    methods = sorted({g.pcie.load_method for g in ev.gpus})
    out += ["", "PCIe under load: " + "; ".join(methods)]
    out += [f"note: {n}" for n in ev.notes]
    if resolved is not None:
        out += [""] + [f"not checked: gpu{a}-gpu{b}: {why}" for (a, b), why in sorted(resolved.excluded.items())]
        out += [f"note: {n}" for n in resolved.notes]
    if results is not None:
        out += ["", "checks against the rig file:"]
        for r in results:
            line = f"  {r.status:4}  {r.check:12} {r.target:12}"
            if r.judgement.skipped:
                line += f"  ({r.judgement.skipped})"
            elif not r.failed:
                line += f"  {seen_value(ev, r)}".rstrip()
            out.append(line)
            out += [f"        {p}" for p in r.judgement.problems]
    return "\n".join(out)
