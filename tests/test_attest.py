"""vLLM server-log attestation: versions, all-reduce dispatch, and why a "P2P off" arm may not be trusted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_p2p.probes.vllm_log import P2P_BYPASS_BACKENDS, parse_server_log

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def load(name: str):
    return parse_server_log((LOGS / name).read_text(encoding="utf-8"), source=name)


def test_real_tp2_p2p_on_log():
    att = load("vllm-0.24.0_tp2_serve_p2p_on.log")
    assert att.vllm_version == "0.24.0" and att.nccl_version == "2.28.9"
    assert att.tensor_parallel_size == 2 and att.disable_custom_all_reduce is True
    assert [(d.group, d.backends) for d in att.dispatch] == [("tp:0", ("PYNCCL",))]
    assert "CUSTOM" in att.dispatch[0].potential and att.dispatch[0].pid == 1834
    assert att.p2p_bypass_backends == []
    assert len(att.symm_mem) == 2  # "multicast operations are not supported" warnings, kept as evidence
    assert att.transport.transport == "P2P/CUMEM"
    assert att.problems("P2P/CUMEM") == []
    problems = att.problems("SHM")
    assert len(problems) == 1 and "expected SHM" in problems[0]
    d = json.loads(json.dumps(att.to_dict()))
    assert d["transport_proof"]["schema"] == "pytest-p2p/transport-proof"
    assert d["evidence"]["dispatch"][0][0] == 159


def test_p2p_off_arm_with_custom_all_reduce_is_not_trusted():
    att = load("synth_vllm-0.24.0_tp2_p2p_off_custom_ar.log")
    assert att.transport.transport == "SHM"  # NCCL itself obeyed NCCL_P2P_DISABLE=1 ...
    assert att.transport.satisfies("SHM")[0]
    problems = att.problems("SHM")  # ... but vLLM's custom all-reduce still used P2P
    assert len(problems) == 1
    assert "line 161" in problems[0] and "CUSTOM" in problems[0] and "--disable-custom-all-reduce" in problems[0]
    assert att.disable_custom_all_reduce is False
    # For a P2P arm the same backends are fine; only the NCCL proof disagrees.
    assert all("CUSTOM" not in p for p in att.problems("P2P"))


@pytest.mark.parametrize("backend", sorted(P2P_BYPASS_BACKENDS))
def test_every_bypass_backend_is_reported_for_net_and_shm_arms(backend):
    text = (
        f"(Worker pid=7) INFO 01-01 00:00:00 [cuda_communicator.py:245] Using ['{backend}', 'PYNCCL'] all-reduce "
        f"backends (in dispatch order) for group 'tp:0' out of potential backends: ['{backend}', 'PYNCCL'].\n"
        "h:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n"
    )
    att = parse_server_log(text, "s.log")
    assert att.p2p_bypass_backends == [backend]
    assert any(backend in p for p in att.problems("NET"))
    assert not any(backend in p for p in att.problems("P2P"))


def test_unknown_backend_and_missing_dispatch_line():
    text = ("(Worker pid=7) INFO x [cuda_communicator.py:318] Using ['B12X_PCIE', 'PYNCCL'] all-reduce backends "
            "(in dispatch order) for group 'tp:0'\n")
    att = parse_server_log(text, "u.log")
    assert att.dispatch[0].potential == ()
    assert any("unknown all-reduce backend(s) B12X_PCIE" in p for p in att.problems("SHM"))
    silent = parse_server_log("(APIServer pid=1) INFO vLLM API server version 0.6.3\n", "old.log")
    assert silent.vllm_version == "0.6.3"
    problems = silent.problems("SHM")
    assert any("no all-reduce dispatch line" in p for p in problems)
    assert any("NCCL_DEBUG=INFO" in p for p in problems)


def test_custom_allreduce_disabled_reason_and_tp1():
    text = ("(Worker pid=3) WARNING 01-01 [custom_all_reduce.py:1] Custom allreduce is disabled because your platform "
            "lacks GPU P2P capability or P2P test failed. To silence this warning, specify "
            "disable_custom_all_reduce=True explicitly.\n")
    att = parse_server_log(text, "w.log")
    assert att.custom_ar_disabled[0][1].startswith("because your platform lacks GPU P2P")
    smoke = load("vllm-0.24.0_tp1_smoke.log")
    assert smoke.tensor_parallel_size == 1 and smoke.disable_custom_all_reduce is False
    assert any("tensor_parallel_size is 1" in p for p in smoke.problems("P2P"))


def test_nccl_version_mismatch_is_a_problem():
    text = ("(Worker pid=1) INFO [pynccl.py:113] vLLM is using nccl==2.27.3\n"
            "h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
    att = parse_server_log(text, "m.log")
    assert any("two NCCL libraries" in p for p in att.problems("P2P"))


def test_garbage_does_not_raise():
    att = parse_server_log("\x00\x1b[31m(Worker pid=) Using [ all-reduce backends\r\n" * 3, "g.log")
    assert att.dispatch == [] and att.vllm_version is None


def test_engine_config_line_wins_over_advice_text():
    text = ("(APIServer pid=1) INFO [api_utils.py:273] non-default args: {'tensor_parallel_size': 2}\n"
            "(EngineCore pid=2) INFO [core.py:114] Initializing a V1 LLM engine (v0.11.0) with config: "
            "model='m', tensor_parallel_size=2, disable_custom_all_reduce=False, quantization=None\n"
            "(Worker pid=3) WARNING [custom_all_reduce.py:1] Custom allreduce is disabled because your platform "
            "lacks GPU P2P capability or P2P test failed. To silence this warning, specify "
            "disable_custom_all_reduce=True explicitly.\n")
    att = parse_server_log(text, "w.log")
    assert att.disable_custom_all_reduce is False  # the engine ran with False; the warning only advises True
    assert [n for n, _ in att.evidence["disable_custom_all_reduce"]] == [2]
    assert att.custom_ar_disabled and att.custom_ar_disabled[0][0] == 3  # custom AR off at run time: evidence


def test_transport_cli_attests_vllm_logs(capsys):
    from pytest_p2p.probes.transport_cli import main

    bad = str(LOGS / "synth_vllm-0.24.0_tp2_p2p_off_custom_ar.log")
    assert main([bad, "--expect", "SHM"]) == 1
    out = capsys.readouterr().out
    assert "ok:" not in out and "FAIL:" in out and "CUSTOM" in out and "line 161" in out
    assert "all-reduce backends" in out
    good = str(LOGS / "vllm-0.24.0-h200x2" / "serve_tp2_p2p_off_disable_custom_ar.log")
    assert main([good, "--expect", "SHM"]) == 0
    assert "ok:" in capsys.readouterr().out
    assert main([bad, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["vllm_attestation"]["p2p_bypass_backends"] == ["CUSTOM"]
