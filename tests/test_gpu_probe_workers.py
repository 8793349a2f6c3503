"""The probe workers against real GPUs (issue 28 item 5): marked ``gpu``, run with ``P2P_TEST_REAL_GPU=1``.

Why these exist: every other probe test drives a fake worker, so a change that breaks the real
torch/NCCL side (a renamed torch call, a CUDA graph that no longer captures, NCCL's log format)
would pass CI. On a machine with two GPUs these run the real workers on GPUs 0 and 1:

    P2P_TEST_REAL_GPU=1 python -m pytest -m gpu tests/test_gpu_probe_workers.py

They assert what the product asserts on a rig: correct all-reduce values, the transport each arm
forces (proved from NCCL's own log), that P2P beats the host path for a large all-reduce, and
that the GPU lease keeps two probe launches of different processes off one GPU at the same time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_p2p.probes.allreduce import run_allreduce
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.probes.config import ProbeConfig
from pytest_p2p.probes.p2pcopy import run_p2p_copy

pytestmark = pytest.mark.gpu

PAIR = (0, 1)
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SMALL, LARGE = 8 * 1024, 64 * 1024 * 1024


def _gpus() -> int:
    torch = pytest.importorskip("torch")
    return int(torch.cuda.device_count())


@pytest.fixture(scope="module")
def two_gpus() -> None:
    if _gpus() < 2:
        pytest.skip("needs two GPUs")


@pytest.mark.parametrize(("arm", "p2p", "shm"), [("p2p_on", True, False), ("p2p_off", False, True)])
def test_allreduce_worker_is_correct_and_uses_the_arms_transport(two_gpus: None, tmp_path: Path, arm: str,
                                                                 p2p: bool, shm: bool) -> None:
    cfg = ProbeConfig(sizes=(SMALL, LARGE), decode_sizes=(SMALL,), trials=3, timeout_s=180.0, nccl_tests=False)
    res = run_allreduce(PAIR, PRESETS[arm], cfg, dict(NO_MULTICAST), tmp_path)
    assert res.correct, res.checks
    assert {r.bytes for r in res.rows} == {SMALL, LARGE}
    assert all(r.time_us > 0 for r in res.rows)
    assert res.proof is not None and res.proof.has_info, "no NCCL INFO lines in the worker's log"
    assert res.proof.used_p2p is p2p, res.proof.summary()
    if shm:
        assert res.proof.used_shm is True, res.proof.summary()


def test_p2p_beats_the_host_path_for_a_large_all_reduce(two_gpus: None, tmp_path: Path) -> None:
    cfg = ProbeConfig(sizes=(LARGE,), decode_sizes=(), trials=3, timeout_s=180.0, nccl_tests=False)
    on = run_allreduce(PAIR, PRESETS["p2p_on"], cfg, dict(NO_MULTICAST), tmp_path / "on")
    off = run_allreduce(PAIR, PRESETS["p2p_off"], cfg, dict(NO_MULTICAST), tmp_path / "off")
    t_on, t_off = on.row(LARGE), off.row(LARGE)
    assert t_on is not None and t_off is not None
    assert t_on.time_us < t_off.time_us, (t_on, t_off)


def test_copy_worker_sees_peer_access_and_measures_both_modes(two_gpus: None, tmp_path: Path) -> None:
    cfg = ProbeConfig(sizes=(LARGE,), decode_sizes=(), trials=3, timeout_s=180.0, nccl_tests=False)
    res = run_p2p_copy(PAIR, cfg, tmp_path, dict(NO_MULTICAST))
    assert res.peer_access, res.can_access_peer
    assert res.unidir_gbs("peer") > 0 and res.unidir_gbs("host_staged") > 0
    assert res.unidir_gbs("peer") > res.unidir_gbs("host_staged"), res.modes


HOLDER = """
import sys, time
from pathlib import Path
from pytest_p2p.lease import GpuLease
from pytest_p2p.probes.allreduce import run_allreduce
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.probes.config import ProbeConfig
out = Path(sys.argv[1])
cfg = ProbeConfig(sizes=(8192,), decode_sizes=(8192,), trials=2, timeout_s=180.0, nccl_tests=False)
with GpuLease().hold([0, 1], what="gpu test " + sys.argv[2], timeout_s=300.0):
    t0 = time.time()
    run_allreduce((0, 1), PRESETS["p2p_on"], cfg, {"NCCL_NVLS_ENABLE": "0"}, out)
    print(f"{t0:.6f} {time.time():.6f}")
"""


def test_the_lease_keeps_two_processes_probes_off_one_gpu_at_a_time(two_gpus: None, tmp_path: Path) -> None:
    env = dict(os.environ, **NO_MULTICAST, PYTEST_P2P_LOCK_DIR=str(tmp_path / "locks"))
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / f"p{k}"), str(k)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(2)]
    spans = []
    deadline = time.monotonic() + 600
    for p in procs:
        out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        assert p.returncode == 0, err[-2000:]
        a, b = (float(x) for x in out.split()[-2:])
        spans.append((a, b))
    (a0, a1), (b0, b1) = sorted(spans)
    assert a1 <= b0, f"two probe launches held GPUs 0-1 at once: {spans}"
