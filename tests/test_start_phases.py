"""Where a vLLM start went (serve.start_phases), read from two real server logs of 2x H200 (2026-11-27)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_p2p.serve.start_phases import LAUNCH_MARK, start_phases

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
COMPILES = LOGS / "h200x2_vllm-0.24.0_7b_tp2_start1_compiles.log"
CACHED = LOGS / "h200x2_vllm-0.24.0_7b_tp2_start2_cache.log"


def _with_launch(text: str, stamp: str) -> str:
    head, rest = text.split("\n", 1)  # after the launcher's header, as serve.server writes it
    return f"{head}\n{LAUNCH_MARK}{stamp} (local time)\n{rest}"


def test_a_first_start_that_compiles_splits_into_processes_and_gpu_work() -> None:
    p = start_phases(COMPILES.read_text())
    assert p is not None
    # API server's first line 04:37:26, first worker line 04:38:25, "Starting vLLM server on" 04:39:23
    assert (p.processes_s, p.from_launch, p.gpu_s) == (59.0, False, 58.0)
    assert (p.load_s, p.compile_s, p.graphs_s, p.compile_cache) == (pytest.approx(2.02187), 26.53, 8.0, "compiled")
    assert p.text() == ("59 s starting vLLM's processes (from the API server's first line), 58 s on the GPU "
                        "(weights 2 s, torch.compile 27 s, compiling, CUDA graphs 8 s)")


def test_a_later_start_loads_its_compile_cache() -> None:
    p = start_phases(CACHED.read_text())
    assert p is not None
    assert (p.processes_s, p.gpu_s, p.compile_s, p.graphs_s, p.compile_cache) == (46.0, 41.0, 4.24, 12.0, "loaded")


def test_the_launch_mark_counts_the_processes_from_the_launch() -> None:
    """The API server's first line comes 20-25 s after the launch (Python and vLLM's CLI importing): the header
    the launcher writes is where the start begins."""
    p = start_phases(_with_launch(COMPILES.read_text(), "11-27 04:37:01"))
    assert p is not None and (p.processes_s, p.from_launch) == (84.0, True)
    for other_clock in ("11-27 09:37:01", "11-27 02:37:01"):  # the server's TZ is not ours: hours off either way
        p = start_phases(_with_launch(COMPILES.read_text(), other_clock))
        assert p is not None and (p.processes_s, p.from_launch) == (59.0, False), other_clock


def test_only_the_logs_last_launch_counts() -> None:
    both = start_phases(COMPILES.read_text() + CACHED.read_text())
    assert both == start_phases(CACHED.read_text())


def test_a_log_without_vllms_lines_says_nothing_and_a_start_cut_short_says_what_it_saw() -> None:
    assert start_phases("# pytest-p2p: launching arm p2p_on ...\nTraceback (most recent call last):\n") is None
    cut = "\n".join(line for line in COMPILES.read_text().splitlines() if "Worker" not in line)
    p = start_phases(cut)
    assert p is not None and (p.processes_s, p.gpu_s) == (None, None)
