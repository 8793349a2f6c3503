"""cuda-samples p2pBandwidthLatencyTest parser: full output, quoted excerpts from the seeds, truncation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_p2p.errors import ProbeError
from pytest_p2p.probes.p2pmatrix import parse_p2p_bandwidth_latency

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
FULL = "synth_p2pBandwidthLatencyTest_2gpu_pcie_p2p_read.txt"


def read(name: str) -> str:
    return (LOGS / name).read_text()


def test_seed_003_nvlink_excerpt():
    res = parse_p2p_bandwidth_latency(read("seed003_p2pBandwidthLatencyTest_nvlink_excerpt.txt"))
    assert res.can_access == {(0, 1): True, (1, 0): True}
    assert res.devices == [{"index": 0}, {"index": 1}]
    assert res.matrices["unidirectional_bw_disabled"] == [[389.09, 5.82], [5.82, 389.35]]
    assert res.matrices["unidirectional_bw_enabled"][0][1] == 24.23
    assert res.matrices["bidirectional_bw_enabled"] == [[382.58, 48.37], [47.95, 390.62]]
    assert res.matrices["latency_gpu_disabled"][0][1] == 20.55
    assert res.matrices["latency_cpu_disabled"][1][0] == 8.37
    assert res.matrices["latency_gpu_enabled"][1][0] == 0.92
    assert res.matrices["latency_cpu_enabled"] == [[3.70, 2.79], [2.95, 3.68]]
    assert res.partial == []
    json.dumps(res.to_dict())


def test_seed_001_trimmed_latency_rows_need_non_strict():
    text = read("seed001_p2p_latency_matrices_excerpt.txt")
    with pytest.raises(ProbeError, match=r"no row for device\(s\) \[0\]"):
        parse_p2p_bandwidth_latency(text, "seed001")
    res = parse_p2p_bandwidth_latency(text, "seed001", strict=False)
    assert res.value("latency_gpu_disabled", 1, 2) == 18.08  # the C8 claim: 18.08 us ...
    assert res.value("latency_gpu_enabled", 1, 2) == 0.42  # ... drops to 0.42 us
    assert res.matrices["latency_gpu_disabled"][0] == [None, None, None]
    assert set(res.partial) == {"latency_gpu_disabled", "latency_gpu_enabled"}


def test_full_output_with_devices_access_and_p2p_reads():
    res = parse_p2p_bandwidth_latency(read(FULL))
    assert [d["bus_id"] for d in res.devices] == ["0000:01:00.0", "0000:0A:00.0"]
    assert res.devices[0]["name"] == "NVIDIA GeForce RTX 5060 Ti"
    assert res.can_access == {(0, 1): True, (1, 0): False}  # CAN/CANNOT lines win over the matrix
    assert sorted(res.matrices) == sorted([
        "unidirectional_bw_disabled", "unidirectional_bw_enabled", "unidirectional_bw_enabled_read",
        "bidirectional_bw_disabled", "bidirectional_bw_enabled",
        "latency_gpu_disabled", "latency_cpu_disabled", "latency_gpu_enabled", "latency_cpu_enabled",
        "latency_gpu_enabled_read", "latency_cpu_enabled_read",
    ])
    assert res.value("unidirectional_bw_enabled_read", 0, 1) == 24.98
    assert res.value("latency_cpu_enabled_read", 1, 0) == 6.03


@pytest.mark.parametrize("cut", [-3, -12, -40])
def test_truncated_output_is_an_error(cut):
    lines = read(FULL).splitlines()
    with pytest.raises(ProbeError, match="truncated"):
        parse_p2p_bandwidth_latency("\n".join(lines[:cut]), "cut.txt")


def test_truncated_row_names_the_line():
    lines = read(FULL).splitlines()
    lines[16] = lines[16][:12]
    with pytest.raises(ProbeError, match=r"cut.txt: line 17: truncated matrix row for device 1"):
        parse_p2p_bandwidth_latency("\n".join(lines), "cut.txt")


def test_not_p2p_output():
    with pytest.raises(ProbeError, match="no p2pBandwidthLatencyTest matrices"):
        parse_p2p_bandwidth_latency("hello\nworld\n", "x.txt")


def test_a_heading_without_its_matrix_mid_output_is_truncation():
    """A quoted output that lost one matrix (heading kept) must not silently lack it."""
    lines = read(FULL).splitlines()
    del lines[18:21]  # the (P2P Writes) matrix: its header and both rows, the heading on line 18 stays
    with pytest.raises(ProbeError, match=r"cut.txt: line 19: truncated .* heading on line 18 "
                                         r"\(unidirectional_bw_enabled\) has no matrix"):
        parse_p2p_bandwidth_latency("\n".join(lines), "cut.txt")
    res = parse_p2p_bandwidth_latency("\n".join(lines), "cut.txt", strict=False)
    assert "unidirectional_bw_enabled" not in res.matrices and "unidirectional_bw_enabled_read" in res.matrices
