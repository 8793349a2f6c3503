"""Issue 27 without Ray: node evidence from recorded sysfs trees, the nodes section, the per-rank transport proof."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytest_p2p.errors import ConfigError
from pytest_p2p.evidence.nodes import PciPlace, read_node, record_tree, topology_class
from pytest_p2p.evidence.nodespec import FAIL, PASS, judge_node, line_rate_gbps, parse_nodes
from pytest_p2p.plugin.rig import load_rig, parse_rig
from pytest_p2p.probes.arms import PRESETS
from pytest_p2p.probes.netproof import (
    ProcessLog,
    crossing_label_ok,
    judge_line_rate,
    line_rate_share,
    prove_crossing,
    split_by_process,
)

ROOT = Path(__file__).resolve().parents[1]
SYSFS = ROOT / "fixtures" / "sysfs"
LOGS = ROOT / "fixtures" / "logs" / "multinode"
RIG = ROOT / "fixtures" / "rigs" / "seed004-trinity-2node.yaml"


def _spec(host: str):  # the seed rig's expectations of one host
    rig = load_rig(RIG)
    assert rig.nodes is not None
    return rig.nodes.host(host)


def _fails(tree: str, host: str) -> list[str]:
    return [f.message for f in judge_node(read_node(SYSFS / tree, host), _spec(host)) if f.outcome == FAIL]


# --------------------------------------------------------------------------- sysfs evidence


def test_seed_nodes_read_from_their_trees() -> None:
    a = read_node(SYSFS / "trinity-a", "trinity-a")
    port = a.rdma[0].port(1)
    assert port is not None and (port.state, port.rate_gbps, port.link_layer) == ("ACTIVE", 200.0, "Ethernet")
    gid3 = port.gid(3)
    assert gid3 is not None and gid3.type == "RoCE v2" and gid3.gid.endswith("c0a8:3201")  # 192.168.50.1
    assert a.peermem_loaded is True and a.rdma[0].netdevs == ("enp1s0f0np0",)
    assert [g.bus_id for g in a.gpus] == ["0000:41:00.0", "0000:c1:00.0"]
    assert [topology_class(g, a.rdma[0].place) for g in a.gpus] == ["NODE", "NODE"]  # other root complexes
    b = read_node(SYSFS / "trinity-b", "trinity-b")
    assert topology_class(b.gpus[0], b.rdma[0].place) == "PHB"
    assert line_rate_gbps(a, "mlx5_0") == 200.0


def test_healthy_nodes_pass_every_expectation() -> None:
    for host in ("trinity-a", "trinity-b"):
        findings = judge_node(read_node(SYSFS / host, host), _spec(host))
        assert findings and all(f.outcome == PASS for f in findings), [f.message for f in findings]


def test_nic_at_half_rate_fails_from_sysfs() -> None:
    (msg,) = _fails("trinity-b_half_rate", "trinity-b")
    assert "mlx5_0" in msg and "100 Gb/s, expected 200 Gb/s" in msg and "ports/1/rate" in msg


def test_missing_nvidia_peermem_fails_from_evidence() -> None:
    (msg,) = _fails("trinity-b_no_peermem", "trinity-b")
    assert "nvidia_peermem not loaded" in msg and "proc/modules" in msg


def test_missing_gid_index_fails() -> None:
    (msg,) = _fails("trinity-b_no_gid3", "trinity-b")
    assert "no GID at index 3" in msg and "NCCL_IB_GID_INDEX=3" in msg


@pytest.mark.parametrize(("a", "b", "numa", "want"), [
    (("pci0000:40", "0000:40:01.1", "0000:41:00.0", "0000:42:00.0", "0000:43:00.0"),
     ("pci0000:40", "0000:40:01.1", "0000:41:00.0", "0000:42:01.0", "0000:44:00.0"), (0, 0), "PIX"),
    (("pci0000:40", "0000:40:01.1", "0000:41:00.0", "0000:42:00.0", "0000:43:00.0", "0000:44:00.0", "0000:45:00.0"),
     ("pci0000:40", "0000:40:01.1", "0000:41:00.0", "0000:42:01.0", "0000:46:00.0"), (0, 0), "PXB"),
    (("pci0000:40", "0000:40:01.1", "0000:41:00.0"), ("pci0000:40", "0000:40:03.1", "0000:42:00.0"), (0, 0), "PHB"),
    (("pci0000:40", "0000:40:01.1", "0000:41:00.0"), ("pci0000:c0", "0000:c0:01.1", "0000:c1:00.0"), (0, 0), "NODE"),
    (("pci0000:40", "0000:40:01.1", "0000:41:00.0"), ("pci0000:c0", "0000:c0:01.1", "0000:c1:00.0"), (0, 1), "SYS"),
])
def test_topology_classes(a: tuple[str, ...], b: tuple[str, ...], numa: tuple[int, int], want: str) -> None:
    assert topology_class(PciPlace(a[-1], numa[0], a), PciPlace(b[-1], numa[1], b)) == want


def test_record_tree_keeps_what_the_reader_reads(tmp_path: Path) -> None:
    copy = record_tree(SYSFS / "trinity-a", tmp_path / "rec")
    got, want = read_node(copy, "a"), read_node(SYSFS / "trinity-a", "a")
    assert (got.rdma, got.nets, got.gpus, got.modules) == (want.rdma, want.nets, want.gpus, want.modules)


def test_an_empty_root_is_unknown_not_healthy(tmp_path: Path) -> None:
    ev = read_node(tmp_path, "x")
    assert ev.peermem_loaded is None and not ev.rdma and len(ev.problems) == 2
    outcomes = {f.what: f.outcome for f in judge_node(ev, _spec("trinity-b"))}
    assert outcomes["nvidia_peermem"] == "inconclusive" and outcomes["mlx5_0 present"] == FAIL


# --------------------------------------------------------------------------- the rig file


def _seed() -> dict[str, object]:
    data = yaml.safe_load(RIG.read_text())
    assert isinstance(data, dict)
    return data


def test_single_host_rig_has_no_nodes() -> None:
    assert load_rig(ROOT / "fixtures" / "rigs" / "h200x2-nvlink.yaml").nodes is None
    assert parse_nodes(None, "r.yaml") is None


@pytest.mark.parametrize(("patch", "path", "text"), [
    (lambda d: d["nodes"]["hosts"]["trinity-a"].update(gpus=["GPU0"]), "nodes.hosts.trinity-a.gpus[0]", "'GPU0'"),
    (lambda d: d["nodes"]["crossings"][0].update(between=["trinity-a", "trinity-c"]),
     "nodes.crossings[0].between[1]", "'trinity-c'"),
    (lambda d: d["nodes"]["crossings"][0].update(busbw_min_line_rate="150%"),
     "nodes.crossings[0].busbw_min_line_rate", "'150%'"),
    (lambda d: d["nodes"]["crossings"][0]["transport"].update(gdr="IB please"),
     "nodes.crossings[0].transport.gdr", "'IB please'"),
    (lambda d: d["nodes"]["crossings"][0]["transport"].update(rdma="NET/IB"), "nodes.crossings", "rdma"),
    (lambda d: d["nodes"]["hosts"]["trinity-b"]["nics"]["mlx5_0"].update(rate_gbps="fast"),
     "nodes.hosts.trinity-b.nics.mlx5_0.rate_gbps", "'fast'"),
    (lambda d: d["nodes"].update(stages=["trinity-b:0000:99:00.0"]), "nodes.stages[0]", "0000:99:00.0"),
    (lambda d: d["nodes"]["hosts"]["trinity-a"].update(nic_gpu_topology="FAR"),
     "nodes.hosts.trinity-a.nic_gpu_topology", "'FAR'"),
])
def test_nodes_errors_name_file_field_and_value(patch, path: str, text: str) -> None:  # type: ignore[no-untyped-def]
    data = _seed()
    patch(data)
    with pytest.raises(ConfigError) as info:
        parse_rig(data, source="trinity.yaml")
    assert info.value.source == "trinity.yaml" and info.value.path == path and text in str(info.value)


# --------------------------------------------------------------------------- transport proof per rank


def _ranks(scenario: str) -> list[ProcessLog]:
    return [ProcessLog((LOGS / scenario / f"rank{r}.log").read_text(), f"rank{r}.log") for r in range(3)]


def test_gdr_proved_on_every_rank_of_a_complete_log() -> None:
    proof = prove_crossing(_ranks("gdr"), "NET/IB/…/GDRDMA", arm_env=PRESETS["gdr"].env)
    assert proof.outcome == PASS and proof.complete
    assert [r.outcome for r in proof.ranks] == [PASS, PASS, PASS]


def test_forced_socket_fails_a_gdr_rig_naming_the_env() -> None:
    proof = prove_crossing(_ranks("socket_forced"), "NET/IB/GDRDMA", arm_env=PRESETS["gdr"].env)
    assert proof.outcome == FAIL and [r.rank for r in proof.failed()] == [0, 1, 2]
    assert all("NCCL_IB_DISABLE=1 here vs 0 in the arm" in r.message for r in proof.failed())
    assert prove_crossing(_ranks("socket_forced"), "NET/Socket").outcome == PASS


def test_one_rank_without_gdr_level_is_named_with_its_env() -> None:
    proof = prove_crossing(_ranks("rank1_no_gdr_level"), "NET/IB/GDRDMA", arm_env=PRESETS["gdr"].env)
    (bad,) = proof.failed()
    assert (bad.rank, bad.node) == (1, "trinity-a")
    assert "GPU Direct RDMA Disabled for GPU 1 / HCA 0 (distance 6 > 4)" in bad.message
    assert bad.env_diff == ("NCCL_NET_GDR_LEVEL=(unset) here vs 5 on rank 0 (trinity-a)",)


def test_rank_without_peermem_is_named_and_env_is_not_blamed() -> None:
    proof = prove_crossing(_ranks("rank2_no_peermem"), "NET/IB/GDRDMA")
    (bad,) = proof.failed()
    assert (bad.rank, bad.node, bad.env_diff) == (2, "trinity-b", ())  # NCCL_SOCKET_IFNAME differs by design
    assert "Disabled for HCA 0 'mlx5_0'" in bad.message and "nvidia_peermem" in bad.message


def test_no_gdr_arm_does_not_accept_gdr_connections() -> None:
    assert prove_crossing(_ranks("gdr"), "NET/IB").outcome == FAIL
    assert prove_crossing(_ranks("rank2_no_peermem"), "NET/IB").outcome == FAIL  # ranks 0, 1 did use GDR
    assert crossing_label_ok("NET/IBext_v8/GDRDMA", "NET/IB/…/GDRDMA")
    assert not crossing_label_ok("NET/IB", "NET/IB/0/GDRDMA") and not crossing_label_ok("NET/Socket", "NET/IB")


def test_a_missing_rank_log_is_not_a_pass() -> None:
    proof = prove_crossing(_ranks("gdr")[:2], "NET/IB/GDRDMA", world_size=3)
    assert proof.outcome == "inconclusive" and proof.ranks[2].outcome == "inconclusive"


def test_enabled_line_proves_a_rank_but_an_excerpt_stays_inconclusive() -> None:
    text = (LOGS / "gdr" / "rank2.log").read_text()
    excerpt = "\n".join(ln for ln in text.splitlines() if "Channel" not in ln and "Init COMPLETE" not in ln)
    proof = prove_crossing([ProcessLog(excerpt, "excerpt", "trinity-b")], "NET/IB/GDRDMA", world_size=3)
    assert proof.ranks[2].outcome == PASS and "GPU Direct RDMA Enabled for GPU 0" in proof.ranks[2].message
    assert proof.outcome == "inconclusive"


def test_merged_log_split_by_host_and_pid() -> None:
    merged = "".join((LOGS / "gdr" / f"rank{r}.log").read_text() for r in range(3))
    logs = split_by_process(merged, "job.log")
    assert [lg.node for lg in logs] == ["trinity-a", "trinity-a", "trinity-b"]
    assert prove_crossing(logs, "NET/IB/GDRDMA").outcome == PASS


@pytest.mark.parametrize("name", ["heldout/nccl-1189_h20_cumem_ib_2node.log", "heldout/nccl-707_a100_ib_gdrdma.log",
                                  "heldout/nccl-687_ib_gdrdma_ipc_read.log", "dev/nccl-385_ring_ipc_ib_numbered.log"])
def test_public_multinode_excerpts_never_pass(name: str) -> None:
    """Excerpts of real multi-node GDR logs: GDR shown, never a pass (they are incomplete), never a fallback."""
    text = (ROOT / "fixtures" / "logs" / "public" / name).read_text()
    proof = prove_crossing(split_by_process(text, name), "NET/IB/GDRDMA")
    assert proof.outcome == "inconclusive" and any(r.outcome == PASS for r in proof.ranks)


def test_public_host_staged_log_names_the_rank() -> None:
    name = "dev/nccl-629_direct_pointer_read_ib_no_gdr.log"
    text = (ROOT / "fixtures" / "logs" / "public" / name).read_text()
    (bad,) = prove_crossing(split_by_process(text, name), "NET/IB/GDRDMA").failed()
    assert bad.rank == 0 and bad.node == "A03-R28-I49-2-6000166" and "via NET/IB," in bad.message


# --------------------------------------------------------------------------- bus bandwidth against line rate


def test_seed_busbw_is_92_percent_of_line_rate() -> None:
    assert line_rate_share(23.0, 200) == pytest.approx(0.92)
    outcome, msg = judge_line_rate(23.0, 200.0, 0.85, "trinity-a~trinity-b")
    assert outcome == PASS and "92.0% of the 200 Gb/s" in msg


def test_host_staged_busbw_fails_the_line_rate_threshold() -> None:
    assert judge_line_rate(6.5, 200.0, 0.85, "x")[0] == FAIL
    assert judge_line_rate(None, 200.0, 0.85, "x")[0] == "inconclusive"
    assert judge_line_rate(20.0, None, 0.85, "x")[0] == "inconclusive"


def test_multinode_modules_do_not_import_ray() -> None:
    code = ("import sys, pytest_p2p.plugin, pytest_p2p.probes.multinode, pytest_p2p.probes.netproof; "
            "from pytest_p2p.plugin.rig import load_rig; load_rig(sys.argv[1]); "
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code, str(RIG)], check=True)


# --------------------------------------------------------------------------- vLLM across nodes


def test_ray_executor_args_follow_the_rig_stages() -> None:
    from pytest_p2p.serve.multinode import ray_executor_args

    rig = load_rig(RIG)
    assert rig.nodes is not None
    assert ray_executor_args(rig.nodes.stages) == ["--distributed-executor-backend", "ray",
                                                   "--pipeline-parallel-size", "3", "--tensor-parallel-size", "1"]
    with pytest.raises(ConfigError, match="do not split into stages of 2"):
        ray_executor_args(rig.nodes.stages, tensor_parallel=2)


def test_vllm_ray_worker_lines_are_proved_per_worker() -> None:
    """The driver prints each Ray worker's lines behind '(RayWorkerWrapper pid=…, ip=…)': one log per worker."""
    from pytest_p2p.serve.multinode import worker_proof

    lines = []
    for r, ip in enumerate(("192.168.50.1", "192.168.50.1", "192.168.50.2")):
        pid = (7001, 7002, 5001)[r]
        for ln in (LOGS / "rank2_no_peermem" / f"rank{r}.log").read_text().splitlines():
            lines.append(f"(RayWorkerWrapper pid={pid}, ip={ip}) {ln}" if r else ln)
    proof = worker_proof("\n".join(lines) + "\n", "NET/IB/GDRDMA")
    assert [(v.rank, v.node) for v in proof.failed()] == [(2, "trinity-b")]
