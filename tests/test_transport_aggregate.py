"""A big log proves exactly what a small log of the same shape proves (issue 11: connections are aggregated).

The parser keeps only the first connections of each peer pair as objects and counts the rest
(``KEEP_PER_PAIR``, ``KEEP_TOTAL``); these tests make sure that shortcut can never change a
claim: a log whose connection block is repeated far past both limits must give the same
claims, transport, completeness and expectation outcomes as the block once — only the
counts scale, and every cited line is the small log's line (or, where the small log has fewer
than the evidence limit, a later repetition of one).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_p2p.probes import transport_claims
from pytest_p2p.probes.transport import contradictions, parse_nccl_log, proof_from_dict
from pytest_p2p.probes.transport_model import KEEP_PER_PAIR, KEEP_TOTAL, TransportProof

# Claims whose count is the number of connection lines (they scale with the repetitions).
CONNECTION_CLAIMS = {"used_p2p", "used_shm", "used_net", "p2p_kind", "p2p_read", "p2p_ce", "shm_mode",
                     "net_gdrdma", "transport"}

HEADER = "".join(
    [f"host{r // 2}:{100 + r}:{100 + r} [{r % 2}] NCCL INFO NCCL version 2.21.5+cuda12.4\n" for r in (0,)]
    + [f"host{r // 2}:{100 + r}:{100 + r} [{r % 2}] NCCL INFO comm 0x55{r} rank {r} nRanks 4 nNodes 2 "
       f"localRanks 2 localRank {r % 2} MNNVL 0\n" for r in range(4)]
    + [f"host{r // 2}:{100 + r}:{100 + r} [{r % 2}] NCCL INFO comm 0x55{r} rank {r} nranks 4 cudaDev {r % 2} "
       f"nvmlDev {r % 2} busId {r % 2 + 1}000 commId 0xabc - Init COMPLETE\n" for r in range(4)]
)


def _p2p_shm(ch: int) -> str:
    """Rank 0 -> 1 over P2P (host0), 2 -> 3 over SHM (host1), 1 -> 2 ... are NET below."""
    return (f"host0:100:100 [0] NCCL INFO Channel {ch:02d}/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
            f"host1:102:102 [0] NCCL INFO Channel {ch:02d} : 2[0] -> 3[1] via SHM/direct/direct\n")


def _net(ch: int) -> str:
    return (f"host0:101:101 [1] NCCL INFO Channel {ch:02d}/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA\n"
            f"host1:102:102 [0] NCCL INFO Channel {ch:02d}/0 : 1[1] -> 2[0] [receive] via NET/IB/0/GDRDMA\n"
            f"host1:103:103 [1] NCCL INFO Channel {ch:02d}/0 : 3[1] -> 0[0] [send] via NET/IB/1\n"
            f"host0:100:100 [0] NCCL INFO Channel {ch:02d}/0 : 3[1] -> 0[0] [receive] via NET/IB/1\n")


def _scaled(small: TransportProof, k: int) -> str:
    """The small proof's transport with every count times k."""
    labels = {label: n * k for label, n in small.effective_labels.items()}
    if len(labels) == 1:
        return next(iter(labels))
    parts = sorted(labels.items(), key=lambda kv: (-kv[1], kv[0]))
    return "mixed: " + " + ".join(f"{label} ({n})" for label, n in parts)


def assert_same_proof(big: TransportProof, small: TransportProof, k: int) -> None:
    """``big`` is ``small``'s connection lines repeated ``k`` times: the same proof, counts scaled."""
    assert big.state == small.state and big.complete == small.complete
    assert big.completeness == small.completeness
    assert big.transport == _scaled(small, k)
    assert big.n_connections == k * small.n_connections
    assert sorted(big.claims) == sorted(small.claims)
    for name, claim in small.claims.items():
        got = big.claims[name]
        if name != "transport":
            assert got.value == claim.value, name
        assert got.count == (claim.count * k if name in CONNECTION_CLAIMS and claim.count else claim.count), name
        texts = [t for _, t in got.lines]
        assert [t for _, t in claim.lines] == texts[:len(claim.lines)], name  # the same lines, maybe more
        assert len(got.lines) >= len(claim.lines), name
    big_summary, small_summary = big.summary(), small.summary()
    assert big_summary.pop("n_connections") == k * int(str(small_summary.pop("n_connections")))
    assert big_summary == small_summary
    for expect in ("P2P", "P2P+SHM", "P2P+SHM+NET/IB", "NET/IB/GDRDMA", "SHM", "NET"):
        assert big.check(expect).outcome == small.check(expect).outcome, expect
    assert contradictions(big) == [] and contradictions(small) == []


def test_connection_block_repeated_past_the_keep_limits_proves_what_it_proves_once() -> None:
    block = "".join(_p2p_shm(ch) + _net(ch) for ch in range(16))  # 96 lines, 8 peer-pair keys
    k = KEEP_TOTAL // 96 + 20  # past KEEP_TOTAL in all and far past KEEP_PER_PAIR per key
    small, big = parse_nccl_log(HEADER + block, "small"), parse_nccl_log(HEADER + block * k, "big")
    assert small.state == "proved" and small.used_net and small.net_gdrdma is False
    assert len(big.connections) <= KEEP_TOTAL + len(big.counts) < big.n_connections
    assert all(n == min(KEEP_PER_PAIR, 16 * k) for n in _kept_per_key(big).values())
    assert_same_proof(big, small, k)
    # the counts travel in the JSON: a proof read back claims the same
    back = proof_from_dict(big.to_dict())
    assert back.transport == big.transport and back.summary() == big.summary()
    assert back.check("P2P+SHM+NET/IB").outcome == big.check("P2P+SHM+NET/IB").outcome


def test_a_transport_first_seen_after_the_keep_limit_is_still_claimed_and_cited() -> None:
    p2p = "".join(_p2p_shm(ch) for ch in range(32))
    k = KEEP_TOTAL // 64 + 10
    small = parse_nccl_log(HEADER + p2p + _net(0), "small")
    big = parse_nccl_log(HEADER + p2p * k + _net(0), "big")
    assert big.claims["used_net"].value is True and big.claims["used_net"].lines
    assert any(c.transport == "NET" for c in big.connections)  # a key's first line is always kept
    judged = big.check("P2P+SHM")
    assert judged.outcome == "fail" and f"4 of {big.n_connections} connection(s) are not" in judged.why
    assert f"line {HEADER.count(chr(10)) + 64 * k + 1}: NET/IB/GDRDMA" in judged.why  # the late line is named
    assert small.state == big.state == "proved"
    assert big.transport.startswith("mixed: P2P/CUMEM") and "NET/IB/GDRDMA (2)" in big.transport
    assert big.claims["used_net"].count == small.claims["used_net"].count == 4


def _kept_per_key(proof: TransportProof) -> dict[object, int]:
    out: dict[object, int] = {}
    for c in proof.connections:
        out[c.key] = out.get(c.key, 0) + 1
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(channels=st.lists(st.integers(0, 63), min_size=1, max_size=6, unique=True),
       with_net=st.booleans(), k=st.integers(2, 200))
def test_any_repeated_block_proves_what_it_proves_once(channels: list[int], with_net: bool, k: int) -> None:
    block = "".join(_p2p_shm(ch) + (_net(ch) if with_net else "") for ch in channels)
    small = parse_nccl_log(HEADER + block, "small")
    big = parse_nccl_log(HEADER + block * k, "big")
    assert_same_proof(big, small, k)


def test_peer_pairs_past_the_pair_limit_are_folded_without_changing_a_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile log with more distinct peer pairs than MAX_PAIRS: the extra pairs fold, the proof stays."""
    fan = "".join(f"host0:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> {d}[1] via P2P/CUMEM/read\n" for d in (2, 3))
    block = "".join(_p2p_shm(ch) + _net(ch) for ch in range(4)) + fan
    exact = parse_nccl_log(HEADER + block, "exact")
    monkeypatch.setattr(transport_claims, "MAX_PAIRS", 2)
    folded = parse_nccl_log(HEADER + block, "folded")
    assert len(folded.counts) < len(exact.counts)
    assert -1 in {k[4] for k in folded.counts} | {k[6] for k in folded.counts}
    assert folded.n_connections == exact.n_connections and folded.transport == exact.transport
    assert folded.completeness == exact.completeness and folded.state == exact.state == "proved"
    assert {n: c.to_dict() for n, c in folded.claims.items()} == {n: c.to_dict() for n, c in exact.claims.items()}
    assert folded.summary() == exact.summary()


def test_kept_connections_carry_their_own_channel_and_index_when_the_rest_of_the_line_repeats() -> None:
    """Messages are parsed once per text without channel numbers: each kept connection still has its own."""
    line = "h:1:1 [0] NCCL INFO Channel {}/{} : 0[0] -> 1[1] via P2P/IPC\n"
    glued = "h:1:1 [0] NCCL INFO Channel 05/0 : 0[0] -> 1[1] via P2P/IPC Channel 05/1 : 0[0] -> 1[1] via P2P/IPC\n"
    proof = parse_nccl_log(glued + line.format("00", 0) + line.format("03", 1))
    assert [(c.channel, c.conn_index, c.line) for c in proof.connections] == [(5, 0, 1), (5, 1, 1), (0, 0, 2),
                                                                              (3, 1, 3)]
