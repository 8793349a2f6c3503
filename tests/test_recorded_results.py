"""Recorded real results from the 2x H200 NVLink machine re-render, and their facts hold.

fixtures/results/ holds two result trees written by pytest-p2p on that machine on
2026-11-22 (server logs and plots left out): a probe campaign (p2p_on vs p2p_off, 3
interleaved reps) and a vLLM 0.24.0 campaign (TP=2, custom all-reduce disabled, C=1,4,16,
2 reps). fixtures/logs/vllm-0.24.0-h200x2/ holds two of that campaign's server logs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_p2p.probes.vllm_log import parse_server_log
from pytest_p2p.report.render import render_report

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
PROBE = ROOT / "results" / "20261122-121302_h200x2-nvlink_gpu0-gpu1"
VLLM = ROOT / "results" / "20261122-122102_h200x2-vllm_gpu0-gpu1"


@pytest.mark.parametrize("run", [PROBE, VLLM], ids=["probe", "vllm"])
def test_recorded_runs_rerender_without_a_gpu(tmp_path, run):
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    rendered = render_report(copy, plots=False)
    summary = rendered.summary
    assert summary["status"] == "complete" and not summary["simulated"]
    assert not summary["missing"]


def test_recorded_facts(tmp_path):
    """What the machine showed: P2P beats SHM at decode sizes; the tiny model shows no clear uplift."""
    probe = render_report(shutil.copytree(PROBE, tmp_path / "p"), plots=False).summary
    uplift = {u["point"]: u for u in probe["uplift"]}
    assert uplift["s8KiB"]["estimate"] > 0.2 and uplift["s128KiB"]["estimate"] > 1.0
    # judged at the campaign's 1 % split over its 5 sizes (99.6 % intervals): 3 pairs decide every size but 32 KiB
    # (+38.9 %, +3.3 .. +86.8 %: inconclusive); none fails
    assert {p for p, u in uplift.items() if u["passed"] is not True} == {"s32KiB"}
    assert uplift["s32KiB"]["outcome"] == "inconclusive" and uplift["s32KiB"]["level"] == pytest.approx(0.996)
    vllm = render_report(shutil.copytree(VLLM, tmp_path / "v"), plots=False).summary
    c16 = {u["point"]: u for u in vllm["uplift"]}["c16"]
    lo, hi = c16["interval"]
    # reported as measured: -4.4 %, an interval spanning zero: inconclusive (2 pairs), neither pass nor fail
    assert lo < 0 < hi and c16["passed"] is None and c16["outcome"] == "inconclusive"


def test_vllm_logs_attest_both_arms():
    off = parse_server_log((ROOT / "logs/vllm-0.24.0-h200x2/serve_tp2_p2p_off_disable_custom_ar.log").read_text(),
                           source="p2p_off")
    on = parse_server_log((ROOT / "logs/vllm-0.24.0-h200x2/serve_tp2_p2p_on_disable_custom_ar.log").read_text(),
                          source="p2p_on")
    assert off.proof.transport == "SHM" and on.proof.transport == "P2P/CUMEM"
    assert off.problems("SHM") == [] and on.problems("P2P/CUMEM") == []
    assert off.backends_in_use == ["PYNCCL"]
