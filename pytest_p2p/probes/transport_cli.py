"""``python -m pytest_p2p transport LOG... [--json] [--expect T]``: print the NCCL transport proof of logs.

A vLLM server log is also attested (:mod:`.vllm_log`): the all-reduce backends vLLM used,
and whether any of them (custom all-reduce, symmetric memory, ...) moves data over P2P
behind NCCL's back — so a "P2P off" log with custom all-reduce left on is never ``ok``.

Exit status: 0 every log proved something (and met ``--expect``); 1 a log had no NCCL INFO
lines / no connection lines, or ``--expect`` failed or could not be proved (incomplete log,
format not recognised); 2 usage error or unreadable file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .transport_model import TransportProof
from .vllm_log import Attestation, parse_server_log

ROWS = (
    ("nccl_version", "NCCL version"),
    ("transport", "transport"),
    ("complete", "log complete"),
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
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_show(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _comm_row(value: object) -> str:
    if not isinstance(value, list):
        return _show(value)
    return "; ".join(f"rank {c.get('rank')}/{c.get('nRanks')} nNodes {c.get('nNodes')} localRanks "
                     f"{c.get('localRanks')}" for c in value if isinstance(c, dict)) or "-"


def render(proof: TransportProof, att: Attestation | None = None) -> str:
    """The human table: claim, value, first proving line; then the vLLM attestation when there is one."""
    out = [f"{proof.source}:"]
    if not proof.has_info or not proof.claims:
        out.append(f"  {proof.problem}")
    else:
        out.append(f"  {'state':<20} {proof.state}: {proof.completeness}")
        if proof.problem:
            out.append(f"  note: {proof.problem}")
        for name, title in ROWS:
            claim = proof.claims.get(name)
            if claim is None:
                continue
            value = _comm_row(claim.value) if name == "comm" else _show(claim.value)
            where = f"  [line {claim.lines[0][0]}: {claim.lines[0][1]}]" if claim.lines else ""
            out.append(f"  {title:<20} {value}{where}")
        for name, claim in proof.claims.items():
            if name.startswith("env:"):
                where = f"  [line {claim.lines[0][0]}]" if claim.lines else ""
                out.append(f"  {name[4:]:<20} {claim.value} (set by environment){where}")
        for warning in proof.warnings:
            out.append(f"  warning: {warning}")
    if att is not None and att.is_vllm:
        out.append(f"  {'vLLM version':<20} {_show(att.vllm_version)}")
        out.append(f"  {'vLLM nccl==':<20} {_show(att.nccl_version)}")
        out.append(f"  {'tensor parallel':<20} {_show(att.tensor_parallel_size)}")
        out.append(f"  {'disable custom AR':<20} {_show(att.disable_custom_all_reduce)}")
        backends = ", ".join(f"{d.group}: {'+'.join(d.backends) or '-'} [line {d.line}]" for d in att.dispatch)
        out.append(f"  {'all-reduce backends':<20} {backends or 'unknown (no dispatch line)'}")
        if att.p2p_bypass_backends and proof.used_p2p is not True:
            out.append(f"  warning: {', '.join(att.p2p_bypass_backends)} all-reduce moves data over P2P whatever "
                       f"NCCL's transport says: this log does not show a P2P-off run")
    return "\n".join(out)


def _judge(proof: TransportProof, att: Attestation, expect: str) -> tuple[str, str]:
    """(verdict word, why): ``ok``, ``FAIL`` or ``INCONCLUSIVE``."""
    if att.is_vllm:
        problems = att.problems(expect)
        if not problems:
            return "ok", proof.check(expect).why
        hard = any("dispatches all-reduce" in p or "two NCCL libraries" in p for p in problems)
        word = "FAIL" if hard or proof.check(expect).outcome == "fail" else "INCONCLUSIVE"
        return word, "; ".join(problems)
    result = proof.check(expect)
    return {"pass": "ok", "fail": "FAIL"}.get(result.outcome, "INCONCLUSIVE"), result.why


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse already printed the usage error
        return 0 if exc.code == 0 else 2
    parsed: list[Attestation] = []
    for name in args.logs:
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8", errors="replace")
        except (OSError, UnicodeError) as exc:
            print(f"transport: cannot read {name}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            return 2
        parsed.append(parse_server_log(text, source="<stdin>" if name == "-" else name))
    status = 0
    verdicts: list[str] = []
    for att in parsed:
        proof = att.transport
        if not proof.has_info or not proof.connections:
            status = 1
        if args.expect:
            word, why = _judge(proof, att, args.expect)
            if word != "ok":
                status = 1
            verdicts.append(f"{word}: {why}")
    try:
        if args.json:
            docs = [a.transport.to_dict() for a in parsed]
            for doc, att in zip(docs, parsed, strict=True):
                if att.is_vllm:
                    doc["vllm_attestation"] = {k: v for k, v in att.to_dict().items() if k != "transport_proof"}
            print(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2))
            for line in verdicts:
                print(line, file=sys.stderr)
        else:
            print("\n\n".join(render(a.transport, a) for a in parsed))
            for line in verdicts:
                print(line)
    except BrokenPipeError:  # `... | head`: the reader left; the status still stands
        sys.stdout = None  # no flush error at exit
    return status


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
