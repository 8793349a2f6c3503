"""The transport proof across nodes: every rank's log read, each crossing connection judged, fallbacks named.

Across nodes NCCL's silent fallback is per rank. GPUDirect RDMA is decided on each side of a
network connection (the sender reads GPU memory, the receiver writes it), so one rank whose
node lacks ``nvidia_peermem``, or that was started without ``NCCL_NET_GDR_LEVEL``, moves its
half of the traffic through host memory while every other rank shows ``/GDRDMA``. A proof
over the merged log that finds *some* ``NET/IB/0/GDRDMA`` lines proves nothing about that
rank, so :func:`prove_crossing`:

* splits the logs by process (``host:pid`` prefixes; a launcher passes one log per rank with
  the node it placed it on, so two Ray "nodes" on one host stay two nodes);
* attributes every connection to the rank that printed it (the receiver of a ``[receive]``
  line, else the sender) and keeps the connections between ranks of *different* nodes;
* judges each rank: a crossing connection of another label, or NCCL's own ``GPU Direct RDMA
  Disabled`` line, fails it; a ``/GDRDMA`` connection or NCCL's ``GPU Direct RDMA Enabled for
  GPU`` line proves it; nothing shown is *unknown* unless the merged log is complete
  (:mod:`.transport_complete`'s rule), and then the rank simply does not cross;
* names, for a rank that fell back, the NCCL variables whose values differ from a rank that
  did not (or from the arm's), since that is usually the cause.

Labels match segment by segment as in :mod:`.transport_expect`, with one stricter rule:
``GDRDMA`` must be present exactly when the expectation names it (``NET/IB`` is the no-GDR
arm's label and must not accept a GDR connection, nor ``NET/IB/GDRDMA`` a host-staged one).
``NET/IB/…/GDRDMA`` (as the issue writes it) reads as ``NET/IB/GDRDMA``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .transport import parse_nccl_log
from .transport_expect import FAIL, INCONCLUSIVE, PASS, label_matches
from .transport_model import ConnKey, TransportProof, key_label, key_printer

NOT_CROSSING = "n/a"
_PREFIX_RE = re.compile(r"^(?:\s|\([^()]{0,80}\) )*(?P<host>[^\s:\[\]()/]{1,128}):(?P<pid>\d{1,9}):\d{1,12} \[")
_WILDCARD = ("…", "...", "*")
# Variables that name a host's own things (its interface): different on each node by design, never a cause.
PER_HOST_VARS = ("NCCL_SOCKET_IFNAME", "NCCL_HOSTID", "NCCL_IB_HCA")


@dataclass(frozen=True)
class ProcessLog:
    """One process's NCCL output; ``node`` as placed (None: the host of its line prefixes)."""

    text: str
    source: str
    node: str | None = None
    env: Mapping[str, str] | None = None  # the environment the launcher gave it (None: what NCCL echoed)


@dataclass(frozen=True)
class RankVerdict:
    rank: int
    node: str
    outcome: str  # pass | fail | inconclusive | n/a
    message: str
    labels: Mapping[str, int] = field(default_factory=dict)  # crossing connections printed, per label
    env_diff: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "node": self.node, "outcome": self.outcome, "message": self.message,
                "labels": dict(self.labels), "env_diff": list(self.env_diff)}


@dataclass(frozen=True)
class CrossingProof:
    expect: str
    outcome: str
    message: str
    complete: bool
    completeness: str
    ranks: tuple[RankVerdict, ...]

    def failed(self) -> list[RankVerdict]:
        return [r for r in self.ranks if r.outcome == FAIL]

    def to_dict(self) -> dict[str, object]:
        return {"expect": self.expect, "outcome": self.outcome, "message": self.message, "complete": self.complete,
                "completeness": self.completeness, "ranks": [r.to_dict() for r in self.ranks]}


def normal_expect(expect: str) -> str:
    """``NET/IB/…/GDRDMA`` -> ``NET/IB/GDRDMA``: wildcard and device-number segments dropped."""
    parts = [p.strip() for p in expect.strip().strip("/").split("/")]
    return "/".join(p for p in parts if p and p not in _WILDCARD and not p.isdigit())


def crossing_label_ok(label: str, expect: str) -> bool:
    """Does a connection label satisfy a crossing's expectation (GDRDMA exactly when expected)?"""
    want = normal_expect(expect)
    gdr_wanted = want.upper().endswith("/GDRDMA")
    base = want[: -len("/GDRDMA")] if gdr_wanted else want
    has_gdr = label.upper().endswith("/GDRDMA")
    return label_matches(label, base) and has_gdr == gdr_wanted


def split_by_process(text: str, source: str) -> list[ProcessLog]:
    """A merged log (one host's or a whole job's) as one log per ``host:pid``; unprefixed lines go to the first."""
    groups: dict[tuple[str, str], list[str]] = {}
    loose: list[str] = []
    for line in text.splitlines():
        m = _PREFIX_RE.match(line)
        if m is None:
            loose.append(line)
            continue
        groups.setdefault((m["host"], m["pid"]), []).append(line)
    if not groups:
        return [ProcessLog(text, source)]
    out = []
    for i, ((host, pid), lines) in enumerate(groups.items()):
        body = "\n".join((loose if i == 0 else []) + lines) + "\n"
        out.append(ProcessLog(body, f"{source} ({host} pid {pid})", host))
    return out


def _node_of(log: ProcessLog) -> str:
    if log.node is not None:
        return log.node
    m = _PREFIX_RE.search(log.text) if log.text else None
    return m["host"] if m else "?"


@dataclass
class _Rank:
    node: str
    proofs: list[tuple[ProcessLog, TransportProof]] = field(default_factory=list)
    keys: dict[ConnKey, int] = field(default_factory=dict)


def prove_crossing(logs: Sequence[ProcessLog], expect: str, *, arm_env: Mapping[str, str] | None = None,
                   world_size: int | None = None) -> CrossingProof:
    """Judge every rank's crossing connections against ``expect``; see the module docstring."""
    merged = parse_nccl_log("\n".join(log.text.rstrip("\n") for log in logs) + "\n", "merged")
    ranks: dict[int, _Rank] = {}
    for log in logs:
        proof = parse_nccl_log(log.text, log.source)
        node = _node_of(log)
        printed = {key_printer(k) for k in proof.counts} | {c["rank"] for c in proof.comms}
        for r in printed:
            ranks.setdefault(r, _Rank(node)).proofs.append((log, proof))
        for k, n in proof.counts.items():
            rk = ranks[key_printer(k)]
            rk.keys[k] = rk.keys.get(k, 0) + n
    n_ranks = world_size or max([c["nRanks"] for c in merged.comms] + [max(ranks, default=-1) + 1])
    node_of = {r: v.node for r, v in ranks.items()}
    verdicts = [_judge_rank(r, ranks.get(r), node_of, expect, merged.complete) for r in range(n_ranks)]
    verdicts = _with_env(verdicts, ranks, arm_env)
    return _overall(expect, verdicts, merged)


def _crossing(key: ConnKey, node_of: Mapping[int, str]) -> bool:
    """A network connection (whoever its peer), or any connection between ranks placed on different nodes.

    NET between ranks of one host is judged too: ranks of sub-communicators renumber (a rank
    number does not always name one process), and a forced-network arm on one host is judged
    like a crossing.
    """
    if key[0] in ("NET", "COLLNET"):
        return True
    a, b = node_of.get(key[4]), node_of.get(key[6])
    return a is not None and b is not None and a != b


def _judge_rank(r: int, rank: _Rank | None, node_of: Mapping[int, str], expect: str,
                complete: bool) -> RankVerdict:
    if rank is None:
        why = "no line of this rank in any log (its log is missing)"
        return RankVerdict(r, "?", FAIL if complete else INCONCLUSIVE, f"rank {r}: {why}")
    where = f"rank {r} on {rank.node}"
    crossing = {k: n for k, n in rank.keys.items() if _crossing(k, node_of)}
    labels: dict[str, int] = {}
    for k, n in crossing.items():
        labels[key_label(k)] = labels.get(key_label(k), 0) + n
    bad = {lb: n for lb, n in labels.items() if not crossing_label_ok(lb, expect)}
    gdr_wanted = normal_expect(expect).upper().endswith("/GDRDMA")
    enabled, disabled = _gdr_lines(rank)
    if bad:
        first = _first_line(rank, [k for k in crossing if key_label(k) in bad])
        msg = (f"{where} fell back: {sum(bad.values())} of {sum(labels.values())} crossing connection(s) via "
               f"{', '.join(sorted(bad))}, expected {expect}{first}")
        if gdr_wanted and disabled:
            msg += f"; NCCL says: {disabled[0]}"
        return RankVerdict(r, rank.node, FAIL, msg, labels)
    if gdr_wanted and disabled and not labels:
        return RankVerdict(r, rank.node, FAIL, f"{where}: NCCL disabled GPUDirect RDMA: {disabled[0]}", labels)
    if labels:
        return RankVerdict(r, rank.node, PASS, f"{where}: {sum(labels.values())} crossing connection(s) all "
                                               f"{', '.join(sorted(labels))}", labels)
    if gdr_wanted and enabled:
        return RankVerdict(r, rank.node, PASS, f"{where}: proved by NCCL's line {enabled[0]}", labels)
    if complete:
        return RankVerdict(r, rank.node, NOT_CROSSING, f"{where}: no crossing connection (the log is complete)")
    return RankVerdict(r, rank.node, INCONCLUSIVE, f"{where}: no crossing connection shown, and the log is "
                                                   "incomplete: its connections may be in lines not shown")


def _gdr_lines(rank: _Rank) -> tuple[list[str], list[str]]:
    """NCCL's "GPU Direct RDMA Enabled for GPU" (proofs) and "... Disabled ..." lines of this rank's processes."""
    enabled, disabled = [], []
    for log, proof in rank.proofs:
        for g in proof.gdr_support:
            line = f"{log.source} line {g.get('line')}"
            if g.get("enabled") is True and g.get("scope") == "gpu":
                enabled.append(f'"GPU Direct RDMA Enabled for GPU {g.get("gpu")} / HCA {g.get("hca")}" ({line})')
            elif g.get("enabled") is False:
                what = f"GPU {g.get('gpu')} / HCA {g.get('hca')} (distance {g.get('distance')} > {g.get('level')})" \
                    if g.get("scope") == "gpu" else f"HCA {g.get('hca')} '{g.get('name')}'"
                disabled.append(f'"GPU Direct RDMA Disabled for {what}" ({line})')
    return enabled, disabled


def _first_line(rank: _Rank, keys: list[ConnKey]) -> str:
    for log, proof in rank.proofs:
        for c in proof.connections:
            if c.key in keys:
                return f" (e.g. {log.source} line {c.line}: {c.label})"
    return ""


def _env(rank: _Rank) -> dict[str, str]:
    env: dict[str, str] = {}
    for log, proof in rank.proofs:
        source = log.env if log.env is not None else proof.env_overrides
        env.update({k: v for k, v in source.items() if k.startswith("NCCL_")})
    return env


def _diff(mine: Mapping[str, str], theirs: Mapping[str, str], keys: set[str]) -> list[str]:
    return [f"{k}={mine.get(k, '(unset)')} here vs {theirs.get(k, '(unset)')}" for k in sorted(keys)
            if mine.get(k) != theirs.get(k)]


def _with_env(verdicts: list[RankVerdict], ranks: Mapping[int, _Rank],
              arm_env: Mapping[str, str] | None) -> list[RankVerdict]:
    """A failed rank's NCCL variables that differ from a passing rank's (of its own node first), else the arm's.

    Across nodes, the per-host variables (:data:`PER_HOST_VARS`) are left out of the comparison.
    """
    out = []
    for v in verdicts:
        rank = ranks.get(v.rank)
        if v.outcome != FAIL or rank is None:
            out.append(v)
            continue
        mine = _env(rank)
        diffs: list[str] = []
        passing = [g for g in verdicts if g.outcome == PASS]
        good = next((g for g in passing if g.node == v.node), passing[0] if passing else None)
        if good is not None:
            theirs = _env(ranks[good.rank])
            keys = set(mine) | set(theirs)
            if good.node != v.node:
                keys -= set(PER_HOST_VARS)
            diffs = [f"{d} on rank {good.rank} ({good.node})" for d in _diff(mine, theirs, keys)]
        if not diffs and arm_env:
            arm = {k: v for k, v in arm_env.items() if k.startswith("NCCL_")}
            diffs = [f"{d} in the arm" for d in _diff(mine, arm, set(arm))]
        env_note = f"; env differs: {'; '.join(diffs)}" if diffs else \
            "; its NCCL environment is the same as the others' (look at the node's evidence: nvidia_peermem, GIDs)"
        out.append(RankVerdict(v.rank, v.node, v.outcome, v.message + env_note, v.labels, tuple(diffs)))
    return out


def _overall(expect: str, verdicts: list[RankVerdict], merged: TransportProof) -> CrossingProof:
    failed = [v for v in verdicts if v.outcome == FAIL]
    proved = [v for v in verdicts if v.outcome == PASS]
    unknown = [v for v in verdicts if v.outcome == INCONCLUSIVE]
    if failed:
        nodes = sorted({v.node for v in failed})
        outcome, msg = FAIL, (f"expected {expect} across nodes; rank {', '.join(str(v.rank) for v in failed)} on "
                              f"{', '.join(nodes)} did not: " + " | ".join(v.message for v in failed))
    elif not proved:
        outcome, msg = INCONCLUSIVE, (f"cannot prove {expect}: no crossing connection in any rank's log "
                                      f"({merged.problem or merged.completeness or 'no connection lines'})")
    elif unknown or not merged.complete:
        outcome = INCONCLUSIVE
        msg = (f"rank {', '.join(str(v.rank) for v in proved)} proved {expect}, but the logs are incomplete "
               f"({merged.completeness})")
        if unknown:
            msg += f"; rank {', '.join(str(v.rank) for v in unknown)} unknown"
    else:
        outcome, msg = PASS, (f"every crossing connection of {len(proved)} rank(s) is {expect} "
                              f"({sum(sum(v.labels.values()) for v in proved)} connection(s); the log is complete)")
    return CrossingProof(expect, outcome, msg, merged.complete, merged.completeness, tuple(verdicts))


# --------------------------------------------------------------------------- bandwidth against the line rate


def line_rate_share(busbw_gbs: float, line_gbps: float) -> float:
    """Bus bandwidth (decimal GB/s, nccl-tests' definition) as a share of a line rate in Gb/s: 23.0 / 200 -> 0.92."""
    return busbw_gbs * 8 / line_gbps if line_gbps > 0 else 0.0


def judge_line_rate(busbw_gbs: float | None, line_gbps: float | None, min_share: float, what: str) -> tuple[str, str]:
    """(outcome, message): a silent host-staged fallback collapses busbw far below ``min_share`` of the line."""
    if busbw_gbs is None or line_gbps is None:
        missing = "bus bandwidth" if busbw_gbs is None else "line rate (no active RDMA port or NIC speed)"
        return INCONCLUSIVE, f"{what}: {missing} not known; the share of the line rate cannot be judged"
    share = line_rate_share(busbw_gbs, line_gbps)
    text = (f"{what}: busbw {busbw_gbs:.2f} GB/s = {busbw_gbs * 8:.1f} Gb/s, {share:.1%} of the "
            f"{line_gbps:.4g} Gb/s line rate (minimum {min_share:.0%})")
    return (PASS, text) if share >= min_share else (FAIL, text + ": a silent fallback or a degraded link")
