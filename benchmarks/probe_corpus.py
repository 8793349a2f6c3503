"""Grade the transport proof against the hand-graded public log corpus (fixtures/logs/public/TRUTH.yaml).

    python benchmarks/probe_corpus.py [--split heldout|dev|all] [-v]

Per log: ``right`` (every field as graded), ``wrong`` (some claim the truth contradicts: a value
where the truth is null or another value — an overclaim), ``miss`` (no wrong claim, but some
field left null where the truth has a value), ``crash`` (the parser raised). Results go to
docs/transport.md ("Public corpus"). The test ``tests/test_transport_corpus.py`` asserts every row.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fixtures" / "logs" / "public"
FIELDS = ("labels", "used_p2p", "used_shm", "used_net", "nvls", "collnet", "version", "complete", "state")


@dataclass
class Grade:
    file: str
    split: str
    outcome: str  # right | wrong | miss | crash
    wrong: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)


def observed(text: str, name: str) -> dict[str, object]:
    """What the parser claims, in the truth table's terms."""
    from pytest_p2p.probes.transport import parse_nccl_log

    proof = parse_nccl_log(text, source=name)
    return {
        "labels": sorted({c.label for c in proof.effective_connections}),
        "used_p2p": proof.used_p2p, "used_shm": proof.used_shm, "used_net": proof.used_net,
        "nvls": proof.used_nvls, "collnet": proof.used_collnet, "version": proof.nccl_version,
        "complete": proof.complete, "state": proof.state,
    }


def grade_row(row: dict[str, object]) -> Grade:
    name = str(row["file"])
    g = Grade(name, str(row["split"]), "right")
    try:
        got = observed((CORPUS / name).read_text(encoding="utf-8", errors="replace"), name)
    except Exception as exc:  # noqa: BLE001 - a crash is what this grades
        g.outcome, g.wrong = "crash", [f"{type(exc).__name__}: {exc}"]
        return g
    for key in FIELDS:
        want, have = row.get(key), got[key]
        if key == "version" and want is not None:
            want = str(want)
        if key == "labels":
            want_set, have_set = set(want or []), set(have or [])  # type: ignore[call-overload]
            if have_set - want_set:
                g.wrong.append(f"labels: claims {sorted(have_set - want_set)}")
            if want_set - have_set:
                g.missed.append(f"labels: misses {sorted(want_set - have_set)}")
        elif have == want:
            continue
        elif have is None:
            g.missed.append(f"{key}: null, truth {want!r}")
        else:
            g.wrong.append(f"{key}: {have!r}, truth {want!r}")
    g.outcome = "wrong" if g.wrong else "miss" if g.missed else "right"
    return g


def load_truth() -> list[dict[str, object]]:
    data = yaml.safe_load((CORPUS / "TRUTH.yaml").read_text())
    return list(data["logs"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="heldout", choices=("heldout", "dev", "all"))
    ap.add_argument("-v", action="store_true", help="show every log")
    args = ap.parse_args(argv)
    rows = [r for r in load_truth() if args.split == "all" or r["split"] == args.split]
    grades = [grade_row(r) for r in rows]
    counts = {k: sum(g.outcome == k for g in grades) for k in ("right", "wrong", "miss", "crash")}
    for g in grades:
        if args.v or g.outcome != "right":
            print(f"{g.outcome:6} {g.file}: {'; '.join(g.wrong + g.missed)}")
    print(f"{args.split}: {len(grades)} logs: {counts['right']} right, {counts['wrong']} wrong, "
          f"{counts['miss']} miss, {counts['crash']} crash")
    return 1 if counts["wrong"] or counts["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
