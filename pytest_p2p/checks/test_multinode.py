"""Built-in checks of a rig with ``nodes:``: each node's kernel evidence, each crossing's transport and line rate.

A single-host rig skips them with the reason. A rig with nodes attaches to Ray
(``--p2p-ray-address`` or ``RAY_ADDRESS``; Ray is imported only here), reads every node's
evidence in a task pinned to it, and runs the all-reduce probe per crossing and arm with
one rank per node (``STRICT_SPREAD``), proving the transport from every rank's log.
A rig whose every host names a recorded ``sysfs:`` tree and no cluster is named reads the
trees here (a replay: the output says so) and skips the probes.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_p2p.errors import P2PError
from pytest_p2p.evidence.nodes import NodeEvidence, read_node
from pytest_p2p.evidence.nodespec import FAIL, INCONCLUSIVE, Crossing, NodesSpec, judge_node, line_rate_gbps, sysfs_root
from pytest_p2p.options import RAY_ADDRESS, RESULTS, path_of, resolve
from pytest_p2p.probes.netproof import judge_line_rate
from pytest_p2p.util import normalize_bus_id

if TYPE_CHECKING:
    from pytest_p2p.plugin.session import P2PSession
    from pytest_p2p.probes.multinode import MultiNodeResult
    from pytest_p2p.probes.netproof import CrossingProof

pytestmark = pytest.mark.p2p
SIZES = (1 << 20, 1 << 28)  # the seed's bus bandwidth is judged on large messages (256 MiB and above)


@dataclass
class MultiNode:
    spec: NodesSpec
    rig_dir: Path
    evidence: dict[str, NodeEvidence]
    replay: bool
    address: str | None
    results: Path
    runs: dict[tuple[str, str], MultiNodeResult] = field(default_factory=dict)


@pytest.fixture(scope="session")
def p2p_multinode(p2p_session: P2PSession, pytestconfig: pytest.Config) -> MultiNode:
    """The rig's nodes and their evidence, read once per session (live through Ray, or recorded trees)."""
    spec = p2p_session.rig.nodes
    if spec is None:
        pytest.skip("single-host rig: no nodes: section (docs/multinode.md)")
    from pytest_p2p.probes.multinode import ray_address

    rig_dir = Path(p2p_session.rig.source).resolve().parent
    address = ray_address(resolve(pytestconfig, RAY_ADDRESS).value)
    results = path_of(pytestconfig, resolve(pytestconfig, RESULTS)) / "multinode"
    if address is None and all(h.sysfs for h in spec.hosts):
        ev = {h.name: read_node(sysfs_root(h, rig_dir), h.name) for h in spec.hosts}
        return MultiNode(spec, rig_dir, ev, True, None, results)
    from pytest_p2p.probes.multinode import cluster_nodes, connect, gather_evidence, match_hosts

    try:
        connect(address)
        reports = gather_evidence(spec, match_hosts(spec, cluster_nodes()), rig_dir)
    except P2PError as exc:
        pytest.fail(str(exc), pytrace=False)
    return MultiNode(spec, rig_dir, {h: r.evidence for h, r in reports.items()}, False, address, results)


def test_node_evidence(p2p_multinode: MultiNode) -> None:
    """Every node: NICs up at their rate, RDMA device and GID present, nvidia_peermem loaded, NIC<->GPU topology."""
    mn = p2p_multinode
    if mn.replay:
        print("replay: node evidence read from the rig's recorded sysfs trees, not from live nodes")
    findings = [f for h in mn.spec.hosts for f in judge_node(mn.evidence[h.name], h)]
    if not findings:  # nothing asked is nothing proven: never a pass
        pytest.skip("the rig expects nothing per node (nodes.hosts.<host>: gpus, nics, nvidia_peermem)")
    for f in findings:
        print(f"{f.outcome:12} {f.message}")
    failed = [f.message for f in findings if f.outcome == FAIL]
    if failed:
        pytest.fail("\n".join(failed), pytrace=False)
    unknown = [f.message for f in findings if f.outcome == INCONCLUSIVE]
    if unknown:
        pytest.skip("inconclusive: " + "; ".join(unknown))


def _run(mn: MultiNode, crossing: Crossing, arm_name: str, session: P2PSession) -> MultiNodeResult:
    key = (crossing.key, arm_name)
    if key not in mn.runs:
        if mn.replay:
            pytest.skip("replay of recorded node trees: no cluster to run the probe on (--p2p-ray-address)")
        from pytest_p2p.probes.multinode import run_allreduce_ray

        arm = session.rig.arms[arm_name]
        try:
            mn.runs[key] = run_allreduce_ray(mn.spec, list(crossing.between), arm, session.rig.env,
                                             mn.results / crossing.key / arm_name, sizes=SIZES,
                                             expect=crossing.transport[arm_name])
        except P2PError as exc:
            pytest.fail(str(exc), pytrace=False)
    return mn.runs[key]


def test_crossing_transport(p2p_multinode: MultiNode, p2p_session: P2PSession) -> None:
    """Per crossing and arm: every rank's NCCL log proves the expected transport, or the rank that fell back."""
    mn = p2p_multinode
    pairs = [(c, arm) for c in mn.spec.crossings for arm in c.transport]
    if not pairs:
        pytest.skip("no crossing names a transport per arm")
    judged = []
    for crossing, arm in pairs:
        proof = _run(mn, crossing, arm, p2p_session).proof
        assert proof is not None
        judged.append((f"{crossing.key} arm {arm}", proof))
    _conclude(judged)


def _conclude(judged: list[tuple[str, CrossingProof]]) -> None:
    """Print every proof; fail naming each that failed, else skip naming each that could not decide."""
    for what, proof in judged:
        print(f"{what}: {proof.outcome}: {proof.message}")
    failed = [f"{what}: {p.message}" for what, p in judged if p.outcome == FAIL]
    unknown = [f"{what}: {p.message}" for what, p in judged if p.outcome == INCONCLUSIVE]
    if failed:
        pytest.fail("\n".join(failed), pytrace=False)
    if unknown:
        pytest.skip("inconclusive: " + "; ".join(unknown))


def test_busbw_line_rate(p2p_multinode: MultiNode, p2p_session: P2PSession) -> None:
    """Per crossing with ``busbw_min_line_rate``: all-reduce bus bandwidth of its first arm as a share of line rate."""
    mn = p2p_multinode
    judged = [c for c in mn.spec.crossings if c.busbw_min_line_rate is not None and c.transport]
    if not judged:
        pytest.skip("no crossing sets busbw_min_line_rate")
    failed, unknown = [], []
    for c in judged:
        arm = next(iter(c.transport))
        row = _run(mn, c, arm, p2p_session).largest()
        rates = [line_rate_gbps(mn.evidence[h], c.nic) for h in c.between]
        line = min((r for r in rates if r is not None), default=None)
        assert c.busbw_min_line_rate is not None
        outcome, msg = judge_line_rate(row.busbw_gbs if row else None, line, c.busbw_min_line_rate,
                                       f"{c.key} arm {arm}")
        print(f"{outcome}: {msg}")
        if outcome == FAIL:
            failed.append(msg)
        elif outcome == INCONCLUSIVE:  # no line rate (no active RDMA port, no NIC speed) or no busbw: never a pass
            unknown.append(msg)
    if failed:
        pytest.fail("\n".join(failed), pytrace=False)
    if unknown:
        pytest.skip("inconclusive: " + "; ".join(unknown))


def test_server_across_nodes(p2p_multinode: MultiNode, p2p_session: P2PSession) -> None:
    """The rig's server under Ray's executor across its ``stages``, per arm a crossing names: up, one request
    served, and every Ray worker's NCCL lines prove the crossing transport, or name the worker that fell back."""
    mn, rig = p2p_multinode, p2p_session.rig
    if not mn.spec.stages:
        pytest.skip("the rig's nodes: section places no stages (nodes.stages: host:bus id, in pipeline order)")
    if not rig.server.model:
        pytest.skip("the rig has no server section (server.model): no server to place across the nodes")
    if mn.replay and not rig.server.simulated:
        pytest.skip("replay of recorded node trees: no cluster to start vLLM on (--p2p-ray-address)")
    expects = {arm: t for c in mn.spec.crossings for arm, t in c.transport.items()}
    if not expects:
        pytest.skip("no crossing names a transport per arm")
    from pytest_p2p.serve.loadgen import run_load
    from pytest_p2p.serve.multinode import ray_server_config, ray_server_env, worker_proof
    from pytest_p2p.serve.server import launch

    config = ray_server_config(rig.server, mn.spec.stages)
    here = socket.gethostname().split(".")[0]
    by_bus = {normalize_bus_id(g.bus_id): g.index for g in p2p_session.evidence.gpus} if p2p_session.evidence else {}
    local = [by_bus[bus] for s in mn.spec.stages if s.host == here and (bus := normalize_bus_id(s.gpu)) in by_bus]
    judged = []
    for arm_name, expect in expects.items():
        arm = rig.arms[arm_name]
        log = mn.results / "server" / f"{arm_name}.log"
        env = {**ray_server_env(mn.address, arm.env), "CUDA_VISIBLE_DEVICES": ",".join(map(str, local))}
        try:
            with launch(config, arm, (), rig.env, log, extra_env=env) as srv:
                run_load(srv.base_url, srv.api_key, srv.model, concurrency=1, num_prompts=1, input_len=16,
                         output_len=8, warmup=0)
        except P2PError as exc:
            pytest.fail(f"arm {arm_name}: {exc}", pytrace=False)
        proof = worker_proof(log.read_text(errors="replace"), expect, str(log), world_size=len(mn.spec.stages))
        label = " [SIMULATED: stand-in server]" if rig.server.simulated else ""
        judged.append((f"server arm {arm_name}{label}", proof))
    _conclude(judged)
