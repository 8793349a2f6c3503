"""Built-in evidence checks: what the hardware says about peers and links.

Collected by ``pytest -m p2p --pyargs pytest_p2p``. Each check is parametrised per GPU
(``p2p_gpu``) or per pair (``p2p_pair``) of the rig and fails with a diagnosis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_p2p.evidence.diagnose import (
    Judgement,
    judge_counters,
    judge_nvlink,
    judge_pcie,
    judge_peer_access,
    judge_topology,
)

if TYPE_CHECKING:
    from pytest_p2p.evidence.model import Evidence
    from pytest_p2p.plugin.session import P2PSession

Pair = tuple[int, int]

pytestmark = pytest.mark.p2p


def _verdict(j: Judgement) -> None:
    if j.skipped:
        pytest.skip(j.skipped)
    if not j.ok:
        pytest.fail(j.message(), pytrace=False)


def test_rig_selection(p2p_session: P2PSession) -> None:
    """Every GPU the rig names is on this machine (a GPU gone from the bus fails here, by bus id), and some
    pair is checked — else this skips with the reason (one GPU, MIG, no P2P between any two GPUs)."""
    resolved = p2p_session.resolved
    if resolved.missing:
        pytest.fail("\n".join(f"{resolved.source}: {m}" for m in resolved.missing), pytrace=False)
    if resolved.no_pairs_reason:
        pytest.skip(resolved.no_pairs_reason)
    for (a, b), why in sorted(resolved.excluded.items()):
        print(f"gpu{a}-gpu{b} not checked: {why}")
    for note in resolved.notes:
        print(note)


def test_peer_access(p2p_session: P2PSession, p2p_evidence: Evidence, p2p_pair: Pair) -> None:
    """Both GPUs of the pair can access each other as peers (CUDA both ways; NVML read/write)."""
    _verdict(judge_peer_access(p2p_evidence, p2p_evidence.pair(*p2p_pair), p2p_session.resolved.pair_expect[p2p_pair]))


def test_topology(p2p_session: P2PSession, p2p_evidence: Evidence, p2p_pair: Pair) -> None:
    """The pair connects through the expected topology class (NV#, PIX, PXB, PHB, NODE, SYS)."""
    _verdict(judge_topology(p2p_evidence, p2p_evidence.pair(*p2p_pair), p2p_session.resolved.pair_expect[p2p_pair]))


def test_pcie_link(p2p_session: P2PSession, p2p_evidence: Evidence, p2p_gpu: int) -> None:
    """The PCIe link runs at least the expected generation and width under load."""
    _verdict(judge_pcie(p2p_evidence.gpu(p2p_gpu), p2p_session.resolved.gpu_expect[p2p_gpu]))


def test_nvlink(p2p_session: P2PSession, p2p_evidence: Evidence, p2p_gpu: int) -> None:
    """All expected NVLinks are active at the expected version."""
    _verdict(judge_nvlink(p2p_evidence.gpu(p2p_gpu), p2p_session.resolved.gpu_expect[p2p_gpu]))


@pytest.mark.gpu
def test_error_counters(p2p_session: P2PSession, p2p_evidence: Evidence, p2p_gpu: int) -> None:
    """PCIe replay and NVLink CRC counters did not grow during the session (runs last)."""
    if not p2p_session.live:
        pytest.skip(f"a replay holds one reading; counter growth needs a live session ({p2p_session.label})")
    import datetime as dt

    from pytest_p2p.errors import P2PError

    try:
        now = p2p_session.evidence_at_end()  # read once for all GPUs
    except P2PError as exc:  # the driver or a GPU went away during the session: that is the finding
        pytest.fail(f"the error counters could not be read again at the end of the session: {exc}", pytrace=False)
    start = dt.datetime.fromisoformat(p2p_evidence.recorded_at)
    elapsed = (dt.datetime.fromisoformat(now.recorded_at) - start).total_seconds()
    j = judge_counters(now.gpu(p2p_gpu), p2p_evidence.gpu(p2p_gpu), p2p_session.resolved.gpu_expect[p2p_gpu],
                       elapsed_s=max(elapsed, 1.0))
    _verdict(j)
    for note in j.notes:
        print(note)
