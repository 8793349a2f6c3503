"""benchmarks/multinode_vllm_gpu.py (issue 27 item 4) without a GPU: its pure parts, and the whole script against
the SIMULATED stand-in on a real two-node Ray cluster of this host (marked ``multinode``; skipped without Ray)."""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_p2p.probes.netproof import prove_crossing, split_by_process
from pytest_p2p.serve.multinode import ray_server_env
from pytest_p2p.serve.standin_ray import HOSTS_ENV, ray_worker_lines

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "multinode_vllm_gpu.py"


@pytest.fixture(scope="module")
def mv() -> SimpleNamespace:
    """The script's functions (run_path keeps it in sys.modules while it runs: its dataclasses look it up there)."""
    return SimpleNamespace(**runpy.run_path(str(SCRIPT), run_name="multinode_vllm_gpu_under_test"))


def _worker_log(hosts: str, env: dict[str, str] | None = None, pid: int = 500) -> str:
    """Two Ray workers' NCCL lines as a Ray-executor vllm serve prints them (the stand-in's generator)."""
    return "\n".join(ray_worker_lines(2, {HOSTS_ENV: hosts, **(env or {})}, pid, "2.28.9")) + "\n"


# ----------------------------------------------------------------------------- arguments


def test_gpus_come_from_multinode_gpus_and_out_from_OUT(mv: SimpleNamespace, tmp_path: Path) -> None:
    a = mv.parse_args([], {"MULTINODE_GPUS": "2,3", "OUT": str(tmp_path)})
    assert a.gpus == (2, 3) and a.out == tmp_path / "multinode_vllm"
    assert a.arms == ("socket", "p2p_on") and a.executor == "v2" and not a.standin
    b = mv.parse_args(["--gpus", "0,1", "--arms", "socket", "--out", "x", "--executor", "v1"],
                      {"MULTINODE_GPUS": "2,3"})
    assert (b.gpus, b.arms, b.out, b.executor) == ((0, 1), ("socket",), Path("x"), "v1")
    assert a.visible == "auto" and mv.parse_args(["--visible", "peer"], {}).visible == "peer"


@pytest.mark.parametrize(("argv", "env", "named"), [
    ([], {"MULTINODE_GPUS": "2"}, "MULTINODE_GPUS"),
    ([], {"MULTINODE_GPUS": "1,1"}, "MULTINODE_GPUS"),
    ([], {"MULTINODE_GPUS": "a,b"}, "MULTINODE_GPUS"),
    (["--arms", "socket,nvlink"], {}, "nvlink"),
    (["--arms", ","], {}, "none given"),
    (["--budget", "100", "--startup-timeout", "120"], {}, "--budget"),
    (["--concurrency", "0"], {}, "--concurrency"),
])
def test_a_bad_argument_exits_2_naming_it(mv: SimpleNamespace, argv: list[str], env: dict[str, str], named: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        mv.parse_args(argv, env)
    assert exc.value.code == 2
    assert named in capsys.readouterr().err


# ----------------------------------------------------------------------------- diagnosis


@pytest.mark.parametrize(("text", "says"), [
    ("RuntimeError: Every node should have a unique IP address. Got 2 nodes with node ids [...] and 1 unique IP",
     "VLLM_HOST_IP"),
    ("h:12:12 [0] init.cc:1000 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000",
     "one CUDA_VISIBLE_DEVICES each"),
    ("RuntimeError: Physical device 3 for logical device 0 is not visible in CUDA_VISIBLE_DEVICES=2",
     "lacks the GPU Ray assigned"),
    ("ValueError: Failed to import Ray: No module named 'ray'.Please install Ray", "cannot import Ray"),
    ("/usr/bin/python3: No module named vllm", "cannot import vLLM"),
    ("WARNING Waiting for creating a placement group of specs for 10 seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}]",
     "cannot place"),
    ("Failed to connect to GCS at address 10.0.0.1:6379 within 5 seconds", "cannot reach the Ray cluster"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "out of GPU memory"),
    ("h:1:1 [0] misc/socket.cc:50 NCCL WARN socketConnect: Connect to 127.0.0.1<1234> failed",
     "NCCL could not connect"),
    ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task", "a Ray worker died"),
    ("ServerError: arm socket: server not ready in 180 s", "not ready in time"),
])
def test_known_failures_get_one_line_saying_what_to_do(mv: SimpleNamespace, text: str, says: str) -> None:
    assert says in mv.diagnose(text)


def test_an_unknown_failure_gets_no_made_up_diagnosis(mv: SimpleNamespace) -> None:
    assert mv.diagnose("INFO all good\nsomething else went wrong") is None


def test_the_most_specific_diagnosis_wins_over_the_generic_nccl_warn(mv: SimpleNamespace) -> None:
    text = "h:1:1 [0] NCCL WARN socketConnect failed\nh:1:1 [0] NCCL WARN Duplicate GPU detected : rank 1 and rank 0"
    assert "one CUDA_VISIBLE_DEVICES each" in mv.diagnose(text)


# ----------------------------------------------------------------------------- placement and proof


def test_the_actor_table_places_each_worker_on_its_ray_node(mv: SimpleNamespace) -> None:
    host = "gpubox"
    logs = split_by_process(_worker_log(f"{host},{host}"), "server.log")  # real NCCL: one host for both workers
    pids = mv.process_pids(logs)
    assert len(pids) == 2 and None not in pids
    placed, how = mv.placed(logs, {pids[0]: "node-b", pids[1]: "node-a"}, {})
    assert [p.node for p in placed] == ["node-b", "node-a"] and all("Ray actor table" in h for h in how)
    # without the table, each raylet's one GPU places them (the stand-in's nvmlDev 0 and 1)
    placed, how = mv.placed(logs, {}, {0: "node-a", 1: "node-b"})
    assert [p.node for p in placed] == ["node-a", "node-b"] and all("owning its GPU" in h for h in how)
    # and one-host P2P is judged as a crossing only once placed: the plugin's by-host proof cannot tell
    assert prove_crossing(logs, "P2P", world_size=2).outcome != "pass"
    assert prove_crossing(placed, "P2P", world_size=2).outcome == "pass"


def test_workers_on_one_gpu_are_not_placed_by_gpu_and_fail_the_placement(mv: SimpleNamespace) -> None:
    logs = split_by_process(_worker_log("gpubox,gpubox").replace("nvmlDev 1", "nvmlDev 0"), "server.log")
    placed, how = mv.placed(logs, {}, {0: "node-a", 1: "node-b"})
    assert [p.node for p in placed] == ["gpubox", "gpubox"] and all("NCCL host prefix" in h for h in how)
    problems = mv.placement_problems(placed, (0, 1), 2)
    assert any("did not cross Ray nodes" in p for p in problems)
    assert any("expected one each of [0, 1]" in p for p in problems)


def test_placement_needs_every_worker_and_the_stand_in_skips_the_gpu_check(mv: SimpleNamespace) -> None:
    logs = split_by_process(_worker_log("node-a,node-b"), "server.log")  # stand-in: nvmlDev 0 on both "machines"
    assert mv.placement_problems(logs, (0, 1), 2, check_gpus=False) == []
    assert mv.placement_problems(logs, (0, 1), 2) != []
    assert "1 worker log(s)" in mv.placement_problems(logs[:1], (0, 1), 2)[0]


def _result(mv: SimpleNamespace, expect: str, hosts: str, env: dict[str, str], completed: int = 16) -> tuple[
        object, object, object]:
    text = _worker_log(hosts, env)
    logs = split_by_process(text, "server.log")
    proof = prove_crossing(logs, expect, world_size=2)
    placed, _ = mv.placed(logs, {}, {0: "node-a", 1: "node-b"})
    res = mv.ArmResult("arm", expect, load={"completed": completed, "failed": 16 - completed})
    return res, proof, prove_crossing(placed, expect, world_size=2)


def test_an_arm_passes_only_with_every_request_and_every_rank_proven(mv: SimpleNamespace) -> None:
    socket_env = {"NCCL_NET": "Socket", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    res, proof, placed = _result(mv, "NET/Socket", "node-a,node-b", socket_env)
    assert mv.arm_problems(res, proof, placed, 16) == []
    res, proof, placed = _result(mv, "NET/Socket", "node-a,node-b", socket_env, completed=15)
    assert mv.arm_problems(res, proof, placed, 16) == ["load: 15 of 16 requests completed, 1 failed"]
    # an arm that meant the network but got InfiniBand fails, naming the rank
    res, proof, placed = _result(mv, "NET/Socket", "node-a,node-b", {})
    (problem,) = mv.arm_problems(res, proof, placed, 16)
    assert problem.startswith("transport fail (expect NET/Socket)") and "rank 0 on node-a fell back" in problem
    # P2P is judged on the placed logs
    res, proof, placed = _result(mv, "P2P", "h,h", {})
    assert mv.arm_problems(res, proof, placed, 16) == []
    res.leftovers = ["pid 7 (raylet)"]
    assert mv.arm_problems(res, proof, placed, 16) == ["left behind: pid 7 (raylet)"]


def test_the_summary_is_json_and_the_last_line_says_ok_or_every_problem(mv: SimpleNamespace, tmp_path: Path) -> None:
    args = mv.parse_args(["--out", str(tmp_path)], {})
    res = mv.ArmResult("socket", "NET/Socket", ready_s=1.5, load={"completed": 16}, problems=["x"])
    s = json.loads(json.dumps(mv.summary(args, [res], ["socket: x"], {"wall_s": 3.0})))
    assert s["ok"] is False and s["arms"][0]["arm"] == "socket" and s["wall_s"] == 3.0 and s["gpus"] == [0, 1]
    assert mv.final_line([]) == "MULTINODE_VLLM OK"
    assert mv.final_line(["socket: a\n  b", "p2p_on: c"]) == "MULTINODE_VLLM FAIL: socket: a b; p2p_on: c"


def test_the_driver_prints_every_workers_lines_plain() -> None:
    # Ray folds lines equal but for numbers ("[repeated 2x across cluster]": rank 1's NCCL lines gone) and
    # colours the (RayWorkerProc pid=...) prefix, which hides it from the per-process split
    env = ray_server_env("127.0.0.1:6379", {"NCCL_P2P_DISABLE": "1"})
    assert env["RAY_DEDUP_LOGS"] == "0" and env["RAY_COLOR_PREFIX"] == "0"
    coloured = "\x1b[36m(RayWorkerProc pid=11)\x1b[0m h:11:11 [0] NCCL INFO Using network Socket\n"
    assert len(split_by_process(coloured + coloured.replace("11", "12"), "s")) == 1  # why the colour must go


def test_a_step_past_its_limit_raises_in_the_step(mv: SimpleNamespace) -> None:
    old = signal.getsignal(signal.SIGALRM)
    hard: list[str] = []
    steps = mv.Steps(600.0, hard.append)
    try:
        with pytest.raises(mv.StepTimeout, match="step 'hang' timed out"), steps.step("hang", 1.0):
            time.sleep(30)
        assert hard == []
    finally:
        steps.stop()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------- the whole script, stand-in


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, dict[str, object]]:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--standin", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=400, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    return proc.returncode, proc.stdout, json.loads((out / "summary.json").read_text())


@pytest.mark.multinode
def test_the_script_runs_end_to_end_on_a_two_node_ray_cluster_with_the_stand_in(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is the [multinode] extra")
    rc, out, s = _run(tmp_path)
    assert out.strip().splitlines()[-1] == "MULTINODE_VLLM OK", out[-3000:]
    assert rc == 0 and s["ok"] is True and s["simulated"] is True
    assert "rank 1 on node-b: pass: rank 1 on node-b: 4 crossing connection(s) all NET/Socket" in out
    assert "rank 1 on node-b: pass: rank 1 on node-b: 2 crossing connection(s) all P2P/CUMEM" in out
    arms = {a["arm"]: a for a in s["arms"]}  # type: ignore[union-attr,index]
    assert arms["socket"]["load"]["completed"] == 16 and arms["p2p_on"]["leftovers"] == []


@pytest.mark.multinode
def test_a_server_that_never_gets_ready_fails_with_a_diagnosis_and_leaves_nothing(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is the [multinode] extra")
    rc, out, s = _run(tmp_path, "--arms", "socket", "--startup-timeout", "3", "--budget", "120",
                      env={"PYTEST_P2P_STANDIN_STARTUP_DELAY_S": "60"})
    last = out.strip().splitlines()[-1]
    assert rc == 1 and last.startswith("MULTINODE_VLLM FAIL: socket: ServerError"), out[-3000:]
    assert "not ready in time" in last
    (arm,) = s["arms"]  # type: ignore[misc]
    assert arm["leftovers"] == [] and "leftovers: none" in out


@pytest.mark.multinode
@pytest.mark.parametrize(("visible", "envs"), [("own", ["2", "3"]), ("peer", ["2,3", "3,2"])])
def test_each_raylet_gives_its_worker_its_own_gpu_and_the_actor_table_places_it(
        mv: SimpleNamespace, visible: str, envs: list[str]) -> None:
    # vLLM's workers: num_gpus=1 in a PACK placement group, Ray leaving CUDA_VISIBLE_DEVICES as the raylet's
    ray = pytest.importorskip("ray", reason="Ray is the [multinode] extra")
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from pytest_p2p import signals

    @ray.remote(num_gpus=1, num_cpus=0, runtime_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}})
    class RayWorkerProc:
        def info(self) -> tuple[int, list[str], str | None]:
            return os.getpid(), ray.get_runtime_context().get_accelerator_ids()["GPU"], \
                os.environ.get("CUDA_VISIBLE_DEVICES")

    with signals.kept():
        nodes = mv.RayNodes((2, 3))
        try:
            nodes.start({}, [{}, {}], visible)
            pg = ray.util.placement_group([{"GPU": 1}, {"GPU": 1}], strategy="PACK")
            ray.get(pg.ready(), timeout=60)
            workers = [RayWorkerProc.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=i)).remote() for i in range(2)]
            infos = ray.get([w.info.remote() for w in workers], timeout=60)
            placed = nodes.workers()
        finally:
            nodes.shutdown()
    by_gpu = {ids[0]: (pid, env) for pid, ids, env in infos}
    assert sorted(by_gpu) == ["2", "3"]  # one GPU each, never both on one
    assert [by_gpu["2"][1], by_gpu["3"][1]] == envs
    assert {placed[by_gpu["2"][0]], placed[by_gpu["3"][0]]} == {"node-a", "node-b"}
    assert placed[by_gpu["2"][0]] == "node-a"  # GPU 2's raylet is node-a
    assert mv.leftovers(nodes.seen, [], set()) == []


def test_past_the_budget_and_its_grace_the_watchdog_takes_over(mv: SimpleNamespace) -> None:
    # the hard path for a step stuck where SIGALRM cannot reach (a C call): kill what was recorded, then exit
    import threading

    old = signal.getsignal(signal.SIGALRM)
    called = threading.Event()
    names: list[str] = []
    steps = mv.Steps(0.5, lambda name: (names.append(name), called.set()), grace_s=0.0)
    try:
        assert called.wait(60)
    finally:
        steps.stop()
        signal.signal(signal.SIGALRM, old)
    assert names[0] == "start"
