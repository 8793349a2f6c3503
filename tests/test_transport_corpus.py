"""The transport proof against real public logs (hand-graded truth table) and the classes of issue 13.

Every row of fixtures/logs/public/TRUTH.yaml must grade ``right``; every log under fixtures/logs
must give a proof whose claims never cite a line that says otherwise.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from pytest_p2p.probes.transport import contradictions, parse_nccl_log

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "fixtures" / "logs"
_spec = importlib.util.spec_from_file_location("probe_corpus", ROOT / "benchmarks" / "probe_corpus.py")
assert _spec is not None and _spec.loader is not None
corpus = importlib.util.module_from_spec(_spec)
sys.modules["probe_corpus"] = corpus
_spec.loader.exec_module(corpus)
ROWS = corpus.load_truth()


def load(name: str):
    return parse_nccl_log((LOGS / name).read_text(encoding="utf-8", errors="replace"), source=name)


def test_truth_table_cites_every_log_once_with_a_source():
    files = sorted(str(p.relative_to(LOGS / "public")) for p in (LOGS / "public").rglob("*.log"))
    assert sorted(r["file"] for r in ROWS) == files
    assert all(str(r["source"]).startswith("https://github.com/") for r in ROWS)
    assert {r["split"] for r in ROWS} == {"dev", "heldout"}
    assert sum(r["split"] == "heldout" for r in ROWS) >= 15


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_public_log_grades_right(row):
    g = corpus.grade_row(row)
    assert g.outcome == "right", f"{g.outcome}: {g.wrong + g.missed}"


@pytest.mark.parametrize("name", sorted(str(p.relative_to(LOGS)) for p in LOGS.rglob("*.log")))
def test_no_claim_cites_a_line_against_it(name):
    proof = load(name)
    assert contradictions(proof) == []
    assert not any(w.startswith("internal:") for w in proof.warnings)
    for claim in proof.claims.values():  # a negative transport claim needs a complete log
        if claim.name.startswith("used_") and claim.value is False:
            assert proof.complete or claim.name == "used_collnet", claim


# -- the classes of issue 13 -------------------------------------------------------------------

def test_collnet_set_up_then_abandoned_is_not_used_and_not_cited():
    proof = load("synth_nccl-2.18.5_collnet_abandoned.log")
    assert proof.used_collnet is False and proof.collnet_state == "abandoned"
    assert "Cannot initialize CollNet" in proof.evidence_lines("collnet")[0][1]
    result = proof.check("P2P+NET/IB")
    assert result.outcome == "pass", result.why
    assert "COLLNET" not in proof.transport and "CollNet connection lines not counted" in result.why
    assert not any("COLLNET" in t for _, t in proof.evidence_lines("transport"))


def test_collnet_set_up_then_hung_is_not_used():
    proof = load("public/dev/nccl-tests-311_collnet_setup_then_hang.log")
    assert proof.used_collnet is None and proof.collnet_state == "unconfirmed"
    assert proof.evidence_lines("collnet") == []
    assert proof.check("NET").outcome == "inconclusive"


def test_ring_era_lines_are_read():
    proof = load("synth_nccl-2.4.8_ring_era_shm_ib.log")
    assert proof.nccl_version == "2.4.8"  # the unprefixed banner
    assert sorted(c.label for c in proof.connections) == ["NET/IB", "NET/IB", "P2P/IPC", "SHM"]
    recv = next(c for c in proof.connections if c.direction == "receive")
    assert (recv.src_rank, recv.dst_rank, recv.src_dev) == (6, 2, "")
    ring = load("public/dev/nccl-385_ring_ipc_ib_numbered.log")
    assert ring.state == "incomplete" and len(ring.connections) == 11


def test_comm_suffix_glued_lines_and_p2p_type():
    proof = load("synth_nccl-2.21.5_comm_suffix_glued_p2p_type.log")
    assert len(proof.connections) == 4 and proof.stats["unparsed_connection_lines"] == 0
    assert [c.line for c in proof.connections] == [3, 4, 5, 5]  # two lines glued by spaces: both read
    assert proof.p2p_type == {"intraNodeP2pSupport": 1, "directMode": 1}
    old = parse_nccl_log("h:1:1 [0] NCCL INFO Check P2P Type isAllDirectP2p 0 directMode 1\n")
    assert old.p2p_type == {"isAllDirectP2p": 0, "directMode": 1}  # 2.27 form without isAllCudaP2p


@pytest.mark.parametrize("text, version", [
    ("NCCL version 2.18.5+cuda11.8\n", "2.18.5"),
    ("(VllmWorkerProcess pid=1) INFO 10-03 11:23:21 pynccl.py:63] vLLM is using nccl==2.21.5\n", "2.21.5"),
    ("[1,0]<stdout>:NCCL version 2.5.6+cuda10.2\n", "2.5.6"),
])
def test_version_banners(text, version):
    assert parse_nccl_log(text).nccl_version == version


def test_expectations_match_transport_family():
    proof = load("public/heldout/deepspeed-4715_ibext_ipc_read.log")
    assert proof.check("P2P+NET/IB").outcome != "fail"  # NET/IB covers NET/IBext
    v8 = load("public/dev/nccl-1814_ibext_v8_cumem_nvls_64rank.log")
    for expect in ("P2P+NET/IB", "P2P+NET/IBext", "P2P+NET/IBext_v8"):
        assert v8.check(expect).outcome != "fail", expect
    assert v8.check("P2P+NET/Socket").outcome == "fail"


def _two_rank_log(transport_line_0: str, transport_line_1: str, ranks: int = 2) -> str:
    lines = ["h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
             f"h:1:1 [0] NCCL INFO {transport_line_0}", f"h:2:2 [1] NCCL INFO {transport_line_1}"]
    lines += [f"h:{r + 1}:{r + 1} [{r}] NCCL INFO comm 0x{r} rank {r} nranks {ranks} cudaDev {r} busId {r}000 "
              f"commId 0xabc - Init COMPLETE" for r in range(2)]
    return "\n".join(lines) + "\n"


def test_negative_claims_only_from_a_complete_log():
    complete = parse_nccl_log(_two_rank_log("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
                                            "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM"))
    assert complete.state == "proved" and complete.used_net is False and complete.used_shm is False
    assert all("Init COMPLETE" in t or "via P2P" in t for _, t in complete.evidence_lines("used_net"))
    assert complete.satisfies("P2P/CUMEM")[0]
    # The same lines, but the communicator has 16 ranks (a two-host job, one host's log): nothing is ruled out.
    half = parse_nccl_log(_two_rank_log("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
                                        "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM", ranks=16))
    assert half.state == "incomplete" and half.used_net is None and half.claims["used_net"].lines == ()
    assert "2 of 16 ranks" in half.completeness
    assert half.check("P2P").outcome == "inconclusive"
    # A grep for GDR: NET lines only, nothing about P2P.
    grep = parse_nccl_log("h:1:1 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA\n")
    assert grep.used_p2p is None and grep.used_net is True


def test_format_not_recognised_is_a_state_not_a_claim():
    proof = parse_nccl_log("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via QUANTUM/entangled\n")
    assert proof.state == "unrecognised" and "format not recognised" in (proof.problem or "")
    assert proof.used_p2p is None and proof.check("P2P").outcome == "inconclusive"
