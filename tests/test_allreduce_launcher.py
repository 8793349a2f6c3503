"""The all-reduce launcher without a GPU: a fake worker stands in for the torch ranks.

What is real here: the environment each rank gets, process-group control (a hang or a
dying rank kills every group, grandchildren included, and the error names the arm,
the pair and the last log line), the result parsing, nccl-tests' bandwidth formulas,
and the transport proof parsed from a real NCCL log the fake rank echoes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_p2p.errors import ProbeError
from pytest_p2p.probes.allreduce import AllReduceResult, Row, algbw_gbs, busbw_factor, run_allreduce
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.probes.config import ProbeConfig

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"

FAKE_WORKER = r'''
import json, os, subprocess, sys, time
spec = json.load(open(sys.argv[1]))
rank = int(os.environ["RANK"])
mode = os.environ.get("FAKE_MODE", "ok")
out = os.path.dirname(spec["out"])
json.dump(dict(os.environ), open(os.path.join(out, f"env_rank{rank}.json"), "w"))
print(f"[fake] rank {rank} up", flush=True)
if rank == 0 and os.environ.get("FAKE_LOG"):
    sys.stdout.write(open(os.environ["FAKE_LOG"]).read())
    sys.stdout.flush()
if mode == "hang":
    if rank == 1:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open(os.path.join(out, "grandchild.pid"), "w").write(str(child.pid))
    print(f"[p2p-probe] rank {rank}: size 8192 B capture", flush=True)
    time.sleep(600)
if mode == "fail":
    if rank == 1:
        print("NCCL WARN Cuda failure 'peer access is not supported'", flush=True)
        sys.exit(7)
    time.sleep(600)
if mode == "noresult":
    sys.exit(0)
if rank == 0:
    rows = [{"bytes": b, "time_us": 10.0 + b / 150e3, "rank_time_us": 10.0} for b in spec["sizes"]]
    wrong = int(os.environ.get("FAKE_WRONG", "0"))
    checks = [{"bytes": b, "graph": g, "wrong": wrong, "first_wrong": None}
              for g in (False, True) for b in spec["check_sizes"]]
    json.dump({"rows": rows, "checks": checks, "world_size": 2, "graph": spec["graph"], "iters": spec["iters"],
               "warmup": spec["warmup"], "graph_launches": spec["graph_launches"], "torch_version": "fake",
               "nccl_version": "2.28.9", "device_names": ["fake", "fake"]}, open(spec["out"], "w"))
'''


@pytest.fixture
def fake_worker(tmp_path):
    path = tmp_path / "fake_worker.py"
    path.write_text(FAKE_WORKER)
    return [sys.executable, str(path)]


CFG = ProbeConfig(sizes=(8192, 128 * 1024**2), timeout_s=20.0)


def test_busbw_formula_is_nccl_tests():
    assert busbw_factor("all_reduce", 2) == 1.0
    assert busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert busbw_factor("all_gather", 4) == pytest.approx(0.75)
    assert algbw_gbs(128 * 1024**2, 469.3) == pytest.approx(286.0, rel=1e-3)  # decimal GB/s
    row = Row.from_time(8192, 10.2, 8)
    assert row.algbw_gbs == pytest.approx(0.803, rel=1e-3) and row.busbw_gbs == pytest.approx(row.algbw_gbs * 1.75)


def test_run_parses_result_env_and_proof(tmp_path, fake_worker):
    pytest.importorskip("pytest_p2p.probes.transport")
    rig_env = {"FAKE_LOG": str(FIXTURES / "h200x2_nccl-2.28.9_p2p_on.log"), "NCCL_SOCKET_IFNAME": "lo"}
    out = tmp_path / "probes" / "gpu2-gpu5" / "p2p_on"
    res = run_allreduce((2, 5), PRESETS["p2p_on"], CFG, rig_env, out, worker=fake_worker)
    assert [r.bytes for r in res.rows] == [8192, 128 * 1024**2]
    big = res.row(128 * 1024**2)
    assert big is not None and big.busbw_gbs == pytest.approx(algbw_gbs(big.bytes, big.time_us))
    assert res.correct and len(res.checks) == 2 * 2
    assert res.proof.transport == "P2P/CUMEM" and res.proof.satisfies("P2P/CUMEM")[0]
    for rank in (0, 1):
        env = json.loads((out / f"env_rank{rank}.json").read_text())
        assert env["CUDA_VISIBLE_DEVICES"] == "2,5" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_DEBUG"] == "INFO"
        assert env["NCCL_P2P_DISABLE"] == "0" and env["NCCL_CUMEM_ENABLE"] == "1"
        assert env["NCCL_SOCKET_IFNAME"] == "lo"
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "2")
    written = json.loads((out / "allreduce.json").read_text())
    assert written["transport"] == "P2P/CUMEM" and written["pair"] == [2, 5] and written["arm"] == "p2p_on"
    assert json.loads((out / "transport_proof.json").read_text())["transport"] == "P2P/CUMEM"
    assert "via P2P/CUMEM" in (out / "nccl.log").read_text()
    back = AllReduceResult.from_dict(written, out / "nccl.log", "allreduce.json")
    assert back.rows == res.rows and back.correct


def test_wrong_values_make_the_result_incorrect(tmp_path, fake_worker):
    res = run_allreduce((0, 1), PRESETS["p2p_off"], CFG, {"FAKE_WRONG": "3"}, tmp_path, worker=fake_worker)
    assert not res.correct


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_hang_kills_the_process_groups_and_names_arm_pair_and_last_line(tmp_path, fake_worker):
    cfg = replace(CFG, timeout_s=2.0)
    t0 = time.monotonic()
    with pytest.raises(ProbeError) as info:
        run_allreduce((0, 1), PRESETS["ipc"], cfg, {"FAKE_MODE": "hang"}, tmp_path, worker=fake_worker)
    assert time.monotonic() - t0 < 15
    msg = str(info.value)
    assert "arm ipc" in msg and "gpu0-gpu1" in msg and "timed out after 2 s" in msg
    assert "size 8192 B capture" in msg
    pid = int((tmp_path / "grandchild.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the rank's child survived the process-group kill"
    assert "[fake] rank 0 up" in (tmp_path / "nccl.log").read_text()  # logs kept for the post-mortem


def test_a_dying_rank_fails_fast_and_its_peer_is_killed(tmp_path, fake_worker):
    t0 = time.monotonic()
    with pytest.raises(ProbeError) as info:
        run_allreduce((0, 1), PRESETS["p2p_on"], CFG, {"FAKE_MODE": "fail"}, tmp_path, worker=fake_worker)
    assert time.monotonic() - t0 < 19  # did not wait for the 20 s timeout (the bound is that, not this box's speed)
    msg = str(info.value)
    assert "rank 1 exited with status 7" in msg and "peer access is not supported" in msg and "p2p_on" in msg


def test_workers_without_a_result_are_an_error(tmp_path, fake_worker):
    with pytest.raises(ProbeError, match="without a readable result"):
        run_allreduce((0, 1), PRESETS["p2p_on"], CFG, {"FAKE_MODE": "noresult"}, tmp_path, worker=fake_worker)


def test_replayed_result_errors_name_the_file():
    with pytest.raises(ProbeError, match="x.json: unreadable"):
        AllReduceResult.from_dict({"schema": 1, "probe": "allreduce", "pair": [0]}, None, "x.json")


# -- the P2P copy launcher and the nccl-tests runner, with fakes ----------------------------------
FAKE_COPY = r'''
import json, os, sys
spec = json.load(open(sys.argv[1]))
assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,3", os.environ["CUDA_VISIBLE_DEVICES"]
mode = {"unidir_gbs": {"0->1": 50.0, "1->0": 40.0}, "bidir_gbs": 80.0, "latency_us": {"0->1": 2.0, "1->0": 3.0},
        "latency_timing": "cuda-graph"}
json.dump({"bytes": spec["bytes"], "reps": spec["reps"], "can_access_peer": {"0->1": True, "1->0": True},
           "modes": {"peer": mode, "host_staged": dict(mode, bidir_gbs=20.0)}, "torch_version": "fake"},
          open(spec["out"], "w"))
'''


def test_copy_probe_result_and_file(tmp_path):
    from pytest_p2p.probes.p2pcopy import P2PCopyResult, run_p2p_copy

    worker = tmp_path / "copy.py"
    worker.write_text(FAKE_COPY)
    res = run_p2p_copy((0, 3), ProbeConfig(copy_bytes=1 << 20), tmp_path / "out", worker=[sys.executable, str(worker)])
    assert res.peer_access and res.unidir_gbs("peer") == 40.0 and res.latency_us("peer") == 3.0
    assert res.meta == {"reps": 20, "torch_version": "fake"}
    written = json.loads((tmp_path / "out" / "p2pcopy.json").read_text())
    assert P2PCopyResult.from_dict(written, "p2pcopy.json").modes == res.modes
    with pytest.raises(ProbeError, match="bad.json: unreadable P2P copy"):
        P2PCopyResult.from_dict({"schema": 1, "probe": "p2pcopy", "modes": {}}, "bad.json")
    worker.write_text("import json, sys; json.dump([], open(json.load(open(sys.argv[1]))['out'], 'w'))")
    with pytest.raises(ProbeError, match="no readable result .*expected a JSON object, got list"):  # was AttributeError
        run_p2p_copy((0, 3), ProbeConfig(), tmp_path / "out2", worker=[sys.executable, str(worker)])


def test_nccl_tests_runner_single_process(tmp_path):
    pytest.importorskip("pytest_p2p.probes.nccltests")
    from pytest_p2p.probes.nccltests_runner import run_nccl_tests

    table = FIXTURES / "synth_nccl-tests-2.17_all_reduce_perf.txt"
    fake = tmp_path / "all_reduce_perf"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\necho $NCCL_P2P_DISABLE $CUDA_VISIBLE_DEVICES "
                    f"> {tmp_path}/env\ncat {table}\n")
    fake.chmod(0o755)
    got = run_nccl_tests((0, 1), PRESETS["p2p_off"], None, tmp_path / "out", binary=str(fake))
    assert got is not None and not got["mpi"] and "direct pointer" in got["transport_note"]
    assert got["parsed"]["rows"], "parser returned no rows"
    assert (tmp_path / "args").read_text().split()[-2:] == ["-g", "2"]
    assert (tmp_path / "env").read_text().split() == ["1", "0,1"]
    from pytest_p2p.probes.nccltests_runner import find_all_reduce_perf

    assert find_all_reduce_perf({"NCCL_TESTS_BIN": str(tmp_path)}) == str(fake)
    assert find_all_reduce_perf({"PATH": str(tmp_path)}) == str(fake)
    assert find_all_reduce_perf({"PATH": str(tmp_path / "out")}) is None


def test_nccl_tests_runner_failure_names_the_arm(tmp_path):
    pytest.importorskip("pytest_p2p.probes.nccltests")
    from pytest_p2p.probes.nccltests_runner import run_nccl_tests

    fake = tmp_path / "all_reduce_perf"
    fake.write_text("#!/bin/sh\necho 'NCCL failure common.cu:1 unhandled system error'\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(ProbeError, match="arm socket.*status 3.*unhandled system error"):
        run_nccl_tests((0, 1), PRESETS["socket"], None, tmp_path, binary=str(fake))


@pytest.mark.parametrize("launcher", ["ranks", "nccl-tests"])
def test_signal_landing_inside_popen_still_kills_the_child(tmp_path, monkeypatch, launcher):
    """SIGTERM while Popen starts a rank or nccl-tests: the interrupt surfaces and the child is killed."""
    import signal
    import subprocess
    import threading

    from pytest_p2p import signals
    from pytest_p2p.probes.allreduce import run_ranks
    from pytest_p2p.probes.nccltests_runner import run_nccl_tests

    started = []
    real = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        proc = real(*args, **kwargs)
        if str(sleeper) in args[0]:  # the child under test, not another one started meanwhile
            started.append(proc)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        return proc

    sleeper = tmp_path / "sleeper"
    sleeper.write_text("#!/bin/sh\nexec sleep 60\n")
    sleeper.chmod(0o755)
    monkeypatch.setattr(subprocess, "Popen", popen_then_signal)
    signals.reset()
    try:
        with signals.terminate_as_interrupt(), pytest.raises(KeyboardInterrupt):
            if launcher == "ranks":
                run_ranks([[str(sleeper)]], [dict(os.environ)], [tmp_path / "rank0.log"], 30, "probe")
            else:
                run_nccl_tests((0, 1), PRESETS["p2p_on"], None, tmp_path / "out", binary=str(sleeper))
    finally:
        signals.reset()
    (proc,) = started
    assert proc.wait(timeout=10) in (-signal.SIGTERM, -signal.SIGKILL)  # stopped, not left sleeping for 60 s
