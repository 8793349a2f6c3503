"""Issue 27 on a local Ray cluster of two nodes on one host (``ray.cluster_utils.Cluster``), no GPU.

Each node carries the custom resource ``p2p_host:<rig host>``, as two ``ray start`` on one machine
would. Evidence tasks read the node's recorded sysfs tree; the rank actors run a stand-in worker that
replays a recorded rank log (tests/fake_multinode_worker.py). The cluster starts once per module.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_p2p import signals
from pytest_p2p.errors import ProbeError
from pytest_p2p.evidence.nodespec import FAIL, PASS, NodesSpec, judge_node
from pytest_p2p.plugin.rig import load_rig
from pytest_p2p.probes.arms import PRESETS

ray = pytest.importorskip("ray", reason="Ray is the [multinode] extra: pip install 'pytest-p2p[multinode]'")
pytestmark = pytest.mark.multinode

ROOT = Path(__file__).resolve().parents[1]
RIG = ROOT / "fixtures" / "rigs" / "seed004-trinity-2node.yaml"
FAKE = [sys.executable, str(Path(__file__).with_name("fake_multinode_worker.py"))]
PLACEMENT = ["trinity-a", "trinity-a", "trinity-b"]  # the seed's three pipeline stages


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    from ray.cluster_utils import Cluster

    with signals.kept():  # Ray's SIGTERM handlers (head node, ray.init) would outlive this module in the worker
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"p2p_host:trinity-a": 1},
                                                          "include_dashboard": False})
        c.add_node(num_cpus=1, resources={"p2p_host:trinity-b": 1})
        ray.init(address=c.address, log_to_driver=False)
    try:
        yield c
    finally:
        with signals.kept():
            ray.shutdown()
            c.shutdown()


@pytest.fixture(scope="module")
def nodes() -> NodesSpec:
    spec = load_rig(RIG).nodes
    assert spec is not None
    return spec


def test_hosts_match_ray_nodes_and_evidence_is_read_on_each(cluster: object, nodes: NodesSpec) -> None:
    from pytest_p2p.probes.multinode import cluster_nodes, gather_evidence, match_hosts

    placed = match_hosts(nodes, cluster_nodes())
    assert placed["trinity-a"].node_id != placed["trinity-b"].node_id
    reports = gather_evidence(nodes, placed, RIG.parent)
    assert {h: r.ran_on for h, r in reports.items()} == {h: n.node_id for h, n in placed.items()}
    for host, rep in reports.items():
        assert rep.evidence.root.endswith(host)
        assert all(f.outcome == PASS for f in judge_node(rep.evidence, nodes.host(host)))


def _env(scenario: str, **extra: str) -> dict[str, str]:
    """The rig env reaches every rank's process (the actors' own environment was fixed when Ray started)."""
    return {"NCCL_IB_HCA": "mlx5_0", "FAKE_MN_LOGS": str(ROOT / "fixtures" / "logs" / "multinode" / scenario), **extra}


def test_allreduce_ranks_placed_per_rig_host_and_gdr_proved(cluster: object, nodes: NodesSpec,
                                                            tmp_path: Path) -> None:
    from pytest_p2p.probes.multinode import run_allreduce_ray

    env = _env("gdr", FAKE_MN_TIME_US="35000")  # 256 MiB in 35 ms by 3 ranks: busbw 10.2 GB/s
    res = run_allreduce_ray(nodes, PLACEMENT, PRESETS["gdr"], env, tmp_path,
                            expect="NET/IB/…/GDRDMA", sizes=(1 << 20, 1 << 28), gpus_per_rank=0, strategy="SPREAD",
                            worker=FAKE, timeout_s=60)
    assert res.proof is not None and res.proof.outcome == PASS, res.proof
    assert [r.host for r in res.ranks] == PLACEMENT and len({r.node_id for r in res.ranks}) == 2
    first = (tmp_path / "rank2.log").read_text().splitlines()[0]
    assert "rank 2 on trinity-b" in first and "NCCL_NET_GDR_LEVEL=5" in first and "NCCL_DEBUG=INFO" in first
    big = res.largest()
    assert big is not None and big.bytes == 1 << 28 and res.correct
    assert big.busbw_gbs == pytest.approx((1 << 28) / 35e-3 / 1e9 * 4 / 3)
    assert (tmp_path / "crossing_proof.json").exists() and (tmp_path / "multinode.json").exists()


def test_rank_on_node_without_peermem_fails_naming_it(cluster: object, nodes: NodesSpec, tmp_path: Path) -> None:
    from pytest_p2p.probes.multinode import run_allreduce_ray

    res = run_allreduce_ray(nodes, PLACEMENT, PRESETS["gdr"], _env("rank2_no_peermem"), tmp_path, gpus_per_rank=0,
                            strategy="SPREAD", worker=FAKE, timeout_s=60)
    assert res.proof is not None and res.proof.outcome == FAIL
    assert [(r.rank, r.node) for r in res.proof.failed()] == [(2, "trinity-b")]


def test_strict_spread_cannot_put_two_ranks_on_one_node(cluster: object, nodes: NodesSpec, tmp_path: Path) -> None:
    from pytest_p2p.probes.multinode import run_allreduce_ray

    with pytest.raises(ProbeError, match="could not place 3 bundles .* STRICT_SPREAD"):
        run_allreduce_ray(nodes, PLACEMENT, PRESETS["gdr"], None, tmp_path, gpus_per_rank=0, worker=FAKE,
                          timeout_s=3)


def test_a_failing_rank_is_named_with_its_host(cluster: object, nodes: NodesSpec, tmp_path: Path) -> None:
    from pytest_p2p.probes.multinode import run_allreduce_ray

    with pytest.raises(ProbeError, match="rank 1 on trinity-a exited with status 3"):
        run_allreduce_ray(nodes, PLACEMENT, PRESETS["gdr"], _env("gdr", FAKE_MN_EXIT="3"), tmp_path, gpus_per_rank=0,
                          strategy="SPREAD", worker=FAKE, timeout_s=60)


def test_attaching_to_ray_leaves_the_process_signal_handlers_alone(cluster: object) -> None:
    """ray.init installs a SIGTERM handler that exits the process; a p2p session must still unwind on SIGTERM."""
    import signal

    from pytest_p2p.probes.multinode import connect

    before = signal.getsignal(signal.SIGTERM)
    connect(None)  # already attached by the fixture: a no-op, and the fixture kept the handlers
    assert signal.getsignal(signal.SIGTERM) is before
    assert "sigterm_handler" not in getattr(before, "__qualname__", "")
