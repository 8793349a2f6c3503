"""Built-in probe checks: what NCCL and the copy engines actually do on each pair.

Collected by ``pytest -m p2p --pyargs pytest_p2p``. The per-arm checks are parametrised
by (pair, arm) (``gpu0-gpu1-p2p_on``), the comparisons by pair. Probes run once per
session on a live machine, or are replayed from a recording (``--p2p-probe-replay``);
without either they skip, saying so. The in-process pytest-benchmark measurements at
the end need a real GPU (marked ``gpu``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import ModuleType

import pytest

from pytest_p2p.lease import GpuLease
from pytest_p2p.plugin.policy import inconclusive
from pytest_p2p.plugin.probes import ProbeCase, ProbeState, cuda_indices
from pytest_p2p.plugin.session import P2PSession
from pytest_p2p.probes.allreduce import AllReduceResult, Row, busbw_factor
from pytest_p2p.probes.judge import Judgement, judge_busbw, judge_copy, judge_latency, judge_uplift, overall
from pytest_p2p.probes.p2pcopy import P2PCopyResult
from pytest_p2p.report.allure_attach import describe_judged
from pytest_p2p.stats.decide import Outcome

pytestmark = pytest.mark.p2p


def _via_lines(result: AllReduceResult, limit: int = 6) -> str:
    """The log's channel-connection lines, the raw proof behind the transport claim."""
    if result.log_path is None:
        return "(no NCCL log recorded)"
    lines = [ln.strip() for ln in result.log_path.read_text(errors="replace").splitlines() if " via " in ln]
    shown = "\n    ".join(lines[:limit]) or "(no 'via' lines: was NCCL_DEBUG=INFO set?)"
    more = f"\n    ... {len(lines) - limit} more" if len(lines) > limit else ""
    return f"{result.log_path}:\n    {shown}{more}"


def test_transport(p2p_probe_case: ProbeCase, p2p_allreduce: AllReduceResult) -> None:
    """NCCL used the transport the arm expects (P2P/CUMEM for p2p_on, SHM for p2p_off, ...), proven by the log."""
    arm = p2p_probe_case.arm
    if p2p_allreduce.proof is None:
        pytest.fail(f"arm {arm.name}: no NCCL log to prove the transport from", pytrace=False)
    result = p2p_allreduce.proof.check(arm.expect_transport)
    if result.outcome != "pass":
        word = "cannot be proven" if result.outcome == "inconclusive" else "is contradicted"
        pytest.fail(f"arm {arm.name} expects {arm.expect_transport}, which {word}: {result.why}\nproof lines: "
                    f"{_via_lines(p2p_allreduce)}", pytrace=False)


def test_allreduce_correct(p2p_probe_case: ProbeCase, p2p_allreduce: AllReduceResult) -> None:
    """The all-reduce sums exactly, at an LL-protocol size and a Simple-protocol size (eager and graph)."""
    if not p2p_allreduce.correct:
        bad = [c for c in p2p_allreduce.checks if c.get("wrong")] or p2p_allreduce.checks
        pytest.fail(f"arm {p2p_probe_case.arm.name}: wrong all-reduce results: {bad}", pytrace=False)


def _decide(config: pytest.Config, what: str, judgements: Sequence[Judgement]) -> None:
    """Fail on a failed bound, skip (strict: fail) on an inconclusive one, pass otherwise; every line shown.

    As the campaign's checks do (:mod:`pytest_p2p.plugin.policy`): an interval that straddles
    the threshold is "we could not tell", never a green pass and never a red failure.
    """
    outcome = overall(judgements)
    lines = "\n  ".join(j.line for j in judgements)
    describe_judged(what, outcome.value, [(j.outcome.value, j.line) for j in judgements])  # Allure: the numbers
    if outcome is Outcome.FAIL:
        bad = "\n  ".join(j.line for j in judgements if j.outcome is Outcome.FAIL)
        pytest.fail(f"{what}:\n  {bad}\nall sizes:\n  {lines}", pytrace=False)
    if outcome is Outcome.INCONCLUSIVE:
        inconclusive(config, f"{what}:\n  {lines}")


def test_busbw(p2p_probe_state: ProbeState, p2p_probe_case: ProbeCase, p2p_allreduce: AllReduceResult,
               pytestconfig: pytest.Config) -> None:
    """Bus bandwidth at the rig's named sizes is at least its threshold (nccl-tests' busbw, GB/s), on a bound."""
    cfg = p2p_probe_state.cfg
    th = cfg.thresholds_for(p2p_probe_case.arm.name)
    if not th.busbw_min_gbs:
        pytest.skip(f"no busbw_min_gbs threshold for arm {p2p_probe_case.arm.name} (rig probe.thresholds)")
    _decide(pytestconfig, f"arm {p2p_probe_case.arm.name}: busbw against probe.thresholds.busbw_min_gbs",
            judge_busbw(p2p_allreduce, th, cfg.alpha))


def test_latency(p2p_probe_state: ProbeState, p2p_probe_case: ProbeCase, p2p_allreduce: AllReduceResult,
                 pytestconfig: pytest.Config) -> None:
    """Time per all-reduce at the rig's named sizes is at most its threshold (us), on a bound."""
    cfg = p2p_probe_state.cfg
    th = cfg.thresholds_for(p2p_probe_case.arm.name)
    if not th.latency_max_us:
        pytest.skip(f"no latency_max_us threshold for arm {p2p_probe_case.arm.name} (rig probe.thresholds)")
    _decide(pytestconfig, f"arm {p2p_probe_case.arm.name}: time against probe.thresholds.latency_max_us",
            judge_latency(p2p_allreduce, th, cfg.alpha))


def test_uplift(p2p_probe_state: ProbeState, p2p_pair: tuple[int, int], pytestconfig: pytest.Config) -> None:
    """The faster arm (p2p_on) beats the slower (p2p_off) at decode sizes by at least the rig's margin, on a bound."""
    cfg, arms = p2p_probe_state.cfg, p2p_probe_state.arms
    up = cfg.uplift
    selected = cfg.select_arms(arms)
    missing = [a for a in (up.faster, up.slower) if a not in selected]
    if missing:
        pytest.skip(f"uplift compares {up.faster} and {up.slower}; not probed: {', '.join(missing)}")
    pair = (p2p_pair[0], p2p_pair[1])
    faster = p2p_probe_state.allreduce(pair, arms[up.faster])
    slower = p2p_probe_state.allreduce(pair, arms[up.slower])
    _decide(pytestconfig, f"uplift of {up.faster} over {up.slower} against the rig's margin",
            judge_uplift(faster, slower, cfg.uplift_sizes, up.min, cfg.alpha))


def test_p2p_copy(p2p_copy: P2PCopyResult, p2p_probe_state: ProbeState, pytestconfig: pytest.Config) -> None:
    """With peer access, a direct peer copy is faster than the same copy staged through host memory, on a bound."""
    if not p2p_copy.peer_access:
        pytest.skip(f"CUDA reports no peer access for this pair ({p2p_copy.can_access_peer}); nothing to compare")
    _decide(pytestconfig, "peer copy against host-staged (peer access is enabled; is it paying off?)",
            [judge_copy(p2p_copy, p2p_probe_state.cfg.alpha)])


# -- in-process latency measurements through pytest-benchmark (need a real GPU) ----------------------
def _torch_or_skip(p2p_session: P2PSession) -> ModuleType:
    if not p2p_session.live:
        pytest.skip(f"needs a real GPU: the session's evidence is {p2p_session.label}")
    torch: ModuleType = pytest.importorskip("torch", reason="needs torch with CUDA")
    return torch


def _leased(pair: tuple[int, int], what: str) -> AbstractContextManager[float]:
    """The pair's GPU lease around an in-process benchmark: these two time CUDA from pytest's own process, and
    without the lease a second run's probes could share the GPUs with them (the booking sampler of
    benchmarks/gpu_booking.py saw it on 4x H100). The CUDA context they create stays in this process after."""
    return GpuLease().hold(list(pair), what, timeout_s=600.0)


@pytest.mark.gpu
def test_benchmark_p2p_copy_small(p2p_session: P2PSession, p2p_pair: tuple[int, int],
                                  request: pytest.FixtureRequest) -> None:
    """4-byte device-to-device copy, synchronised inside the timed call (latency, not bandwidth)."""
    torch = _torch_or_skip(p2p_session)
    p2p_benchmark = request.getfixturevalue("p2p_benchmark")
    d0, d1 = cuda_indices(p2p_session.evidence, (p2p_pair[0], p2p_pair[1]))
    with _leased(p2p_pair, "benchmark p2p copy"):
        src = torch.ones(1, dtype=torch.float32, device=f"cuda:{d0}")
        dst = torch.zeros(1, dtype=torch.float32, device=f"cuda:{d1}")

        def copy() -> None:
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize(d1)

        p2p_benchmark.pedantic(copy, rounds=200, iterations=1, warmup_rounds=20)
    p2p_benchmark.extra_info.update({
        "bytes": 4, "direction": f"gpu{p2p_pair[0]}->gpu{p2p_pair[1]}",
        "peer_access": bool(torch.cuda.can_device_access_peer(d0, d1)),
        "method": "torch copy_ + device synchronize per call (includes launch and sync overhead)",
    })


@pytest.mark.gpu
def test_benchmark_decode_allreduce(p2p_session: P2PSession, p2p_pair: tuple[int, int], p2p_decode_size: int,
                                    request: pytest.FixtureRequest) -> None:
    """Decode-size all-reduce over both GPUs, synchronised inside the timed call."""
    torch = _torch_or_skip(p2p_session)
    p2p_benchmark = request.getfixturevalue("p2p_benchmark")
    nccl: ModuleType = pytest.importorskip("torch.cuda.nccl")

    devs = cuda_indices(p2p_session.evidence, (p2p_pair[0], p2p_pair[1]))
    n = p2p_decode_size // 4
    with _leased(p2p_pair, f"benchmark decode all-reduce {p2p_decode_size} B"):
        bufs = [torch.zeros(n, dtype=torch.float32, device=f"cuda:{d}") for d in devs]

        def all_reduce() -> None:
            nccl.all_reduce(bufs)
            for d in devs:
                torch.cuda.synchronize(d)

        p2p_benchmark.pedantic(all_reduce, rounds=100, iterations=1, warmup_rounds=10)
    info = {
        "bytes": p2p_decode_size,
        "transport": "single-process torch.cuda.nccl.all_reduce over both GPUs: NCCL 'direct pointer' P2P "
                     "within one process, not the per-process CUMEM/IPC path of the probe and vLLM",
        "arm_env": "none applied: inherits pytest's environment "
                   f"(NCCL_P2P_DISABLE={os.environ.get('NCCL_P2P_DISABLE', 'unset')})",
    }
    try:
        mean_s = float(p2p_benchmark.stats.stats.mean)
        row = Row.from_time(p2p_decode_size, mean_s * 1e6, 2)
        info.update(time_us=row.time_us, algbw_gbs=row.algbw_gbs, busbw_gbs=row.busbw_gbs,
                    busbw_factor=busbw_factor("all_reduce", 2))
    except (AttributeError, TypeError, ValueError):
        pass
    p2p_benchmark.extra_info.update(info)
