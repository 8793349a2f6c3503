"""On a machine with one GPU the pair checks skip with the rig's reason, not pytest's generic one."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"


def test_pair_checks_on_one_gpu_skip_with_the_rigs_reason(pytester):
    snap = FIXTURES / "h100x1-pcie.snapshot.json"
    r = pytester.runpytest_subprocess("-m", "p2p", "--pyargs", "pytest_p2p.checks.test_evidence",
                                      f"--p2p-snapshot={snap}", "-rs")
    out = r.stdout.str()
    assert r.ret == 0, out
    assert "got empty parameter set" not in out
    assert "INTERNALERROR" not in out and "Traceback" not in out
    # the two pair-parametrised checks (peer access, topology) carry the rig's reason
    pair_skips = [ln for ln in out.splitlines() if ln.startswith("SKIPPED [2]") and "selects 1 GPU(s)" in ln]
    assert pair_skips, out
