"""benchmarks/multinode_pytest_gpu.py (issue 27 end to end under ``pytest -m p2p``) without a GPU or Ray: the rig it
writes is one the plugin's own loader accepts, its verdict on a recorded junit file, and its teardown on every exit.
The whole script on two real raylets: ``python benchmarks/multinode_pytest_gpu.py --fake`` (docs/multinode.md).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path
from types import ModuleType

import pytest

from pytest_p2p.evidence.nodespec import parse_nodes
from pytest_p2p.plugin.rig import load_rig

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "multinode_pytest_gpu.py"
JUNIT = ROOT / "fixtures" / "junit" / "multinode_pytest_fake.xml"  # written by the script's --fake run


@pytest.fixture(scope="module")
def mp() -> ModuleType:
    spec = importlib.util.spec_from_file_location("multinode_pytest_gpu_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------- the rig


def test_the_gpu_rig_loads_with_the_plugins_own_loader(mp: ModuleType, tmp_path: Path) -> None:
    rig_path = tmp_path / "rig.yaml"
    mp.write_rig(rig_path, mp.rig_dict(["00000000:19:00.0", "00000000:3B:00.0"], "/m/tiny", fake=False))
    rig = load_rig(rig_path)
    assert rig.nodes is not None
    assert [h.name for h in rig.nodes.hosts] == ["node-a", "node-b"]
    assert [h.gpus for h in rig.nodes.hosts] == [("0000:19:00.0",), ("0000:3b:00.0",)]  # nvidia-smi's form, normalised
    assert all(not h.nics and h.nvidia_peermem is None for h in rig.nodes.hosts)  # nothing loopback cannot show
    (crossing,) = rig.nodes.crossings
    assert crossing.between == ("node-a", "node-b") and dict(crossing.transport) == {"socket": "NET/Socket"}
    assert crossing.busbw_min_line_rate is None  # lo has no line rate: judging one would be against another NIC
    assert [(s.host, s.gpu) for s in rig.nodes.stages] == [("node-a", "0000:19:00.0"), ("node-b", "0000:3b:00.0")]
    assert "socket" in rig.arms and rig.server.model == "/m/tiny"  # p2p_on/p2p_off are every rig's
    assert rig.server.args["tensor-parallel-size"] == 2 and rig.server.args["load-format"] == "dummy"
    assert rig.server.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and rig.server.env["NCCL_NVLS_ENABLE"] == "0"
    assert rig.env["NCCL_SOCKET_IFNAME"] == "lo"


def test_the_fake_rig_reads_the_recorded_trees(mp: ModuleType, tmp_path: Path) -> None:
    sysfs = {h: str(ROOT / "fixtures" / "sysfs" / tree) for h, (tree, _) in mp.FAKE_TREES.items()}
    buses = [mp.FAKE_TREES[h][1] for h in mp.HOSTS]
    data = mp.rig_dict(buses, "tiny-simulated", fake=True, sysfs=sysfs)
    spec = parse_nodes(data["nodes"], "rig.yaml")
    assert spec is not None and [h.sysfs for h in spec.hosts] == [sysfs["node-a"], sysfs["node-b"]]
    mp.write_rig(tmp_path / "rig.yaml", data)
    rig = load_rig(tmp_path / "rig.yaml")
    assert rig.server.simulated and rig.server.env["PYTEST_P2P_STANDIN_RAY_HOSTS"] == "node-a,node-b"


def test_each_raylet_gets_its_gpu_and_the_socket_arm(mp: ModuleType) -> None:
    env = mp.raylet_env({"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1"}, 1, fake=False)
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["NCCL_SOCKET_IFNAME"] == "lo"
    for key, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
                       "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "RAY_DEDUP_LOGS": "0",
                       "RAY_COLOR_PREFIX": "0", "NCCL_DEBUG": "INFO"}.items():
        assert env[key] == value, key
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    fake = mp.raylet_env({"CUDA_VISIBLE_DEVICES": "0"}, 0, fake=True)
    assert "CUDA_VISIBLE_DEVICES" not in fake and Path(fake["FAKE_MN_LOGS"]).is_dir()


def test_the_pytest_command_is_a_users_live_run_and_the_fake_one_is_not(mp: ModuleType, tmp_path: Path) -> None:
    args = mp.parse_args(["--out", str(tmp_path), "--port", "6390"], environ={})
    cmd = mp.pytest_cmd(args, tmp_path / "rig.yaml", "127.0.0.1:6390")
    assert cmd[1:8] == ["-m", "pytest", "-m", "p2p", "--pyargs", "pytest_p2p", "--p2p-live"]
    joined = " ".join(cmd)
    assert f"--p2p-rig {tmp_path / 'rig.yaml'} --p2p-ray-address 127.0.0.1:6390" in joined
    assert "--p2p-campaign off" in joined and f"--junitxml {tmp_path / 'junit.xml'}" in joined
    fake = mp.parse_args(["--out", str(tmp_path), "--fake"], environ={})
    assert "--p2p-live" not in mp.pytest_cmd(fake, tmp_path / "rig.yaml", "127.0.0.1:1")  # no GPU: the demo session
    with pytest.raises(SystemExit):
        mp.parse_args(["--gpus", "1,1"], environ={})


# ----------------------------------------------------------------------------- the verdict


def test_the_recorded_fake_run_is_ok(mp: ModuleType) -> None:
    outcomes = mp.parse_junit(JUNIT)
    by_test = {o.test.rsplit("::", 1)[1]: o for o in outcomes}
    assert by_test["test_crossing_transport"].outcome == "passed"
    assert by_test["test_server_across_nodes"].outcome == "passed"
    assert by_test["test_busbw_line_rate"] == mp.Outcome("checks/test_multinode.py::test_busbw_line_rate", "skipped",
                                                         "no crossing sets busbw_min_line_rate")
    assert mp.judge(outcomes, [], 0) == []


def _edited(tmp_path: Path, test: str, inner: str) -> Path:
    text = JUNIT.read_text()
    old = f'name="{test}" time="0.331" />' if test == "test_server_across_nodes" else None
    assert old is not None and old in text
    out = tmp_path / "junit.xml"
    out.write_text(text.replace(old, f'name="{test}" time="0.331">{inner}</testcase>'))
    return out


def test_a_failed_server_check_fails_the_run_naming_it(mp: ModuleType, tmp_path: Path) -> None:
    junit = _edited(tmp_path, "test_server_across_nodes",
                    '<failure message="arm socket: server did not become ready&#10;more">tb</failure>')
    problems = mp.judge(mp.parse_junit(junit), [], 1)
    assert problems == ["checks/test_multinode.py::test_server_across_nodes FAILED: arm socket: server did not "
                        "become ready"]


def test_a_skipped_required_check_or_a_leftover_fails_the_run(mp: ModuleType, tmp_path: Path) -> None:
    junit = _edited(tmp_path, "test_server_across_nodes", '<skipped type="pytest.skip" message="no server">x</skipped>')
    assert mp.judge(mp.parse_junit(junit), [], 0) == ["test_server_across_nodes SKIPPED: no server"]
    assert mp.judge(mp.parse_junit(JUNIT), ["pid 7 (raylet)"], 0) == ["left behind: pid 7 (raylet)"]
    assert mp.judge([], [], 4) == ["test_crossing_transport did not run", "test_server_across_nodes did not run",
                                   "no test outcome (pytest exit 4)"]


# ----------------------------------------------------------------------------- teardown on every exit


@pytest.mark.parametrize("how", ["raises", "sigterm"])
def test_the_cluster_is_torn_down_however_the_run_ends(mp: ModuleType, tmp_path: Path, how: str,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    stopped: list[bool] = []

    def run(args: object, cluster: object, on_pytest: object) -> tuple[int, str]:
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)  # as a CI runner cancelling the job
        raise RuntimeError("ray start failed")

    monkeypatch.setattr(mp, "run", run)
    monkeypatch.setattr(mp.RayCluster, "stop", lambda self, *, ray_stop: stopped.append(ray_stop))
    before = signal.getsignal(signal.SIGTERM)
    code = mp.main(["--fake", "--out", str(tmp_path)])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and stopped == [False]  # 'ray stop' (every Ray process of the user) never on --fake
    why = "Deadline: signal SIGTERM" if how == "sigterm" else "RuntimeError: ray start failed"
    assert out[-1].startswith(f"MULTINODE_PYTEST FAIL: {why}")
    assert signal.getsignal(signal.SIGTERM) == before  # the caller's handlers are back
    assert (tmp_path / "summary.json").exists()


# ----------------------------------------------------------------------------- the whole script, on a real Ray cluster


@pytest.mark.multinode
def test_the_plugin_runs_end_to_end_on_two_ray_start_raylets(tmp_path: Path) -> None:
    """Two ``ray start`` raylets, ``pytest -m p2p --pyargs pytest_p2p --p2p-ray-address``: the crossing probe
    (each rank the replaying worker, chosen through PYTEST_P2P_MULTINODE_WORKER) and the stand-in under Ray pass."""
    pytest.importorskip("ray", reason="Ray is the [multinode] extra")
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--fake", "--out", str(tmp_path), "--limit", "240"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    out = proc.stdout
    assert out.strip().splitlines()[-1] == "MULTINODE_PYTEST OK", out[-4000:] + proc.stderr[-2000:]
    assert "probe node-a~node-b socket (crossing_proof.json): pass: every crossing connection of 2 rank(s) is " \
           "NET/Socket" in out
    assert "server arm socket [SIMULATED: stand-in server]: pass: every crossing connection of 2 rank(s)" in out
    assert "leftovers: none" in out
    ranks = [(tmp_path / "results" / "multinode" / "node-a~node-b" / "socket" / f"rank{r}.log").read_text()
             for r in (0, 1)]
    # the fake worker ran each rank, on the node the rig names
    assert [f"[p2p-mn] rank {r} on {h}" in ranks[r] for r, h in enumerate(("node-a", "node-b"))] == [True, True]
