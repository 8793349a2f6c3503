"""The NCCL transport proof against real captures, seed quotes and logs synthesised from NCCL's format strings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_p2p.errors import ProbeError
from pytest_p2p.probes.transport import (
    NO_INFO_PROBLEM,
    PROOF_SCHEMA,
    PROOF_VERSION,
    parse_nccl_log,
    proof_from_dict,
)

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def load(name: str):
    return parse_nccl_log((LOGS / name).read_text(encoding="utf-8", errors="replace"), source=name)


def test_real_h200_p2p_on_is_cumem_on_every_channel():
    proof = load("h200x2_nccl-2.28.9_p2p_on.log")
    assert proof.has_info and proof.problem is None
    assert proof.nccl_version == "2.28.9"
    assert proof.transport == "P2P/CUMEM"
    assert (proof.used_p2p, proof.used_shm, proof.used_net) == (True, False, False)
    assert proof.p2p_kinds == ["CUMEM"] and not proof.p2p_read and not proof.p2p_ce
    assert len(proof.connections) == 48
    assert {(c.src_rank, c.dst_rank) for c in proof.connections} == {(0, 1), (1, 0)}
    assert {c.conn_index for c in proof.connections} == {0}
    assert proof.device_id_format == "device_index"
    assert proof.p2p_type == {"isAllDirectP2p": 1, "directMode": 0, "isAllCudaP2p": 1}
    assert proof.env_overrides == {"NCCL_NVLS_ENABLE": "0"}
    assert [(c["rank"], c["nRanks"], c["nNodes"], c["localRanks"]) for c in proof.comms] == [(1, 2, 1, 2), (0, 2, 1, 2)]
    # NVLS: 0 nvls channels, so not used; the Socket plugin was loaded but carried nothing.
    assert proof.used_nvls is False and proof.nvls_channels == 0
    assert proof.net_plugin == "Socket" and proof.net_gdrdma is None
    ok, why = proof.satisfies("P2P/CUMEM")
    assert ok, why
    assert proof.satisfies("P2P")[0] and proof.satisfies("p2p/cumem")[0]
    assert not proof.satisfies("P2P/IPC")[0]


def test_real_h200_p2p_off_is_shm_and_failure_cites_lines():
    proof = load("h200x2_nccl-2.28.9_p2p_off.log")
    assert proof.transport == "SHM"
    assert proof.shm_modes == ["direct/direct"]
    assert proof.env_overrides["NCCL_P2P_DISABLE"] == "1"
    assert proof.p2p_type is not None and proof.p2p_type["isAllDirectP2p"] == 0
    assert all(c.conn_index is None for c in proof.connections)  # SHM lines never carry /connIndex
    assert proof.satisfies("SHM")[0]
    ok, why = proof.satisfies("P2P")
    assert not ok
    assert "line 197: SHM" in why and "NCCL_P2P_DISABLE=1" in why
    lines = proof.evidence_lines("env:NCCL_P2P_DISABLE")
    assert lines and "NCCL_P2P_DISABLE set by environment to 1" in lines[0][1]
    raw = (LOGS / "h200x2_nccl-2.28.9_p2p_off.log").read_text().splitlines()
    for number, text in proof.evidence_lines("used_shm"):
        assert raw[number - 1].strip() == text  # line numbers point at the original log


def test_vllm_server_log_embeds_the_same_proof():
    proof = load("vllm-0.24.0_tp2_serve_p2p_on.log")
    assert proof.transport == "P2P/CUMEM"
    assert proof.env_overrides["NCCL_CUMEM_ENABLE"] == "1"
    assert proof.satisfies("P2P")[0]


@pytest.mark.parametrize(
    "name, transport, expect_ok, expect_bad",
    [
        ("seed000_nccl_p2p_on_excerpt.log", "P2P/CUMEM", "P2P/CUMEM", "SHM"),
        ("seed000_nccl_p2p_off_excerpt.log", "SHM", "SHM", "P2P"),
        ("synth_nccl-2.12.12_net_socket_connindex.log", "NET/Socket", "NET/Socket", "NET/IB"),
        ("synth_nccl-2.30.7_shm_direct.log", "SHM", "SHM", "P2P"),
        ("synth_nccl-2.28.9_single_process_direct_pointer.log", "P2P/direct pointer", "P2P", "P2P/CUMEM"),
        ("synth_nccl-2.28.9_mnnvl.log", "P2P/MNNVL", "P2P/MNNVL", "P2P/CUMEM"),
        ("synth_nccl-2.23.4_nvls_cumem.log", "P2P/CUMEM", "P2P", "NET"),
    ],
)
def test_single_transport_logs(name, transport, expect_ok, expect_bad):
    proof = load(name)
    assert proof.transport == transport
    # Excerpts and synthesised logs have no Init COMPLETE lines: what they show agrees, but is not a proof.
    assert proof.state == "incomplete" and not proof.complete
    good = proof.check(expect_ok)
    assert good.outcome == "inconclusive" and "incomplete" in good.why, good.why
    assert not proof.satisfies(expect_ok)[0]
    assert proof.check(expect_bad).outcome == "fail"  # a line says otherwise: that needs no completeness


def test_seed_p2p_on_keeps_bus_order_device_indices():
    proof = load("seed000_nccl_p2p_on_excerpt.log")
    assert sorted((c.src_rank, c.src_dev, c.dst_rank, c.dst_dev) for c in proof.connections) == [
        (0, "1", 1, "2"), (1, "2", 0, "1")]
    assert proof.nccl_version is None  # the excerpt has no version line; nothing is invented


def test_nccl_2_9_hex_bus_ids_and_legacy_shm():
    proof = load("synth_nccl-2.9.9_ipc_busid_legacy_shm.log")
    assert proof.device_id_format == "bus_id"
    assert proof.transport == "mixed: P2P/IPC (2) + SHM (2)"
    assert {c.dst_dev for c in proof.connections} >= {"2000", "b1000"}
    assert proof.shm_modes == ["legacy"]
    assert proof.p2p_read  # "via P2P/IPC/read"
    assert proof.env_overrides["NCCL_P2P_LEVEL"] == "PHB"
    assert all(c.conn_index is None for c in proof.connections)
    ok, why = proof.satisfies("P2P")
    assert not ok and "SHM" in why
    assert proof.check("P2P+SHM").outcome == "inconclusive"  # 1 of 3 ranks finished init
    assert "1 of 3 ranks" in proof.completeness


def test_nccl_2_14_read_ce_and_indirect():
    proof = load("synth_nccl-2.14.3_ipc_read_shm_ce.log")
    assert proof.device_id_format == "bus_id"
    assert proof.p2p_kinds == ["IPC", "indirect"]
    indirect = [c for c in proof.connections if c.kind == "indirect"]
    assert indirect[0].via_rank == 2 and indirect[0].conn_index == 1
    assert "CE/direct" in proof.shm_modes
    assert proof.evidence_lines("p2p_read")


def test_two_node_ib_gdrdma_flags_and_gdr_support():
    proof = load("synth_nccl-2.19.3_ib_gdrdma_2node.log")
    net = [c for c in proof.connections if c.transport == "NET"]
    assert {c.direction for c in net} == {"send", "receive"}
    assert all("GDRDMA" in c.flags for c in net)
    assert any(c.proxy_rank == 0 and "Shared" in c.flags for c in net)
    assert any("PCI" in c.flags for c in net)
    assert proof.net_gdrdma is True
    assert proof.net_plugin == "IB" and proof.net_devices == ["IB:mlx5_0:1/RoCE"]
    assert [g["enabled"] for g in proof.gdr_support] == [True, True]
    assert proof.comms[0]["nNodes"] == 2
    assert proof.check("P2P+NET/IB/GDRDMA").outcome == "inconclusive"  # no Init COMPLETE: not the whole log
    assert proof.used_shm is None  # absence in an incomplete log is unknown, never False
    ok, why = proof.satisfies("NET/IB")
    assert not ok and "P2P/IPC" in why


def test_net_without_gdrdma_is_not_gdr():
    proof = load("synth_nccl-2.12.12_net_socket_connindex.log")
    assert proof.net_gdrdma is False
    assert proof.evidence_lines("net_gdrdma")
    assert {c.conn_index for c in proof.connections} == {0}  # NET had /connIndex from 2.12
    assert proof.device_id_format == "bus_id"


def test_nvls_comes_from_channel_counts_not_from_support_line():
    pcie = load("synth_nccl-2.20.5_pcie_nvls_not_available.log")
    assert pcie.used_nvls is False and pcie.nvls_supported is False
    assert pcie.claims["nvls"].value is False
    nvls = load("synth_nccl-2.23.4_nvls_cumem.log")
    assert nvls.used_nvls is True and nvls.nvls_channels == 16 and nvls.nvls_supported is True
    assert any("Connected NVLS" in t for _, t in nvls.evidence_lines("nvls"))
    assert nvls.p2p_read


def test_collnet_use_from_collnet_lines():
    proof = load("synth_nccl-2.18.5_collnet.log")
    assert proof.used_collnet
    assert proof.evidence_lines("collnet")
    assert any(c.transport == "COLLNET" and "GDRDMA" in c.flags for c in proof.connections)
    # 2.28 prints nChannels as "collnet channels": a non-zero count alone is not CollNet use.
    assert load("h200x2_nccl-2.28.9_p2p_on.log").used_collnet is False


def test_noise_ansi_crlf_interleaving_and_truncation():
    proof = load("synth_nccl-2.27.3_ansi_crlf_interleaved_truncated.log")
    assert proof.nccl_version == "2.27.3"
    assert len(proof.connections) == 3  # two processes on one physical line both count
    assert [c.line for c in proof.connections] == [2, 2, 3]
    assert proof.transport == "P2P/CUMEM"
    assert proof.stats["unparsed_connection_lines"] == 1
    assert any("truncated" in w for w in proof.warnings)
    assert proof.p2p_type is not None


@pytest.mark.parametrize("name", ["warn_only.log", "vllm-0.24.0_tp1_smoke.log"])
def test_no_info_lines_claims_nothing(name):
    proof = load(name)
    assert not proof.has_info and proof.problem.startswith(NO_INFO_PROBLEM)
    assert proof.connections == [] and proof.claims == {}
    ok, why = proof.satisfies("SHM")
    assert not ok and "NCCL_DEBUG=INFO" in why
    with pytest.raises(KeyError, match="no claim 'used_p2p'"):
        proof.evidence_lines("used_p2p")


def test_empty_log():
    proof = parse_nccl_log("", source="empty.log")
    assert not proof.has_info and proof.problem == NO_INFO_PROBLEM and proof.transport == "none"


def test_info_without_connections_says_so():
    proof = parse_nccl_log("h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
    assert proof.has_info and proof.nccl_version == "2.21.5"
    assert "no channel connection lines" in proof.problem
    assert not proof.satisfies("P2P")[0]


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_round_trip_through_json(name):
    proof = load(name)
    d = json.loads(json.dumps(proof.to_dict()))
    assert d["schema"] == PROOF_SCHEMA and d["version"] == PROOF_VERSION
    again = proof_from_dict(d)
    assert again.to_dict() == d
    assert again.transport == proof.transport


def test_proof_from_dict_rejects_other_schemas():
    d = load("seed000_nccl_p2p_on_excerpt.log").to_dict()
    with pytest.raises(ProbeError, match="version 99 is not supported"):
        proof_from_dict({**d, "version": 99})
    with pytest.raises(ProbeError, match="not a transport proof"):
        proof_from_dict({"schema": "other"})
    with pytest.raises(ProbeError, match="malformed"):
        proof_from_dict({**d, "connections": [{"channel": "x"}]})
    with pytest.raises(ProbeError, match="expected a transport proof object"):
        proof_from_dict([1, 2])


def test_evidence_is_capped_but_counted():
    proof = load("h200x2_nccl-2.28.9_p2p_on.log")
    claim = proof.claims["used_p2p"]
    assert claim.count == 48 and len(claim.lines) == 8
    assert proof.claims["used_shm"].value is False and proof.claims["used_shm"].lines  # absence shows what was used


# -- the `transport` CLI --------------------------------------------------------------------

from pytest_p2p.probes.transport_cli import main  # noqa: E402


def test_cli_table_and_expect(capsys):
    on = str(LOGS / "h200x2_nccl-2.28.9_p2p_on.log")
    assert main([on]) == 0
    out = capsys.readouterr().out
    assert "P2P/CUMEM" in out and "line 422:" in out and "NCCL_NVLS_ENABLE" in out
    assert main([on, "--expect", "SHM"]) == 1
    assert "FAIL:" in capsys.readouterr().out


def test_cli_json_several_logs_and_no_info(capsys):
    on, warn = str(LOGS / "h200x2_nccl-2.28.9_p2p_on.log"), str(LOGS / "warn_only.log")
    assert main([on, warn, "--json"]) == 1  # one log had no INFO lines
    docs = json.loads(capsys.readouterr().out)
    assert [d["transport"] for d in docs] == ["P2P/CUMEM", "none"]
    assert docs[1]["problem"].startswith(NO_INFO_PROBLEM)
    assert main([str(LOGS / "seed000_nccl_p2p_off_excerpt.log"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["used_shm"] is True


def test_cli_usage_and_unreadable(capsys, tmp_path):
    assert main([]) == 2
    assert main([str(tmp_path / "missing.log")]) == 2
    assert "cannot read" in capsys.readouterr().err
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert main([str(empty)]) == 1
    assert "set NCCL_DEBUG=INFO" in capsys.readouterr().out


def test_seed_002_p2p_levels():
    sys_level = load("synth_nccl-2.28.9_p2p_level_sys_seed002.log")
    assert sys_level.p2p_level == "SYS" and sys_level.to_dict()["summary"]["p2p_level"] == "SYS"
    assert sys_level.env_overrides["NCCL_PROTO"] == "LL"
    assert sys_level.transport == "P2P/CUMEM"
    pxb = load("synth_nccl-2.28.9_p2p_level_2_is_pxb_seed002.log")  # NCCL_P2P_LEVEL=2 is echoed as PXB
    assert pxb.p2p_level == "PXB" and pxb.transport == "SHM"
    ok, why = pxb.satisfies("P2P")
    assert not ok and "NCCL_P2P_LEVEL=PXB" in why
