"""Properties of the transport-proof parser: it never raises, and noise never changes what it proves."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_p2p.probes.transport import parse_nccl_log, proof_from_dict

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Fragments that look like NCCL so that random text reaches the interesting branches.
FRAGMENTS = st.sampled_from([
    "NCCL INFO ", "NCCL WARN ", "h:1:1 [0] ", "Channel 00/0 : ", "0[0] -> 1[1] ", "via P2P/CUMEM", "via SHM/",
    "[send] via NET/IB/0", "/GDRDMA", "(PCI)", "/read", "/CE", "\r\n", "\n", "\x1b[31m", "NCCL version 2.",
    "set by environment to ", "comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
    " nvls channels, ", "CollNet 00/0 : 0 [send] via COLLNET/", "GPU Direct RDMA Enabled for HCA 0 '",
])
TEXT = st.lists(st.one_of(FRAGMENTS, st.text(max_size=20)), max_size=40).map("".join)

# Lines that can never be taken for NCCL output (no "NCCL " in them).
LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
NOISE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=LINE_BREAKS), max_size=60
).filter(lambda s: "NCCL " not in s)

BASE = (LOGS / "seed000_nccl_p2p_on_excerpt.log").read_text().splitlines()
OFF = (LOGS / "h200x2_nccl-2.28.9_p2p_off.log").read_text().splitlines()[180:215]


@SETTINGS
@given(TEXT)
def test_never_raises_and_always_serialises(text):
    proof = parse_nccl_log(text, source="fuzz")
    d = json.loads(json.dumps(proof.to_dict()))
    assert proof_from_dict(d).to_dict() == d
    ok, why = proof.satisfies("P2P")
    assert isinstance(ok, bool) and why
    assert isinstance(proof.transport, str)
    if not proof.has_info:
        assert proof.claims == {} and proof.problem


@SETTINGS
@given(st.binary(max_size=300))
def test_never_raises_on_binary_garbage(data):
    parse_nccl_log(data.decode("utf-8", "replace"))


def _essence(proof):
    return (proof.transport, [(c.label, c.src_rank, c.dst_rank, c.channel) for c in proof.connections],
            proof.env_overrides, proof.p2p_type, proof.nccl_version)


@SETTINGS
@given(st.data())
def test_noise_lines_do_not_change_the_proof(data):
    for base in (BASE, OFF):
        noisy = []
        for line in base:
            noisy.extend(data.draw(st.lists(NOISE, max_size=2)))
            noisy.append(line)
        crlf = data.draw(st.booleans())
        text = ("\r\n" if crlf else "\n").join(noisy)
        assert _essence(parse_nccl_log(text)) == _essence(parse_nccl_log("\n".join(base)))


@SETTINGS
@given(st.sampled_from(["\x1b[0m", "\x1b[1;32m", "\x1b[K"]), st.integers(min_value=0, max_value=3))
def test_ansi_codes_do_not_change_the_proof(code, where):
    def colour(line: str) -> str:
        cut = [0, line.find("NCCL"), line.find("Channel"), len(line)][where]
        cut = max(cut, 0)
        return line[:cut] + code + line[cut:] + "\x1b[0m"

    coloured = "\n".join(colour(x) for x in BASE)
    assert _essence(parse_nccl_log(coloured)) == _essence(parse_nccl_log("\n".join(BASE)))
