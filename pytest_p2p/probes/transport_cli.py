"""``python -m pytest_p2p transport LOG... [--json] [--expect T]``: print the NCCL transport proof of logs.

Exit status: 0 every log proved something (and met ``--expect``), 1 a log had no NCCL
INFO lines / no connection lines or missed ``--expect``, 2 usage error or unreadable file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .transport import TransportProof, parse_nccl_log

ROWS = (
    ("nccl_version", "NCCL version"),
    ("transport", "transport"),
    ("used_p2p", "P2P used"),
    ("p2p_kind", "P2P kind"),
    ("p2p_read", "P2P /read"),
    ("p2p_ce", "P2P /CE"),
    ("used_shm", "SHM used"),
    ("shm_mode", "SHM mode"),
    ("used_net", "NET used"),
    ("net_gdrdma", "NET GPUDirect RDMA"),
    ("net_plugin", "NET plugin loaded"),
    ("net_devices", "NET devices"),
    ("gdr_support", "GDR support lines"),
    ("nvls", "NVLS used"),
    ("collnet", "CollNet used"),
    ("p2p_type", "Check P2P Type"),
    ("comm", "communicators"),
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pytest_p2p transport",
        description="Prove which transport NCCL used from NCCL_DEBUG=INFO logs (P2P enabled is not P2P used).",
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="NCCL_DEBUG=INFO output, a vLLM server log, or - for stdin")
    p.add_argument("--json", action="store_true", help="print the versioned proof JSON (a list for several logs)")
    p.add_argument("--expect", metavar="T", help="also check an arm expectation such as P2P, P2P/CUMEM, SHM, NET/IB")
    return p


def _show(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_show(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def render(proof: TransportProof) -> str:
    """The human table: claim, value, first proving line."""
    out = [f"{proof.source}:"]
    if not proof.has_info or not proof.claims:
        out.append(f"  {proof.problem}")
        return "\n".join(out)
    if proof.problem:
        out.append(f"  note: {proof.problem}")
    for name, title in ROWS:
        claim = proof.claims.get(name)
        if claim is None:
            continue
        value = _show(claim.value)
        if name == "comm" and claim.value:
            value = "; ".join(f"rank {c['rank']}/{c['nRanks']} nNodes {c['nNodes']} localRanks {c['localRanks']}"
                              for c in claim.value)
        where = f"  [line {claim.lines[0][0]}: {claim.lines[0][1]}]" if claim.lines else ""
        out.append(f"  {title:<20} {value}{where}")
    for name, claim in proof.claims.items():
        if name.startswith("env:"):
            where = f"  [line {claim.lines[0][0]}]" if claim.lines else ""
            out.append(f"  {name[4:]:<20} {claim.value} (set by environment){where}")
    for warning in proof.warnings:
        out.append(f"  warning: {warning}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse already printed the usage error
        return 0 if exc.code == 0 else 2
    proofs: list[TransportProof] = []
    for name in args.logs:
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            print(f"transport: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        proofs.append(parse_nccl_log(text, source="<stdin>" if name == "-" else name))
    status = 0
    lines: list[str] = []
    for proof in proofs:
        if not proof.has_info or not proof.connections:
            status = 1
        if args.expect:
            ok, why = proof.satisfies(args.expect)
            if not ok:
                status = 1
            lines.append(("ok: " if ok else "FAIL: ") + why)
    try:
        if args.json:
            docs = [p.to_dict() for p in proofs]
            print(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2))
            for line in lines:
                print(line, file=sys.stderr)
        else:
            print("\n\n".join(render(p) for p in proofs))
            for line in lines:
                print(line)
    except BrokenPipeError:  # `... | head`: the reader left; the status still stands
        sys.stdout = None  # type: ignore[assignment]  # no flush error at exit
    return status


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
