"""Evidence judgements read as diagnoses, and fail exactly when they should."""

from __future__ import annotations

import copy

from pytest_p2p.evidence.diagnose import judge_counters, judge_nvlink, judge_pcie, judge_peer_access, judge_topology
from pytest_p2p.evidence.model import PcieReading
from pytest_p2p.evidence.snapshot import load_snapshot
from pytest_p2p.plugin.rig import Expectations, LinkExpect, NvlinkExpect


def test_pcie_gen4_expected_on_gen3_link_is_the_issue_diagnosis(snapshot_5060ti):
    g = load_snapshot(snapshot_5060ti).gpu(2)
    j = judge_pcie(g, Expectations(pcie=LinkExpect(gen=4, width=4)))
    assert not j.ok
    assert j.problems[0].startswith("GPU 2 (0000:0A:00.0, NVIDIA GeForce RTX 5060 Ti) runs PCIe Gen3 x4 under load; "
                                    "the rig expects at least Gen4 x4 — a link that trains down points at the cable "
                                    "or a missing retimer")
    assert judge_pcie(g, Expectations(pcie=LinkExpect(gen=3, width=4))).ok


def test_pcie_without_load_reading_judges_max_and_says_so(snapshot_h200):
    g = load_snapshot(snapshot_h200).gpu(0)
    g.pcie.loaded, g.pcie.load_method = None, "none: torch not importable"
    j = judge_pcie(g, Expectations(pcie=LinkExpect(gen=6)))
    assert "at most (max-link field)" in j.problems[0] and "Gen6" in j.problems[0]
    assert any("not a reading under load" in n for n in j.notes)


def test_width_downtrain_points_at_seating(snapshot_5060ti):
    g = load_snapshot(snapshot_5060ti).gpu(1)
    j = judge_pcie(g, Expectations(pcie=LinkExpect(width=8)))
    assert "fewer lanes" in j.problems[0]


def test_nvlink_links_and_version(snapshot_h200):
    g = load_snapshot(snapshot_h200).gpu(0)
    assert judge_nvlink(g, Expectations(nvlink=NvlinkExpect(links=18, version=4))).ok
    g2 = copy.deepcopy(g)
    g2.nvlinks[5].active = False
    j = judge_nvlink(g2, Expectations(nvlink=NvlinkExpect(links=18)))
    assert "17 of 18 expected NVLinks active (inactive: link 5)" in j.problems[0]
    assert not judge_nvlink(g, Expectations(nvlink=NvlinkExpect(version=5))).ok
    assert not judge_nvlink(g, Expectations(nvlink=NvlinkExpect(links=0))).ok
    for link in g2.nvlinks:
        link.active = False
    j = judge_nvlink(g2, Expectations(nvlink=NvlinkExpect(version=4)))  # a version alone, every link down
    assert "has no active NVLink; the rig expects NVLink 4" in j.problems[0]


def test_topology_nv12_expected_on_nv18(snapshot_h200):
    ev = load_snapshot(snapshot_h200)
    j = judge_topology(ev, ev.pair(0, 1), Expectations(topology="NV12"))
    assert "connect through NV18" in j.problems[0] and "expects NV12" in j.problems[0]
    assert judge_topology(ev, ev.pair(0, 1), Expectations(topology="NV")).ok


def test_peer_access_dropped_by_driver(snapshot_5060ti):
    ev = load_snapshot(snapshot_5060ti)
    p = copy.deepcopy(ev.pair(1, 2))
    p.cuda_peer_ab = p.cuda_peer_ba = False
    p.p2p_read = p.p2p_write = "CNS"
    j = judge_peer_access(ev, p, Expectations(peer_access=True))
    assert "no peer access between GPU 1" in j.problems[0]
    assert "CNS (chipset not supported)" in j.problems[0] and "P2P-enabled kernel module" in j.problems[0]
    assert judge_peer_access(ev, ev.pair(1, 2), Expectations(peer_access=True)).ok
    assert judge_peer_access(ev, ev.pair(1, 2), Expectations()).skipped


def test_counters_growth_over_budget(snapshot_h200):
    start = load_snapshot(snapshot_h200).gpu(1)
    now = copy.deepcopy(start)
    now.pcie.replay_counter = 37
    now.nvlinks[2].crc_errors = start.nvlinks[2].crc_errors + 4
    j = judge_counters(now, start, Expectations(pcie_replay_budget=0, nvlink_crc_budget=1))
    assert "grew by 37" in j.problems[0] and "NVLink 2 CRC errors grew by 4" in j.problems[1]
    assert judge_counters(start, start, Expectations(pcie_replay_budget=0, nvlink_crc_budget=0)).ok
    rate = judge_counters(now, start, Expectations(nvlink_crc_rate=0.5), elapsed_s=4.0)
    assert "grew at 1.00/s (4 in 4 s; budget 0.5/s per link)" in rate.problems[0]
    assert judge_counters(now, start, Expectations(nvlink_crc_rate=2.0), elapsed_s=4.0).ok


def test_counters_without_budget_report_but_pass(snapshot_h200):
    start = load_snapshot(snapshot_h200).gpu(0)
    now = copy.deepcopy(start)
    for link in now.nvlinks:
        link.crc_errors += 3
    j = judge_counters(now, start, Expectations(), elapsed_s=60.0)
    assert j.ok and any("max 3, total 54" in n for n in j.notes)


def test_reading_label():
    assert PcieReading(3, 4).label() == "Gen3 x4" and PcieReading(None, 16).label() == "Gen? x16"
