"""Hypothesis fuzzing of the probes' parsers, seeded from real inputs (benchmarks/probe_fuzz.py holds the strategies).

CI runs a modest number of examples per parser; ``P2P_FUZZ_EXAMPLES=10000`` runs the issue-11 budget.
A crash is any exception but ``ProbeError`` (the NCCL log parser and the vLLM attestation raise nothing).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("probe_fuzz", ROOT / "benchmarks" / "probe_fuzz.py")
assert _spec is not None and _spec.loader is not None
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["probe_fuzz"] = fuzz
_spec.loader.exec_module(fuzz)

EXAMPLES = int(os.environ.get("P2P_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])


@pytest.mark.parametrize("kind", sorted(fuzz.SEEDS))
def test_every_parser_has_seeds(kind):
    assert fuzz.SEEDS[kind], f"no seed files for {kind}"


@FUZZ
@given(fuzz.mutated("nccl_log"))
def test_nccl_log_parser_is_total(text):
    assert fuzz.crash_of("nccl_log", text) is None


@FUZZ
@given(fuzz.mutated("nccl_tests"))
def test_nccl_tests_parser_raises_only_probe_error(text):
    assert fuzz.crash_of("nccl_tests", text) is None


@FUZZ
@given(fuzz.mutated("p2p_matrix"))
def test_p2p_matrix_parser_raises_only_probe_error(text):
    assert fuzz.crash_of("p2p_matrix", text) is None


@FUZZ
@given(fuzz.mutated("vllm_log"))
def test_vllm_log_attestation_is_total(text):
    assert fuzz.crash_of("vllm_log", text) is None


@pytest.mark.parametrize("text", [
    '{"results": [{"size": 1e400, "count": 1, "type": "float", "redop": "sum"}]}',
    '{"args": {}, "results": [{"size": 8, "count": 2, "type": "float", "redop": "sum"}]}',
    '{"config": {"devices": 5}, "results": [{"size": 8, "count": 2, "type": "f", "redop": "s"}]}',
    "#  size count type redop root time algbw busbw #wrong\n" + "9" * 5000 + " 2 float sum -1 1 2 3 0 1 2 3 0\n",
    "#  size count type redop root time algbw busbw #wrong\n8 2 float sum -1 1 2 3 nan 1 2 3 inf\n"
    "# Avg bus bandwidth : 1\n",
    "#  size count #wrong type #wrong\n8 2 float sum -1 1\n",
    "# Rank " + "9" * 5000 + " Group 0 Pid 1 on h device 0 [0x01] GPU\n",
])
def test_nccl_tests_issue_11_shapes(text):
    assert fuzz.crash_of("nccl_tests", text) is None


@pytest.mark.parametrize("text", [
    "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)\n   D\\D     " + "9" * 5000 + "\n",
    "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)\n   D\\D " + " ".join(map(str, range(3000))) + "\n0 1\n",
    "Device=" + "9" * 5000 + " CAN Access Peer Device=1\n",
])
def test_p2p_matrix_issue_11_shapes(text):
    assert fuzz.crash_of("p2p_matrix", text) is None
